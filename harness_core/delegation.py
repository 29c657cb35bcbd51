"""Delegation over A2A: the activities of a stand-in workflow send a message to another agent with
a2a-sdk's client, follow its task, and cancel it.

The same path serves an agent of this group (reached at its public URL) and one elsewhere: every
call is A2A over HTTP. A target is an agent id; ``Peers`` turns it into a base URL (the group's own
agents, each at its public URL). The message id is derived from the delegating task, its turn and
the delegation's place in it, so a retried send reaches the same remote task (the remote agent
derives its task id from the message) and the remote model runs once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from collections.abc import Callable
from typing import Any

import anyio
import attrs
import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict, ParseDict
from temporalio import activity
from temporalio.exceptions import ApplicationError

from harness_core.config import RemoteAgentConfig
from harness_core.payloads import SETTLED_STATES as _SETTLED
from harness_core.payloads import DelegationRequest, DelegationResult, ProtoJSON
from harness_core.store import TaskStore

__all__ = ["DelegationActivities", "Peers", "card_problem", "token_digest"]

log = logging.getLogger("harness.delegation")

#: Resolves an agent id to the base URL of its A2A endpoint (None: no such agent).
Peers = Callable[[str], "str | None"]


class DelegationActivities:
    """The delegation activities of one agent: ``peers`` says where the other agents are."""

    def __init__(
        self,
        agent_id: str,
        peers: Peers,
        *,
        store: TaskStore | None = None,
        push_base: Callable[[], str | None] = lambda: None,
        remote: Callable[[str], RemoteAgentConfig | None] = lambda _: None,
    ) -> None:
        self.agent_id = agent_id
        self.peers = peers
        self.store = store
        # Where other agents may push this agent's delegations' updates (None: nowhere).
        self.push_base = push_base
        # ``[[agents]]``: how to reach agents served elsewhere (tenant, headers, push or follow).
        self.remote = remote
        self._cards: dict[str, AgentCard] = {}

    def _url(self, target: str) -> str:
        url = self.peers(target)
        if url is None:
            raise ApplicationError(
                f"there is no agent {target!r} to delegate to (neither in this group nor "
                "configured)",
                type="UnknownAgent",
                non_retryable=True,
            )
        return url

    async def _client(self, http: httpx.AsyncClient, url: str) -> Client:
        card = self._cards.get(url)
        if card is None:
            card = await A2ACardResolver(http, url).get_agent_card()
            self._cards[url] = card
        return ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)

    def _headers(self, request: DelegationRequest) -> dict[str, str]:
        # The identity travels with the call: the remote task belongs to the same participant.
        headers = {"X-Participant-Id": request.participant, "A2A-Version": "1.0"}
        remote = self.remote(request.target)
        for header in remote.headers if remote is not None else ():
            name, variable = header.split("=", 1)
            value = os.environ.get(variable)
            if not value:
                raise ApplicationError(
                    f"the variable {variable} named in the headers of agent {request.target} "
                    "([[agents]]) is not set",
                    type="DelegationRefused",
                    non_retryable=True,
                )
            headers[name] = value
        return headers

    def _tenant(self, target: str) -> str:
        remote = self.remote(target)
        return (remote.tenant or "") if remote is not None else ""

    async def _send_for_push(
        self, request: DelegationRequest, url: str, message: Message
    ) -> DelegationResult | None:
        """Send without waiting, asking the other agent to push its updates to the stand-in;
        None when push is off here, not offered there, or refused (the caller then waits)."""
        base = self.push_base()
        remote = self.remote(request.target)
        follow = remote is not None and remote.updates == "follow"
        if base is None or self.store is None or follow:
            return None
        standin = str(activity.info().workflow_id or "")
        token = secrets.token_urlsafe(24)
        # Only the digest is kept: neither Temporal's history nor the store holds the token.
        await anyio.to_thread.run_sync(self.store.put_push_token, standin, token_digest(token))
        async with httpx.AsyncClient(timeout=30, headers=self._headers(request)) as http:
            client = await self._client(http, url)
            card = self._cards.get(url)
            if card is None or not card.capabilities.push_notifications:
                return None
            configuration = SendMessageConfiguration(
                return_immediately=True,
                # One config per stand-in: a retried send replaces it (and its token) there.
                task_push_notification_config=TaskPushNotificationConfig(
                    id=standin, url=base + standin, token=token
                ),
            )
            try:
                events = [
                    event
                    async for event in client.send_message(
                        SendMessageRequest(
                            message=message,
                            configuration=configuration,
                            tenant=self._tenant(request.target),
                        )
                    )
                ]
            except A2AError as error:
                log.info(
                    "agent %s refused to push to %s (%s); following its task instead",
                    request.target,
                    base,
                    error,
                )
                return None
        if not events:
            return None
        last = events[-1]
        if last.HasField("message"):
            return _from_message(request.target, last.message)
        return attrs.evolve(_from_task(request.target, last.task), pushed=True)

    @activity.defn(name="delegate_send")
    async def delegate_send(self, request: DelegationRequest) -> DelegationResult:
        """Send the message without waiting for the answer: for pushes to the stand-in when the
        other agent offers them, else to be followed (``delegate_wait``)."""
        url = self._url(request.target)
        message = ParseDict(request.message, Message(), ignore_unknown_fields=True)
        pushed = await self._send_for_push(request, url, message)
        if pushed is not None:
            return pushed
        async with httpx.AsyncClient(timeout=30, headers=self._headers(request)) as http:
            client = await self._client(http, url)
            events = [
                event
                async for event in client.send_message(
                    SendMessageRequest(
                        message=message,
                        configuration=SendMessageConfiguration(return_immediately=True),
                        tenant=self._tenant(request.target),
                    )
                )
            ]
        if not events:
            raise ApplicationError(f"agent {request.target} answered nothing")
        last = events[-1]
        if last.HasField("message"):
            return _from_message(request.target, last.message)
        return _from_task(request.target, last.task)

    @activity.defn(name="delegate_wait")
    async def delegate_wait(self, request: DelegationRequest, task_id: str) -> DelegationResult:
        """Follow the other agent's task until it settles: GetTask every 0.1 s at first, backing
        off to 2 s, heartbeating (a worker that dies is noticed, and the wait picks up again)."""
        url = self._url(request.target)
        delay = 0.02
        async with httpx.AsyncClient(timeout=30, headers=self._headers(request)) as http:
            client = await self._client(http, url)
            while True:
                activity.heartbeat()
                task = await client.get_task(
                    GetTaskRequest(id=task_id, tenant=self._tenant(request.target))
                )
                result = _from_task(request.target, task)
                if result.state in _SETTLED:
                    return result
                await anyio.sleep(delay)
                delay = min(delay * 1.5, 2.0)

    @activity.defn(name="delegate_poll")
    async def delegate_poll(self, request: DelegationRequest, task_id: str) -> DelegationResult:
        url = self._url(request.target)
        async with httpx.AsyncClient(timeout=30, headers=self._headers(request)) as http:
            client = await self._client(http, url)
            task = await client.get_task(
                GetTaskRequest(id=task_id, tenant=self._tenant(request.target))
            )
        return _from_task(request.target, task)

    @activity.defn(name="delegate_cancel")
    async def delegate_cancel(self, request: DelegationRequest, task_id: str) -> None:
        url = self._url(request.target)
        async with httpx.AsyncClient(timeout=30, headers=self._headers(request)) as http:
            client = await self._client(http, url)
            try:
                await client.cancel_task(
                    CancelTaskRequest(id=task_id, tenant=self._tenant(request.target))
                )
            except Exception as error:  # an ended remote task cannot be canceled: fine
                log.info("canceling task %s of agent %s: %s", task_id, request.target, error)

    def all(self) -> list[Callable[..., Any]]:
        return [self.delegate_send, self.delegate_wait, self.delegate_poll, self.delegate_cancel]


async def card_problem(url: str) -> tuple[str | None, str]:
    """What is wrong with the agent at ``url`` (None: its card was fetched and is an A2A card),
    and what its card says of it (name, description, skills) for the model."""
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            card = await A2ACardResolver(http, url).get_agent_card()
    except Exception as error:  # unreachable, not JSON, not a card: the same to the caller
        return f"its card could not be fetched ({type(error).__name__})", ""
    if not card.supported_interfaces:
        return "its card names no interface", ""
    skills = "; ".join(f"{s.name}: {s.description}" for s in card.skills)
    return None, f"{card.name}: {card.description}" + (f" Skills: {skills}" if skills else "")


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _from_task(target: str, task: Task) -> DelegationResult:
    status = MessageToDict(task.status)
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
