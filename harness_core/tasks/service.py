"""One agent's tasks, as the HTTP layer sees them: send, read, follow, list and cancel.

Backend-neutral: every Temporal call goes through the bridge. Running tasks are read from their
workflows; ended tasks from the agent's store (their workflow may be gone, or in another process's
retention), so a task stays readable after it ended and after a restart.

A first message (no task id) gets a task id derived from the agent, the participant, the message id and
a digest of its content, so a client that retries it reaches the same workflow: the start itself is
idempotent, and the workflow's dedupe by message id makes the delivery idempotent too. The same id with
other content starts another task.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import logging
import sqlite3
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, TypeVar, cast

import anyio
import attrs
from a2a.types import TaskStatus
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from harness_core.delegation.workflow import DelegationWorkflow
from harness_core.errors import (
    InvalidRequestValueError,
    TaskBusyError,
    TaskClosedError,
    TaskNotCancelableError,
    TaskNotFoundError,
)
from harness_core.payloads import (
    TERMINAL_STATES,
    Archive,
    EventPage,
    Inbound,
    IndexEntry,
    ProtoJSON,
    Receipt,
    TaskEvent,
    TaskRecord,
    TaskStart,
    TaskTail,
    TaskView,
    may_access,
    relayable,
)
from harness_core.pool import TemporalConnection
from harness_core.secrets import SECRETS
from harness_core.store import IndexRow, TaskStore, content_digest
from harness_core.tasks.state import task_closed_message
from harness_core.tasks.workflow import TaskWorkflow
from harness_core.temporal.names import DELEGATION_WORKFLOW, TASK_WORKFLOW

__all__ = ["MAX_MESSAGE_BYTES", "Delivery", "TaskService", "derive_task_id", "fold_artifacts"]

log = logging.getLogger("harness.tasks")

T = TypeVar("T")

# How often a stream polls a quiet task's durable log: soon after a change, then backing off.
FOLLOW_FIRST_DELAY = 0.02
FOLLOW_MAX_DELAY = 0.5
# After a turn of the task ended in this process (its outcome is durable within milliseconds),
# or its store entry was written here: a stream reads the task again this soon.
AFTER_TURN_DELAY = 0.004
#: The largest message (as JSON) a task accepts. It reaches Temporal through the claim check
#: (``harness_core.temporal.codec``), so Temporal's 2 MB payload limit does not apply; the
#: endpoint's ``[server] max_request_bytes`` usually refuses a large request first.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# How long a task the index learned of before its workflow started may go unconfirmed (nothing
# written over it) before a read checks that its workflow exists.
_UNCONFIRMED_SECONDS = 30.0
# How long a sender retries a task that is archiving its run (TaskBusy).
_BUSY_PATIENCE = 60.0
# The longest single wait before a query refused as busy is tried again.
_QUERY_PATIENCE = 3.0
# Task ids known to run on this agent's queue (ownership never changes).
_OWNED_CACHE = 4096


def derive_task_id(agent_id: str, participant: str | None, message_id: str, digest: str) -> str:
    """The id of the task a first message starts: the same for a retry of the same message (same id,
    sender and content), another for the same id with other content."""
    key = f"{agent_id}\0{participant or ''}\0{message_id}\0{digest}"
    digest_bytes = hashlib.sha256(key.encode()).digest()
    return str(uuid.UUID(bytes=digest_bytes[:16], version=4))


def _not_found(exc: RPCError) -> bool:
    return exc.status == RPCStatusCode.NOT_FOUND


def fold_artifacts(events: list[TaskEvent] | tuple[TaskEvent, ...]) -> list[ProtoJSON]:
    """The task's artifacts from its artifact updates: a chunk with ``append`` adds its parts (text
    joins the text before it), any other replaces the artifact; first emitted first."""
    artifacts: dict[str, ProtoJSON] = {}
    for event in events:
        if event.kind != "artifact":
            continue
        artifact = cast("ProtoJSON", event.body.get("artifact") or {})
        artifact_id = str(artifact.get("artifactId", ""))
        known = artifacts.get(artifact_id)
        if not event.body.get("append") or known is None:
            artifacts[artifact_id] = artifact
            continue
        parts: list[ProtoJSON] = [
            dict(p) for p in cast("list[ProtoJSON]", known.get("parts") or [])
        ]
        for part in cast("list[ProtoJSON]", artifact.get("parts") or []):
            last = parts[-1] if parts else None
            if last is not None and set(last) == {"text"} and set(part) == {"text"}:
                last["text"] = str(last["text"]) + str(part["text"])
            else:
                parts.append(dict(part))
        artifacts[artifact_id] = {**known, "parts": parts}
    return list(artifacts.values())


@attrs.frozen
class Delivery:
    """What a sent message got: the task (or the agent's direct reply), and where its events start."""

    task_id: str
    duplicate: bool
    cursor: int
    view: TaskView
    #: The agent answered a first message with a Message and no task.
    reply: ProtoJSON | None = None


class TaskService:
    """The operations on one agent's tasks. Cancellation of a caller cancels its Temporal call.

    Two checks guard every operation on a task, and a task that fails either reads as not found
    (and is left unchanged):

    * Ownership: the task's workflow runs on this agent's task queue (a described workflow, cached
      per id), and carries this agent's id. Another agent's task, in the same namespace, fails it.
    * Access (``may_access``): the caller's participant is on the task, or both are anonymous.

    A task's content is read from two places: the agent's store (runs archived before the workflow
    continued as new, and the whole task once it ended) and the workflow's current run.
    """

    def __init__(
        self,
        *,
        agent_id: str,
        queue: str,
        connection: TemporalConnection,
        store: TaskStore,
        start: TaskStart,
    ) -> None:
        self.agent_id = agent_id
        self.queue = queue
        self._connection = connection
        self._store = store
        # How the agent's new tasks run (the ids are filled in per task).
        self._start = start
        self._owned: OrderedDict[str, None] = OrderedDict()

    @property
    def connection(self) -> TemporalConnection:
        """The agent's leased Temporal connection (client and bridge)."""
        return self._connection

    async def _call(self, fn: Callable[[Client], Awaitable[T]]) -> T:
        client = self._connection.client

        async def run() -> T:
            return await fn(client)

        return await self._connection.bridge.call(run)

    async def _record(self, task_id: str) -> TaskRecord | None:
        record = await anyio.to_thread.run_sync(self._store.get, task_id)
        return record if record is not None and record.agent_id == self.agent_id else None

    def _own(self, task_id: str) -> None:
        self._owned[task_id] = None
        self._owned.move_to_end(task_id)
        while len(self._owned) > _OWNED_CACHE:
            self._owned.popitem(last=False)

    async def _owner(self, task_id: str) -> bool | None:
        """True when the task's workflow runs on this agent's queue, False when it runs on another
        (or is no task), None when there is no such workflow."""
        if task_id in self._owned:
            self._owned.move_to_end(task_id)
            return True
        owner = await self._runs_here(task_id, TASK_WORKFLOW)
        if owner:
            self._own(task_id)
        return owner

    async def _runs_here(self, workflow_id: str, workflow_type: str) -> bool | None:
        """True when ``workflow_id`` is a ``workflow_type`` on this agent's queue, False when it is
        something else, None when there is no such workflow."""

        async def describe(client: Client) -> tuple[str, str]:
            info = await client.get_workflow_handle(workflow_id).describe()
            return info.task_queue, info.workflow_type

        try:
            queue, kind = await self._call(describe)
        except RPCError as exc:
            if _not_found(exc) or exc.status == RPCStatusCode.INVALID_ARGUMENT:
                return None
            raise
        return queue == self.queue and kind == workflow_type

    # -- send -------------------------------------------------------------------------------------

    async def send(
        self,
        message: ProtoJSON,
        *,
        participant: str | None,
        wait: bool,
        push_config: ProtoJSON | None = None,
    ) -> Delivery:
        """Deliver a user message: to its task when it names one, else to a new task.

        With ``wait``, return once the task has settled after this message (completed, failed,
        canceled, or waiting for input). Raises ``TaskNotFoundError`` for an unknown task id,
        ``TaskClosedError`` for a message to an ended task (a retry of a message the task already
        has is not an error: it gets the task as it is) and ``InvalidRequestValueError`` for a
        message id already used for a different message.
        """
        # Any agent's secret a client pasted is masked before the message is stored anywhere.
        # Large content is the claim check's (``harness_core.temporal.codec``): it never
        # reaches Temporal's history inline.
        message = cast("ProtoJSON", SECRETS.redact_json(message))
        size = len(json.dumps(message, separators=(",", ":")).encode())
        if size > MAX_MESSAGE_BYTES:
            raise InvalidRequestValueError(
                f"the message is {size} bytes as JSON; at most {MAX_MESSAGE_BYTES} are accepted"
            )
        message_id = str(message.get("messageId", ""))
        inbound = Inbound(
            message=message,
            participant=participant,
            wait=wait,
            agent_id=self.agent_id,
            size=size,
            digest=content_digest(message),
            push=push_config is not None,
        )
        task_id = str(message.get("taskId") or "")
        if not task_id:
            task_id = derive_task_id(self.agent_id, participant, message_id, inbound.digest)
        if push_config is not None:
            # Kept before the message reaches the task, so its first update is pushed.
            await self._put_push_config(task_id, participant, push_config)
        if message.get("taskId"):
            return await self._deliver_existing(task_id, inbound)
        # The record outlives the workflow's retention: a late retry must find it, not restart it.
        if await self._record(task_id) is not None:
            return await self._closed_delivery(task_id, inbound)
        context_id = str(message.get("contextId") or "") or str(
            uuid.uuid5(uuid.NAMESPACE_URL, task_id)
        )
        start = attrs.evolve(
            self._start,
            task_id=task_id,
            context_id=context_id,
            agent_id=self.agent_id,
            first=inbound,
        )

        async def update_with_start(client: Client) -> Receipt:
            # Built on the Temporal loop: the operation holds an asyncio future.
            operation = WithStartWorkflowOperation(
                TaskWorkflow.run,
                start,
                id=task_id,
                task_queue=self.queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                # A task id is never reused: a retry after the task ended must find it, not
                # start it again.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
            try:
                return await client.execute_update_with_start_workflow(  # pyright: ignore[reportUnknownMemberType]
                    TaskWorkflow.deliver, inbound, start_workflow_operation=operation
                )
            except BaseException:
                _retrieve_start_outcome(operation)
                raise

        self._own(task_id)
        await self._note_start(start, inbound)
        try:
            receipt = await self._retrying(lambda: self._call(update_with_start))
        except WorkflowAlreadyStartedError:
            return await self._closed_delivery(task_id, inbound)
        except WorkflowUpdateFailedError as exc:
            raise _update_error(exc, task_id) from None
        except RPCError as exc:
            if exc.status == RPCStatusCode.ALREADY_EXISTS or _not_found(exc):
                return await self._closed_delivery(task_id, inbound)
            # The start's outcome is unknown (a start the server deduplicated, an answer that
            # was lost): if the task's workflow exists, it has the message or takes it now, and
            # the update finds out without running it twice. Only then is this an outage.
            with contextlib.suppress(RPCError):
                if await self._runs_here(task_id, TASK_WORKFLOW):
                    return await self._deliver_existing(task_id, inbound)
            await self._forget_start(task_id)
            raise
        return await self._delivered(task_id, receipt)

    async def _note_start(self, start: TaskStart, inbound: Inbound) -> None:
        """List a new task before its workflow starts: a blocking sender's task is then listed
        (SUBMITTED) even while its turn waits for a free worker slot. Anything the workflow
        writes later wins over this entry."""
        message = {**inbound.message, "taskId": start.task_id, "contextId": start.context_id}
        people = (inbound.participant,) if inbound.participant else ()
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        entry = IndexEntry(
            archive=Archive(
                task_id=start.task_id,
                agent_id=self.agent_id,
                context_id=start.context_id,
                first_message=0,
                messages=(message,),
                events=(),
                participants=people,
                senders=((str(message.get("messageId", "")), people[0]),) if people else (),
            ),
            status={"state": "TASK_STATE_SUBMITTED", "timestamp": stamp},
            last_seq=0,
            messages=1,
            busy=True,
        )
        try:
            await anyio.to_thread.run_sync(partial(self._store.checkpoint, entry, partial=True))
        except sqlite3.Error as error:
            log.warning("task %s: the index did not take it: %s", start.task_id, error)

    async def _forget_start(self, task_id: str) -> None:
        """The start failed here: take back the entry if no workflow wrote over it (if the start
        did happen after all, the workflow writes again when its turn starts)."""
        with anyio.CancelScope(shield=True), contextlib.suppress(sqlite3.Error):
            await anyio.to_thread.run_sync(self._store.forget_unstarted, task_id)

    async def _retrying(self, call: Callable[[], Awaitable[Receipt]]) -> Receipt:
        """An update, tried again while Temporal says the workflow is not ready for it: the
        workflow task it was to finish in failed (a signal, such as a cancel, arrived while that
        task ended the workflow), and the next one will take it, or find the task closed. The
        update's id is the same each time, so it is delivered once."""
        delay = 0.05
        deadline = time.monotonic() + _BUSY_PATIENCE
        while True:
            try:
                return await call()
            except RPCError as exc:
                if exc.status != RPCStatusCode.FAILED_PRECONDITION or time.monotonic() > deadline:
                    raise
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _delivered(self, task_id: str, receipt: Receipt) -> Delivery:
        """The sender's answer, from the receipt alone (no read of the task): its status, this
        exchange's messages and the artifacts it produced. GetTask shows the whole task.

        A retry of a message the task already had gets the whole task instead: its exchange
        happened before the receipt's cursor.
        """
        if not receipt.duplicate and not receipt.closed:
            # An ended task's final write (in the same workflow task) already has it all.
            await self._note(task_id, receipt)
        if receipt.duplicate:
            view = await self._view(task_id)
            if view is not None:
                return Delivery(
                    task_id=task_id,
                    duplicate=True,
                    cursor=receipt.cursor,
                    view=view,
                    reply=receipt.reply,
                )
        task = self._assemble(
            task_id,
            receipt.context_id,
            receipt.status,
            list(receipt.messages),
            list(receipt.events),
        )
        view = TaskView(
            task=task,
            last_seq=receipt.last_seq,
            closed=receipt.closed,
            participants=receipt.participants,
            agent_id=self.agent_id,
            busy=receipt.busy,
        )
        return Delivery(
            task_id=task_id,
            duplicate=receipt.duplicate,
            cursor=receipt.cursor,
            view=view,
            reply=receipt.reply,
        )

    # -- push notification configs ------------------------------------------------------------------

    async def _put_push_config(
        self, task_id: str, participant: str | None, config: ProtoJSON
    ) -> ProtoJSON:
        config_id = str(config.get("id") or "") or uuid.uuid4().hex
        body = {**config, "id": config_id, "taskId": task_id}
        body.pop("tenant", None)
        await anyio.to_thread.run_sync(
            self._store.put_push_config, task_id, config_id, participant or "", body
        )
        return body

    async def create_push_config(
        self, task_id: str, participant: str | None, config: ProtoJSON
    ) -> ProtoJSON:
        """Keep a webhook for the task and tell its workflow to push. Raises
        ``TaskNotFoundError``."""
        view = await self.view(task_id, participant)
        if view is None:
            raise TaskNotFoundError(f"task {task_id} not found")
        body = await self._put_push_config(task_id, participant, config)
        if not view.closed:
            with contextlib.suppress(RPCError):
                await self._call(
                    lambda c: c.get_workflow_handle(task_id).signal(TaskWorkflow.enable_push)
                )
        return body

    async def push_configs(self, task_id: str, participant: str | None) -> list[ProtoJSON]:
        """The task's webhooks the caller may see. Raises ``TaskNotFoundError``."""
        view = await self.view(task_id, participant)
        if view is None:
            raise TaskNotFoundError(f"task {task_id} not found")
        configs = await anyio.to_thread.run_sync(self._store.push_configs, task_id)
        return [
            body for _, owner, body in configs if may_access((owner,) if owner else (), participant)
        ]

    async def delete_push_config(
        self, task_id: str, config_id: str, participant: str | None
    ) -> bool:
        """Remove a webhook of the task; False when it has none of that id."""
        configs = await self.push_configs(task_id, participant)
        if not any(c.get("id") == config_id for c in configs):
            return False
        return await anyio.to_thread.run_sync(self._store.delete_push_config, task_id, config_id)

    async def accept_push(self, standin_id: str, token: str, body: ProtoJSON) -> bool:
        """Take a push of another agent for one of this agent's delegations: True when the token
        matches the stand-in's digest (compared in constant time) and the stand-in is a
        delegation of this agent (on its queue); then, and only then, the stand-in is woken with
        the pushed state. Anything else wakes nothing. Repeated pushes change nothing more."""
        digest = await anyio.to_thread.run_sync(self._store.push_token, standin_id)
        offered = hashlib.sha256(token.encode()).hexdigest()
        if digest is None or not hmac.compare_digest(digest, offered):
            return False

        try:
            if not await self._runs_here(standin_id, DELEGATION_WORKFLOW):
                return False
        except RPCError:
            return False
        update: object = body.get("statusUpdate") or body.get("task") or {}
        try:
            # Another agent's JSON, in the shape A2A gives a status (and our rendering of it).
            raw = cast("ProtoJSON", update).get("status") if isinstance(update, dict) else None
            status: ProtoJSON = MessageToDict(
                ParseDict(raw or {}, TaskStatus(), ignore_unknown_fields=True)
            )
        except (ParseError, TypeError, ValueError):
            return True  # nothing a stand-in can use; the token was right, so no 401
        status = relayable(status)
        state = str(status.get("state", ""))
        if not state:
            return True  # an artifact, say: the stand-in reads the task once it settles
        with contextlib.suppress(RPCError):
            await self._call(
                lambda c: c.get_workflow_handle(standin_id).signal(
                    DelegationWorkflow.pushed, args=[state, status]
                )
            )
        return True

    async def _note(self, task_id: str, receipt: Receipt) -> None:
        """Tell the listing index what the receipt says, so that the sender's next read (or
        listing) shows the task as its answer did. The workflow's own writes (when a turn starts,
        the task rests or ends) make the index right whatever happens here; this one may fail."""
        first = receipt.first_message
        entry = IndexEntry(
            archive=Archive(
                task_id=task_id,
                agent_id=self.agent_id,
                context_id=receipt.context_id,
                first_message=max(first, 0),
                messages=receipt.messages if first >= 0 else (),
                events=receipt.events,
                participants=receipt.participants,
            ),
            status=receipt.status,
            last_seq=receipt.last_seq,
            messages=first + len(receipt.messages) if first >= 0 else -1,
            busy=receipt.busy,
        )
        try:
            await anyio.to_thread.run_sync(partial(self._store.checkpoint, entry, partial=True))
        except sqlite3.Error as error:
            log.warning("task %s: the index did not take the receipt: %s", task_id, error)

    async def _deliver_existing(self, task_id: str, inbound: Inbound) -> Delivery:
        owner = await self._owner(task_id)
        if owner is False:
            raise TaskNotFoundError(f"task {task_id} not found")
        if owner is None:
            return await self._closed_delivery(task_id, inbound)
        message_id = str(inbound.message.get("messageId", ""))
        context_id = str(inbound.message.get("contextId") or "")
        if context_id:
            row = await self._row(task_id)
            visible = row is not None and may_access(row.participants, inbound.participant)
            if visible and row is not None and row.context_id != context_id:
                # As the reference server does: the message belongs to another conversation.
                raise InvalidRequestValueError(
                    f"contextId {context_id} is not the context of task {task_id} "
                    f"({row.context_id}); leave it out or send the task's own"
                )
        if message_id.startswith(f"{task_id}:"):
            raise InvalidRequestValueError(
                f"message ids starting with {task_id}: belong to the agent"
            )
        # Ids of runs before the last are in the store, not the workflow.
        archived = await anyio.to_thread.run_sync(self._store.message_digest, task_id, message_id)
        if archived is not None:
            view = await self.view(task_id, inbound.participant)
            if view is None:
                raise TaskNotFoundError(f"task {task_id} not found")
            if archived != inbound.digest:
                raise InvalidRequestValueError(
                    f"message id {message_id} was already used for another message"
                )
            # A retry of a message whose turn is still running: a blocking sender waits for it
            # to settle, as the first send does.
            delay = 0.02
            while inbound.wait and not view.settled:
                await anyio.sleep(delay)
                delay = min(delay * 1.5, 1.0)
                view = await self.view(task_id, inbound.participant)
                if view is None:
                    raise TaskNotFoundError(f"task {task_id} not found")
            return Delivery(task_id=task_id, duplicate=True, cursor=view.last_seq, view=view)
        delay = 0.05
        deadline = time.monotonic() + _BUSY_PATIENCE
        while True:
            try:
                receipt = await self._retrying(
                    lambda: self._call(
                        lambda c: c.get_workflow_handle(task_id).execute_update(  # pyright: ignore[reportUnknownMemberType]
                            TaskWorkflow.deliver, inbound
                        )
                    )
                )
            except WorkflowUpdateFailedError as exc:
                cause = exc.cause
                busy = isinstance(cause, ApplicationError) and cause.type == "TaskBusy"
                if busy and time.monotonic() < deadline:
                    # The task is archiving its run and continuing as new: a moment.
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise _update_error(exc, task_id) from None
            except RPCError as exc:
                if not _not_found(exc):
                    raise
                return await self._closed_delivery(task_id, inbound)
            return await self._delivered(task_id, receipt)

    async def _ended_record(self, task_id: str) -> TaskRecord | None:
        """An ended task's record: from the store, else from its closed workflow's result.

        The second source covers a record stored by another process, or one the store could not
        take (its last run is then in the result). A task removed after its retention has none.
        """
        record = await self._record(task_id)
        if record is not None:
            return record
        row = await self._row(task_id)
        if row is not None and row.swept:
            return None

        async def result(client: Client) -> TaskRecord:
            handle = client.get_workflow_handle(task_id, result_type=TaskRecord)
            return await handle.result(follow_runs=False, rpc_timeout=timedelta(seconds=10))

        try:
            record = await self._call(result)
        except (RPCError, WorkflowFailureError):
            return None
        return record if record.agent_id == self.agent_id else None

    async def _closed_delivery(self, task_id: str, inbound: Inbound) -> Delivery:
        """The answer for a message to a task whose workflow has ended (or never existed)."""
        record = await self._ended_record(task_id)
        if record is None or not may_access(record.participants, inbound.participant):
            raise TaskNotFoundError(f"task {task_id} not found")
        message_id = str(inbound.message.get("messageId", ""))
        digest = await anyio.to_thread.run_sync(self._store.message_digest, task_id, message_id)
        if digest is None and record.unstored is not None:
            digest = next(
                (
                    content_digest(m)
                    for m in record.unstored.messages
                    if m.get("messageId") == message_id
                ),
                None,
            )
        if digest is None:
            raise TaskClosedError(task_closed_message(task_id, record.state))
        if digest != inbound.digest:
            raise InvalidRequestValueError(
                f"message id {message_id} was already used for another message"
            )
        view = await self._record_view(record)
        return Delivery(
            task_id=task_id, duplicate=True, cursor=record.events, view=view, reply=record.reply
        )

    # -- read -------------------------------------------------------------------------------------

    async def _tail(self, task_id: str, after_event: int, after_message: int) -> TaskTail | None:
        """The workflow's current run, or None when there is no such workflow of this agent."""
        if not await self._owner(task_id):
            return None
        delay = 0.05
        while True:
            try:
                tail = await self._call(
                    lambda c: c.get_workflow_handle(task_id).query(
                        TaskWorkflow.tail, args=[after_event, after_message]
                    )
                )
                break
            except RPCError as exc:
                if _not_found(exc) or exc.status == RPCStatusCode.INVALID_ARGUMENT:
                    return None
                # A workflow busy with a long workflow task buffers few queries; wait a moment.
                if exc.status != RPCStatusCode.RESOURCE_EXHAUSTED or delay > _QUERY_PATIENCE:
                    raise
                await anyio.sleep(delay)
                delay *= 2
        return tail if tail.agent_id == self.agent_id else None

    def _assemble(
        self,
        task_id: str,
        context_id: str,
        status: ProtoJSON,
        messages: list[ProtoJSON],
        events: list[TaskEvent],
    ) -> ProtoJSON:
        task: ProtoJSON = {"id": task_id, "contextId": context_id, "status": status}
        if messages:
            task["history"] = messages
        artifacts = fold_artifacts(events)
        if artifacts:
            task["artifacts"] = artifacts
        return task

    def _record_rows(self, record: TaskRecord, after: int) -> list[TaskEvent]:
        """An ended task's events after ``after`` (in a worker thread): from the store, and from the
        workflow's result for a last run the store did not take."""
        unstored = record.unstored
        if unstored is None:
            return self._store.events(record.task_id, after, record.events)
        first_seq = unstored.events[0].seq if unstored.events else record.events + 1
        stored = self._store.events(record.task_id, after, first_seq - 1)
        return [*stored, *(e for e in unstored.events if e.seq > after)]

    async def _record_view(self, record: TaskRecord) -> TaskView:
        def read() -> ProtoJSON:
            messages = self._store.messages(record.task_id, 0, record.messages)
            unstored = record.unstored
            if unstored is not None:
                messages = [*messages[: unstored.first_message], *unstored.messages]
            events = self._record_rows(record, 0)
            return self._assemble(
                record.task_id, record.context_id, record.status, messages, events
            )

        return self._ended_view(record, await anyio.to_thread.run_sync(read))

    @staticmethod
    def _ended_view(record: TaskRecord, task: ProtoJSON) -> TaskView:
        return TaskView(
            task=task,
            last_seq=record.events,
            closed=True,
            participants=record.participants,
            agent_id=record.agent_id,
        )

    async def view(self, task_id: str, participant: str | None) -> TaskView | None:
        """The task as it is now, or None when this agent has no such task for ``participant``."""
        view = await self._view(task_id)
        return view if view is not None and may_access(view.participants, participant) else None

    async def _row(self, task_id: str) -> IndexRow | None:
        """The task's row in the listing index, if it has one (a removed task's is a tombstone:
        ``swept``)."""
        row = await anyio.to_thread.run_sync(self._store.index_row, task_id)
        return row if row is not None and row.agent_id == self.agent_id else None

    def _row_task(
        self, row: IndexRow, *, history: int | None = None, artifacts: bool = True
    ) -> ProtoJSON:
        """An indexed task from the store (in a worker thread): its latest ``history`` messages
        (all when None) and, with ``artifacts``, its artifacts."""
        first = 0 if history is None else max(0, row.messages - history)
        messages = self._store.messages(row.task_id, first, row.messages)
        events = self._store.events(row.task_id, 0, row.last_seq) if artifacts else []
        return self._assemble(row.task_id, row.context_id, row.status, messages, events)

    def _row_view(self, row: IndexRow, task: ProtoJSON) -> TaskView:
        return TaskView(
            task=task,
            last_seq=row.last_seq,
            closed=row.closed,
            participants=row.participants,
            agent_id=row.agent_id,
            busy=row.busy,
        )

    async def _view(self, task_id: str) -> TaskView | None:
        """The task if it is this agent's, whoever asks: from the listing index and the store,
        never waiting for the task's workflow."""
        row = await self._row(task_id)
        if row is not None:
            if row.swept or not await self._confirmed(row):
                return None
            task = await anyio.to_thread.run_sync(self._row_task, row)
            return self._row_view(row, task)
        # Not indexed: a task whose store refused its writes, or one that has run since before
        # the index existed and not rested since.
        record = await self._record(task_id)
        if record is not None:
            return await self._record_view(record)
        # An ended workflow still answers queries (within its retention), so a task whose record
        # another process stored reads from its last run.
        tail = await self._tail(task_id, 0, 0)
        if tail is None:
            return None

        def read() -> ProtoJSON:
            messages = self._store.messages(task_id, 0, tail.archived_messages)
            events = self._store.events(task_id, 0, tail.archived_events)
            context_id = str(
                (tail.events[0].body if tail.events else {}).get("contextId")
                or (tail.messages[0] if tail.messages else {}).get("contextId")
                or ""
            )
            return self._assemble(
                task_id,
                context_id,
                tail.status,
                [*messages, *tail.messages],
                [*events, *tail.events],
            )

        return self._tail_view(tail, await anyio.to_thread.run_sync(read))

    def _light(self, task_id: str, tail: TaskTail) -> TaskView:
        """The task's state without its history or artifacts (what a stream needs)."""
        return self._tail_view(tail, {"id": task_id, "status": tail.status})

    @staticmethod
    def _tail_view(tail: TaskTail, task: ProtoJSON) -> TaskView:
        return TaskView(
            task=task,
            last_seq=tail.last_seq,
            closed=tail.closed,
            participants=tail.participants,
            agent_id=tail.agent_id,
            busy=tail.busy,
        )

    async def events(self, task_id: str, after: int, participant: str | None) -> EventPage | None:
        """Events after ``after`` without waiting, and the task; None when this agent has no such
        task for ``participant``."""
        view = await self.view(task_id, participant)
        if view is None:
            return None
        page = await self._events_after(task_id, after)
        if page is None:
            return EventPage(events=(), view=view)
        return EventPage(events=page.events, view=view)

    async def _record_events(self, record: TaskRecord, after: int) -> EventPage:
        """An ended task's events after ``after``, and its state (not its history)."""
        events = await anyio.to_thread.run_sync(self._record_rows, record, after)
        task = {"id": record.task_id, "contextId": record.context_id, "status": record.status}
        return EventPage(events=tuple(events), view=self._ended_view(record, task))

    async def _events_after(self, task_id: str, after: int) -> EventPage | None:
        row = await self._row(task_id)
        if row is not None and row.swept:
            return None
        if row is not None:
            events = await anyio.to_thread.run_sync(
                self._store.events, task_id, after, row.last_seq
            )
            # A sender's receipt may have written a later event before the turn that wrote an
            # earlier one started; a reader stops before the gap and reads on after it fills.
            contiguous: list[TaskEvent] = []
            for event in events:
                if event.seq != after + len(contiguous) + 1:
                    break
                contiguous.append(event)
            task: ProtoJSON = {"id": task_id, "contextId": row.context_id, "status": row.status}
            return EventPage(events=tuple(contiguous), view=self._row_view(row, task))
        record = await self._record(task_id)
        if record is not None:
            return await self._record_events(record, after)
        tail = await self._tail(task_id, after, 2**62)
        if tail is None:
            return None
        archived: list[TaskEvent] = []
        if after < tail.archived_events:
            archived = await anyio.to_thread.run_sync(
                self._store.events, task_id, after, tail.archived_events
            )
        return EventPage(events=(*archived, *tail.events), view=self._light(task_id, tail))

    async def poll(self, task_id: str, after: int, participant: str | None) -> EventPage:
        """The task's durable events after ``after``, now, and its state (not its history).

        Raises ``TaskNotFoundError`` when this agent has no such task for ``participant``.
        """
        page = await self._events_after(task_id, after)
        if page is not None and may_access(page.view.participants, participant):
            return page
        # Gone since the last poll: its record may be on its way to the store.
        ended = await self._ended_record(task_id)
        if ended is None or not may_access(ended.participants, participant):
            raise TaskNotFoundError(f"task {task_id} not found")
        return await self._record_events(ended, after)

    async def follow(self, task_id: str, after: int, participant: str | None) -> EventPage:
        """Wait for durable events after ``after`` (or for the task to settle) and return them,
        polling quickly at first and then less often while nothing happens."""
        delay = FOLLOW_FIRST_DELAY
        while True:
            page = await self.poll(task_id, after, participant)
            if page.events or page.view.settled:
                return page
            await anyio.sleep(delay)
            delay = min(delay * 1.5, FOLLOW_MAX_DELAY)

    async def list(
        self,
        *,
        participant: str | None,
        context_id: str = "",
        state: str = "",
        status_after: int | None = None,
        page_size: int = 50,
        page_token: str = "",
        history: int | None = None,
        artifacts: bool = True,
    ) -> tuple[list[TaskView], str, int]:
        """The tasks ``participant`` may see, latest status first, from the listing index: never
        waiting for a workflow, and never reading more than the page.

        ``status_after`` (microseconds since the epoch) keeps tasks whose status changed at or
        after it; ``history`` limits each task's messages to the latest ones (None: all); without
        ``artifacts`` none are read. Returns the page, the next page's token ('' at the end) and
        the number of matching tasks. Tokens are keyset cursors: a task appears at most once in
        one walk through the pages, however tasks change meanwhile (one whose status changes
        moves to the front, where the next walk finds it).
        """
        cursor = _decode_token(page_token)

        rows, total = await anyio.to_thread.run_sync(
            lambda: self._store.list_index(
                participant=participant,
                context_id=context_id,
                state=state,
                status_after=status_after,
                limit=page_size + 1,
                cursor=cursor,
            )
        )
        more = len(rows) > page_size
        page = rows[:page_size]
        shown = [row for row in page if await self._confirmed(row)]
        total -= len(page) - len(shown)

        def read() -> list[TaskView]:
            return [
                self._row_view(row, self._row_task(row, history=history, artifacts=artifacts))
                for row in shown
            ]

        views = await anyio.to_thread.run_sync(read)
        if not more:
            return views, "", total
        last = page[-1]
        return views, _encode_token(last.status_at, last.task_id), total

    async def running_count(self) -> int:
        """How many of this agent's task workflows run (Temporal's visibility, a moment behind)."""
        query = (
            f"WorkflowType = 'TaskWorkflow' AND TaskQueue = {_quote(self.queue)} "
            "AND ExecutionStatus = 'Running'"
        )

        async def count(client: Client) -> int:
            return (await client.count_workflows(query)).count

        return await self._call(count)

    async def _confirmed(self, row: IndexRow) -> bool:
        """False for a task the index learned of before its workflow started, whose workflow
        never did (its process died in between): the row is taken out. Checked only for rows
        nothing has written over for ``_UNCONFIRMED_SECONDS``."""
        if not row.unconfirmed or time.time() * 1e6 - row.written_at < _UNCONFIRMED_SECONDS * 1e6:
            return True
        if await self._owner(row.task_id) is not None:
            return True
        log.info("task %s never started (its process stopped first): forgotten", row.task_id)
        await anyio.to_thread.run_sync(self._store.forget_unstarted, row.task_id)
        return False

    async def last_heartbeat(self) -> str | None:
        """When the agent's heartbeat last ran (ISO 8601), or None before the first one."""
        return await anyio.to_thread.run_sync(self._store.get_meta, "last_heartbeat")

    async def cancel(self, task_id: str, participant: str | None) -> TaskView:
        """Cancel a task and return it once it has ended (CANCELED); the turn in flight, its model
        request or tool call, is cancelled too.

        Raises ``TaskNotFoundError``, or ``TaskNotCancelableError`` when the task has already
        ended (also when it ends by itself while the cancel is on its way).
        """
        view = await self.view(task_id, participant)
        if view is None:
            raise TaskNotFoundError(f"task {task_id} not found")
        if view.closed or view.state in TERMINAL_STATES:
            raise TaskNotCancelableError(f"task {task_id} has already ended")
        # A turn that holds the workflow's task (a local activity) learns of the cancel from the
        # index, where it looks twice a second, long before the signal could reach the workflow.
        with contextlib.suppress(sqlite3.Error):
            await anyio.to_thread.run_sync(self._store.request_cancel, task_id)

        async def cancel_and_wait(client: Client) -> TaskRecord:
            handle = client.get_workflow_handle(task_id, result_type=TaskRecord)
            await handle.signal(TaskWorkflow.cancel)
            return await handle.result(rpc_timeout=timedelta(seconds=60))

        try:
            record = await self._call(cancel_and_wait)
        except RPCError as exc:
            if _not_found(exc):
                raise TaskNotCancelableError(f"task {task_id} has already ended") from None
            raise
        except WorkflowFailureError:
            # Terminated or failed while the cancel was on its way.
            raise TaskNotCancelableError(
                f"task {task_id} ended before it could be canceled"
            ) from None
        if record.state != "TASK_STATE_CANCELED":
            raise TaskNotCancelableError(f"task {task_id} ended before it could be canceled")
        return await self._record_view(record)


def _quote(value: str) -> str:
    """A string literal for a Temporal visibility query (values from configuration only)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _retrieve_start_outcome(operation: WithStartWorkflowOperation[Any, Any]) -> None:
    """Mark a failed or cancelled update-with-start's start outcome as seen.

    The operation keeps the start's outcome in a future of its own; when the call fails (a refused
    start, a cancelled caller) nobody reads it, and asyncio logs "Future exception was never
    retrieved" for each. temporalio offers no public way to read it without awaiting, and awaiting
    is not possible while the caller is being cancelled.
    """
    future: Any = getattr(operation, "_workflow_handle", None)
    if future is not None and future.done() and not future.cancelled():
        future.exception()


def _update_error(exc: WorkflowUpdateFailedError, task_id: str) -> Exception:
    """The runtime error a refused ``deliver`` update stands for."""
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        if cause.type == "TaskClosed":
            return TaskClosedError(str(cause.message))
        if cause.type == "TaskNotFound":
            return TaskNotFoundError(f"task {task_id} not found")
        if cause.type == "MessageIdReused":
            return InvalidRequestValueError(str(cause.message))
        if cause.type == "TaskBusy":
            return TaskBusyError(
                f"task {task_id} is archiving its conversation (it continues as new); "
                "retry the message in a moment"
            )
    return exc


def _encode_token(status_at: int, task_id: str) -> str:
    return base64.urlsafe_b64encode(f"k1:{status_at}:{task_id}".encode()).decode()


def _decode_token(token: str) -> tuple[int, str] | None:
    if not token:
        return None
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
        tag, status_at, task_id = text.split(":", 2)
        if tag == "k1" and status_at.isdigit() and task_id and len(text) < 256:
            return int(status_at), task_id
    except (ValueError, UnicodeDecodeError):
        pass
    raise InvalidRequestValueError("pageToken is not a token this server returned")
