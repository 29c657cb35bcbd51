"""Delegation over A2A: the activities of a stand-in workflow send a message to another agent with
a2a-sdk's client, follow its task, and cancel it.

The same path serves an agent of this group (reached at its public URL) and one elsewhere: every
call is A2A over HTTP. A target is an agent id; ``Peers`` turns it into a base URL (the group's own
agents, each at its public URL). The message id is derived from the delegating task, its turn and
the delegation's place in it, so a retried send reaches the same remote task (an agent of this
runtime derives its task id from the message) and the remote model runs once.

Failures are ``ApplicationError``s in our own words (``REFUSED``: not retried; ``UNREACHABLE``:
retried); the other side's text never reaches the delegating task. How each call reaches the other
agent (its URL, card, client and headers, and its errors in our words) is in ``calls``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs
import httpx
from a2a.client.errors import A2AClientError
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    ListTasksRequest,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict, ParseDict
from temporalio import activity
from temporalio.exceptions import ApplicationError

from harness_core.agent_tokens import AgentCredential
from harness_core.config import RemoteAgentConfig
from harness_core.delegation.calls import UNREACHABLE, A2ACalls, Peers, card_problem
from harness_core.delegation.cards import CardCache
from harness_core.live import LiveHub
from harness_core.payloads import (
    DECLINED_KEY,
    DelegationProgress,
    DelegationRequest,
    DelegationResult,
    ProtoJSON,
    TaskEvent,
    relayable,
    relayed_status,
    status_key,
)
from harness_core.payloads import SETTLED_STATES as _SETTLED
from harness_core.store import TaskStore
from harness_core.tasks.views import fold_artifacts
from harness_core.temporal.names import DELEGATE_ASK

__all__ = ["DelegationActivities", "Peers", "card_problem", "token_digest"]

log = logging.getLogger("harness.delegation")

#: The most progress statuses one streamed send relays (the latest).
MAX_RELAYED = 32
#: A followed task's progress is relayed at most this often (seconds).
RELAY_EVERY = 1.0
# The other agent's tasks an ask's cancel looks through for the one its message started.
_LOOKED_AT = 20


class DelegationActivities(A2ACalls):
    """The delegation activities of one agent: ``peers`` says where the other agents are."""

    def __init__(
        self,
        agent_id: str,
        peers: Peers,
        *,
        store: TaskStore | None = None,
        push_base: Callable[[], str | None] = lambda: None,
        remote: Callable[[str], RemoteAgentConfig | None] = lambda _: None,
        stream_for: float = 0.0,
        live: LiveHub | None = None,
        credential: AgentCredential | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.peers = peers
        self.store = store
        # Where other agents may push this agent's delegations' updates (None: nowhere).
        self.push_base = push_base
        # ``[[agents]]``: how to reach agents served elsewhere (tenant, headers, push or follow).
        self.remote = remote
        # ``[delegation] stream_for``: how long a send follows the answer on its own stream.
        self.stream_for = stream_for
        # The delegating agent's live fan-out: other agents' progress shown to its streams.
        self.live = live if live is not None else LiveHub()
        # Signs each call with the agent's card key (None: the agent has none).
        self.credential = credential
        self._cards = CardCache()

    def _push_config(
        self, request: DelegationRequest, card: AgentCard, standin: str
    ) -> TaskPushNotificationConfig | None:
        """A webhook for the stand-in with a fresh token, whose digest alone is stored; None
        when push is off here, or not offered by the other agent, or ``updates = "follow"``."""
        base = self.push_base()
        remote = self.remote(request.target)
        follow = remote is not None and remote.updates == "follow"
        if base is None or self.store is None or follow or not card.capabilities.push_notifications:
            return None
        token = secrets.token_urlsafe(24)
        # Only the digest is kept: neither Temporal's history nor the store holds the token.
        self.store.put_push_token(standin, token_digest(token))
        # One config per stand-in: a retried send replaces it (and its token) there.
        return TaskPushNotificationConfig(id=standin, url=base + standin, token=token)

    @activity.defn(name="delegate_send")
    async def delegate_send(self, request: DelegationRequest, stale: str = "") -> DelegationResult:
        """Send the message. First the answer is followed on the send's own stream, for up to
        ``stream_for`` seconds (most answers come in that time, with no push or poll); a task
        still running then is followed by pushes to the stand-in when the other agent offers
        them, else by ``delegate_wait``. ``stale``: the ``status_key`` of the status the task
        the message continues had before it (``delegate_status``), which is no answer."""
        message = ParseDict(request.message, Message(), ignore_unknown_fields=True)
        async with self._calling(request) as (http, url):
            card = await self._card(http, url)
            remote = self.remote(request.target)
            streamed = remote is None or remote.updates == "stream"
            if streamed and self.stream_for > 0 and card.capabilities.streaming:
                result = await self._stream(request, http, url, message, stale)
                if result.state not in _SETTLED:
                    result = await self._ask_for_pushes(request, http, url, card, result, stale)
            else:
                result = await self._send(request, http, url, card, message, stale)
            return attrs.evolve(result, stale=stale)

    @activity.defn(name="delegate_status")
    async def delegate_status(self, request: DelegationRequest) -> str:
        """The ``status_key`` of the task that ``request``'s message continues, before it is
        sent: while the task shows that status (its question), the other agent has not answered."""
        async with self._calling(request) as (http, url):
            client = await self._client(http, url)
            task = await self._read(client, request, str(request.message.get("taskId", "")))
        return status_key(MessageToDict(task.status))

    async def _stream(
        self,
        request: DelegationRequest,
        http: httpx.AsyncClient,
        url: str,
        message: Message,
        stale: str,
    ) -> DelegationResult:
        """SendStreamingMessage, read until the task settles or ``stream_for`` passes: the last
        state, the artifacts so far, and the progress seen (shown live meanwhile to the
        delegating task's streams in this process)."""
        client = await self._client(http, url, streaming=True)
        result = DelegationResult(target=request.target, remote_task_id="", state="")
        events: list[TaskEvent] = []
        progress: list[ProtoJSON] = []
        relayed: set[str] = set()
        deadline = anyio.current_time() + self.stream_for
        # The stream is read for ``stream_for`` once it named the task (until then, up to the
        # HTTP timeout): a task is never left unknown, so the message is never sent twice.
        with anyio.CancelScope() as scope:
            stream = client.send_message(
                SendMessageRequest(message=message, tenant=self._tenant(request.target))
            )
            async with contextlib.aclosing(stream):  # pyright: ignore[reportArgumentType]
                async for event in stream:
                    if event.HasField("message"):
                        return _from_message(request.target, event.message)
                    known = result.remote_task_id
                    result, status = _apply(result, event, events, stale)
                    if result.remote_task_id and not known:
                        scope.deadline = deadline
                        await self._note_remote(result.remote_task_id)
                    if result.state in _SETTLED:
                        break
                    if status is not None and "message" in status:
                        # A message is relayed once, also if the stream shows it twice (the
                        # task it began with, then the update; each copy with its own time).
                        message_id = str(status["message"].get("messageId", ""))
                        if message_id and message_id in relayed:
                            continue
                        relayed.add(message_id)
                        status = relayable(status)
                        progress.append(status)
                        self._show(request, result, status)
        if not result.remote_task_id:
            raise ApplicationError(
                f"agent {request.target} answered the message with no task",
                type=UNREACHABLE,
            )
        # A chatty agent's latest progress is enough to relay.
        progress = progress[-MAX_RELAYED:]
        return attrs.evolve(
            result,
            artifacts=tuple(fold_artifacts(events)),
            progress=tuple(progress),
        )

    def _show(
        self, request: DelegationRequest, result: DelegationResult, status: ProtoJSON
    ) -> None:
        """Show another agent's progress live to the delegating task's streams in this process
        (its durable copy, the same event, comes with the answer or the stand-in's relay)."""
        progress = DelegationProgress(
            stand_in=str(activity.info().workflow_id or ""),
            target=request.target,
            remote_task_id=result.remote_task_id,
            status=status,
        )
        shown = relayed_status(progress, request.parent_task_id, request.parent_context_id)
        shown["timestamp"] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        self.live.publish(
            self.agent_id,
            request.parent_task_id,
            "status",
            {
                "taskId": request.parent_task_id,
                "contextId": request.parent_context_id,
                "status": shown,
            },
            # Not kept for streams that join later: no turn of the task ends to forget it.
            keep=False,
        )

    async def _ask_for_pushes(
        self,
        request: DelegationRequest,
        http: httpx.AsyncClient,
        url: str,
        card: AgentCard,
        result: DelegationResult,
        stale: str,
    ) -> DelegationResult:
        """The task outlived the stream: register the stand-in's webhook for it (when pushes
        are on), then read it once, so no update between the stream and the webhook is lost."""
        config = await anyio.to_thread.run_sync(
            self._push_config, request, card, str(activity.info().workflow_id or "")
        )
        client = await self._client(http, url)
        tenant = self._tenant(request.target)
        pushed = False
        if config is not None:
            config.task_id = result.remote_task_id
            config.tenant = tenant
            try:
                await client.create_task_push_notification_config(config)
                pushed = True
            except A2AError as error:
                _no_pushes(request, config, error)
        task = await self._read(client, request, result.remote_task_id)
        return attrs.evolve(
            _from_task(request.target, task, stale), pushed=pushed, progress=result.progress
        )

    async def _send(
        self,
        request: DelegationRequest,
        http: httpx.AsyncClient,
        url: str,
        card: AgentCard,
        message: Message,
        stale: str,
    ) -> DelegationResult:
        """SendMessage returning at once, with the stand-in's webhook when pushes are on."""
        config = await anyio.to_thread.run_sync(
            self._push_config, request, card, str(activity.info().workflow_id or "")
        )
        client = await self._client(http, url)
        send = SendMessageRequest(
            message=message,
            configuration=SendMessageConfiguration(
                return_immediately=True, task_push_notification_config=config
            ),
            tenant=self._tenant(request.target),
        )
        try:
            events = [event async for event in client.send_message(send)]
        except A2AError as error:
            if config is None or isinstance(error, A2AClientError):
                raise
            _no_pushes(request, config, error)
            send.configuration.ClearField("task_push_notification_config")
            config = None
            events = [event async for event in client.send_message(send)]
        last = _last(request.target, events)
        if last.HasField("message"):
            return _from_message(request.target, last.message)
        await self._note_remote(last.task.id)
        return attrs.evolve(_from_task(request.target, last.task, stale), pushed=config is not None)

    async def _note_remote(self, remote_task_id: str, stand_in: str = "") -> None:
        """Keep the other agent's task id for the stand-in (this workflow, or ``stand_in``) as
        soon as it is known: a cancel that comes while the send is still running then cancels
        that task too."""
        if self.store is not None and remote_task_id:
            await anyio.to_thread.run_sync(
                self.store.put_remote_task,
                stand_in or str(activity.info().workflow_id or ""),
                remote_task_id,
            )

    @activity.defn(name=DELEGATE_ASK)
    async def delegate_ask(
        self, request: DelegationRequest, stand_in: str, patience: float
    ) -> DelegationResult:
        """Ask first, within the delegating task's workflow task: a blocking send, for up to
        ``patience`` seconds. An answer by then (the other agent's task settled) needs no
        stand-in; else the result's state is empty, and the stand-in ``stand_in`` sends the same
        message (the other agent takes it once) and follows the task. An agent in ``[[agents]]``
        with ``updates = "push"`` or ``"follow"`` is never asked this way."""
        result = DelegationResult(target=request.target, remote_task_id="", state="")
        if not self._asked_first(request.target):
            return result
        message = ParseDict(request.message, Message(), ignore_unknown_fields=True)
        with anyio.move_on_after(patience):
            result = await self._ask(request, message, immediately=False)
        if result.state in _SETTLED:
            return result
        # Still running: its stand-in follows it (a send names the task once the other agent
        # takes the message in, which may wait for the end of its turn).
        await self._note_remote(result.remote_task_id, stand_in)
        return attrs.evolve(result, state="")

    def _asked_first(self, target: str) -> bool:
        """Whether ``delegate_ask`` sends to ``target`` (not to an agent in ``[[agents]]`` that
        pushes or is followed from the start)."""
        remote = self.remote(target)
        return remote is None or remote.updates == "stream"

    async def _ask(
        self, request: DelegationRequest, message: Message, *, immediately: bool
    ) -> DelegationResult:
        """SendMessage, blocking or returning at once: the task (or direct answer) it got."""
        async with self._calling(request) as (http, url):
            client = await self._client(http, url)
            send = SendMessageRequest(
                message=message,
                configuration=SendMessageConfiguration(return_immediately=immediately),
                tenant=self._tenant(request.target),
            )
            last = _last(request.target, [event async for event in client.send_message(send)])
        if last.HasField("message"):
            return _from_message(request.target, last.message)
        return _from_task(request.target, last.task)

    @activity.defn(name="delegate_wait")
    async def delegate_wait(
        self, request: DelegationRequest, task_id: str, seen: str = "", relay: bool = True
    ) -> DelegationResult:
        """Follow the other agent's task until it settles, or (``relay``, at most every
        ``RELAY_EVERY`` seconds) shows a status with a message: progress, which the stand-in
        relays before it waits again. A status whose ``status_key`` is ``seen`` is old news.
        GetTask every 20 ms at first, backing off to 2 s, heartbeating (a worker that dies is
        noticed, and the wait picks up again)."""
        delay = 0.02
        since = anyio.current_time()
        async with self._calling(request) as (http, url):
            client = await self._client(http, url)
            while True:
                activity.heartbeat()
                task = await self._read(client, request, task_id)
                result = _from_task(request.target, task, seen)
                if result.state in _SETTLED:
                    return result
                status = MessageToDict(task.status)
                news = "message" in status and status_key(status) != seen
                if relay and news and anyio.current_time() - since >= RELAY_EVERY:
                    return attrs.evolve(result, progress=(relayable(status),))
                await anyio.sleep(delay)
                delay = min(delay * 1.5, 2.0)

    @activity.defn(name="delegate_poll")
    async def delegate_poll(
        self, request: DelegationRequest, task_id: str, seen: str = "", patience: float = 0.0
    ) -> DelegationResult:
        """Read the other agent's task; for up to ``patience`` seconds until it settles (it
        pushed that it did: its reads may lag its pushes by a moment)."""
        delay = 0.01
        deadline = anyio.current_time() + patience
        async with self._calling(request) as (http, url):
            client = await self._client(http, url)
            while True:
                result = _from_task(
                    request.target, await self._read(client, request, task_id), seen
                )
                if result.state in _SETTLED or anyio.current_time() >= deadline:
                    return result
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.5)

    @activity.defn(name="delegate_cancel")
    async def delegate_cancel(self, request: DelegationRequest, task_id: str) -> None:
        """Cancel the other agent's task: ``task_id``, or (empty) the one the stand-in's send
        noted before it was cut off, if any."""
        if not task_id and self.store is not None:
            standin = str(activity.info().workflow_id or "")
            task_id = await anyio.to_thread.run_sync(self.store.remote_task, standin) or ""
        if not task_id and request.asked and self._asked_first(request.target):
            task_id = await self._sent_task(request)
        if not task_id:
            return
        try:
            async with self._calling(request) as (http, url):
                client = await self._client(http, url)
                await client.cancel_task(
                    CancelTaskRequest(id=task_id, tenant=self._tenant(request.target))
                )
        except Exception as error:  # an ended remote task cannot be canceled: fine
            log.info("canceling task %s of agent %s: %s", task_id, request.target, error)

    async def _sent_task(self, request: DelegationRequest) -> str:
        """The task that an ask gave up waiting for, before any send named it: among the
        participant's latest tasks at the other agent (ListTasks), the one that holds the
        message; else the same message again (the other agent takes it once) names it, once
        the other agent takes it in (a turn that runs may hold it for a while)."""
        message_id = str(request.message.get("messageId", ""))
        with contextlib.suppress(A2AError, ApplicationError):
            async with self._calling(request) as (http, url):
                client = await self._client(http, url)
                listed = await client.list_tasks(
                    ListTasksRequest(tenant=self._tenant(request.target), page_size=_LOOKED_AT)
                )
            for task in listed.tasks:
                if any(m.message_id == message_id for m in task.history):
                    return task.id
        message = ParseDict(request.message, Message(), ignore_unknown_fields=True)
        return (await self._ask(request, message, immediately=True)).remote_task_id

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.delegate_ask,
            self.delegate_send,
            self.delegate_status,
            self.delegate_wait,
            self.delegate_poll,
            self.delegate_cancel,
        ]


def _no_pushes(
    request: DelegationRequest, config: TaskPushNotificationConfig, error: A2AError
) -> None:
    log.info(
        "agent %s refused to push to %s (%s); following its task instead",
        request.target,
        config.url,
        type(error).__name__,
    )


def _last(target: str, events: list[StreamResponse]) -> StreamResponse:
    """A send's answer: its last event (an agent that answered nothing could not be reached)."""
    if not events:
        raise ApplicationError(f"agent {target} answered nothing", type=UNREACHABLE)
    return events[-1]


def _apply(
    result: DelegationResult, event: StreamResponse, events: list[TaskEvent], stale: str
) -> tuple[DelegationResult, ProtoJSON | None]:
    """One event of the other agent's stream: the result it leaves, and the new status it
    brought (None: none, or the ``stale`` one). Artifact updates are kept in ``events`` to fold
    at the end."""
    if event.HasField("task"):
        task = event.task
        for artifact in task.artifacts:
            events.append(TaskEvent(0, "artifact", {"artifact": MessageToDict(artifact)}))
        status = _unless_declined(result.target, MessageToDict(task.status), task.metadata)
        task_id = task.id
    elif event.HasField("status_update"):
        update = event.status_update
        status = _unless_declined(result.target, MessageToDict(update.status), update.metadata)
        task_id = update.task_id
    elif event.HasField("artifact_update"):
        events.append(TaskEvent(0, "artifact", MessageToDict(event.artifact_update)))
        return result, None
    else:
        return result, None
    if status_key(status) == stale:
        return attrs.evolve(result, remote_task_id=task_id), None
    parts = tuple(status.get("message", {}).get("parts") or ())
    state = str(status.get("state", ""))
    return attrs.evolve(result, remote_task_id=task_id, state=state, parts=parts), status


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _unless_declined(target: str, status: ProtoJSON, metadata: Any) -> ProtoJSON:
    """The other agent's status, or, when a plugin's turn gate made it decline the turn (its
    task rests as it was, saying so in its metadata), a rejection in our words: the delegation
    has its answer, and waits no longer."""
    if DECLINED_KEY not in MessageToDict(metadata):
        return status
    text = f"the agent {target} declined to take this turn"
    return {"state": "TASK_STATE_REJECTED", "message": {"parts": [{"text": text}]}}


def _from_task(target: str, task: Task, seen: str = "") -> DelegationResult:
    """The other agent's task as a result; its status ``seen`` before is reported as WORKING
    (the other agent has not answered since)."""
    status: ProtoJSON = _unless_declined(target, MessageToDict(task.status), task.metadata)
    if status_key(status) == seen:
        status = {"state": "TASK_STATE_WORKING"}
    state = str(status.get("state", ""))
    parts = tuple(status.get("message", {}).get("parts") or ())
    artifacts = tuple(MessageToDict(a) for a in task.artifacts)
    return DelegationResult(
        target=target, remote_task_id=task.id, state=state, parts=parts, artifacts=artifacts
    )


def _from_message(target: str, message: Message) -> DelegationResult:
    body: ProtoJSON = MessageToDict(message)
    return DelegationResult(
        target=target,
        remote_task_id="",
        state="TASK_STATE_COMPLETED",
        parts=tuple(body.get("parts") or ()),
    )
