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

import contextlib
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, cast

import anyio
import attrs
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

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
    Inbound,
    IndexEntry,
    ProtoJSON,
    Receipt,
    TaskRecord,
    TaskStart,
    TaskView,
    may_access,
)
from harness_core.push.configs import TaskPushes
from harness_core.secrets import SECRETS
from harness_core.store import content_digest
from harness_core.store.connection import STORE_ERRORS
from harness_core.tasks.state import task_closed_message
from harness_core.tasks.views import not_found
from harness_core.tasks.workflow import TaskWorkflow
from harness_core.temporal.names import TASK_WORKFLOW

__all__ = ["MAX_MESSAGE_BYTES", "Delivery", "TaskService", "derive_task_id"]

log = logging.getLogger("harness.tasks")

#: The largest message (as JSON) a task accepts. It reaches Temporal through the claim check
#: (``harness_core.temporal.codec``), so Temporal's 2 MB payload limit does not apply; the
#: endpoint's ``[server] max_request_bytes`` usually refuses a large request first.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# How long a sender retries a task that is archiving its run (TaskBusy).
_BUSY_PATIENCE = 60.0


def derive_task_id(agent_id: str, participant: str | None, message_id: str, digest: str) -> str:
    """The id of the task a first message starts: the same for a retry of the same message (same id,
    sender and content), another for the same id with other content."""
    key = f"{agent_id}\0{participant or ''}\0{message_id}\0{digest}"
    digest_bytes = hashlib.sha256(key.encode()).digest()
    return str(uuid.UUID(bytes=digest_bytes[:16], version=4))


@attrs.frozen
class Delivery:
    """What a sent message got: the task (or the agent's direct reply), and where its events start."""

    task_id: str
    duplicate: bool
    cursor: int
    view: TaskView
    #: The agent answered a first message with a Message and no task.
    reply: ProtoJSON | None = None


class TaskService(TaskPushes):
    """The write path of one agent's tasks: send and cancel (push configs: ``TaskPushes``; reads:
    ``TaskReads``)."""

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
        if message.get("taskId"):
            # Refused from the index at once, before anything is kept: never waiting for a turn
            # that holds the task's workflow, and never leaving a webhook on another's task.
            if not await self._admitted(task_id, participant):
                raise TaskNotFoundError(f"task {task_id} not found")
            if push_config is not None:
                # Kept before the message reaches the task, so its first update is pushed.
                await self._register(task_id, participant, push_config)
            return await self._deliver_existing(task_id, inbound)
        if push_config is not None:
            # A new task's id derives from the caller: the task can only be theirs. A retried
            # first message registers its webhook again (the same id replaces it).
            await self._register(task_id, participant, push_config)
        # The record outlives the workflow's retention: a late retry must find it, not restart it.
        if await self._record(task_id) is not None:
            return await self._closed_delivery(task_id, inbound)
        context_id = str(message.get("contextId") or "") or str(
            uuid.uuid5(uuid.NAMESPACE_URL, task_id)
        )
        start = attrs.evolve(
            self._start,
            local_activity=self._start.local_activity
            and not (self._pace is not None and self._pace.long()),
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
        outcome = await self._listed_while(
            start, inbound, lambda: self._retrying(lambda: self._call(update_with_start))
        )
        try:
            if isinstance(outcome, Exception):
                raise outcome
            receipt = outcome
        except WorkflowAlreadyStartedError:
            return await self._closed_delivery(task_id, inbound)
        except WorkflowUpdateFailedError as exc:
            raise _update_error(exc, task_id) from None
        except RPCError as exc:
            if exc.status == RPCStatusCode.ALREADY_EXISTS or not_found(exc):
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

    async def _listed_while(
        self, start: TaskStart, inbound: Inbound, starting: Callable[[], Awaitable[Receipt]]
    ) -> Receipt | Exception:
        """Run ``starting`` while the new task's entry is written to the index (the index keeps
        whichever write is later): its receipt, or what it raised, once both are done."""
        outcome: list[Receipt | Exception] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._note_start, start, inbound)
            try:
                outcome.append(await starting())
            except Exception as error:  # the caller raises it, once the entry is written
                outcome.append(error)
        return outcome[0]

    async def _note_start(self, start: TaskStart, inbound: Inbound) -> None:
        """List a new task as its workflow starts: a blocking sender's task is then listed
        (SUBMITTED) even while its turn waits for a free worker slot. Whatever the workflow
        writes wins over this entry, before or after it."""
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
        except STORE_ERRORS as error:
            log.warning("task %s: the index did not take it: %s", start.task_id, error)

    async def _forget_start(self, task_id: str) -> None:
        """The start failed here: take back the entry if no workflow wrote over it (if the start
        did happen after all, the workflow writes again when its turn starts)."""
        with anyio.CancelScope(shield=True), contextlib.suppress(*STORE_ERRORS):
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
        except STORE_ERRORS as error:
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
                if not not_found(exc):
                    raise
                return await self._closed_delivery(task_id, inbound)
            return await self._delivered(task_id, receipt)

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
        with contextlib.suppress(*STORE_ERRORS):
            await anyio.to_thread.run_sync(self._store.request_cancel, task_id)

        async def cancel_and_wait(client: Client) -> TaskRecord:
            handle = client.get_workflow_handle(task_id, result_type=TaskRecord)
            await handle.signal(TaskWorkflow.cancel)
            return await handle.result(rpc_timeout=timedelta(seconds=60))

        try:
            record = await self._call(cancel_and_wait)
        except RPCError as exc:
            if not_found(exc):
                raise TaskNotCancelableError(f"task {task_id} has already ended") from None
            raise
        except WorkflowFailureError:
            # Terminated or failed while the cancel was on its way.
            raise TaskNotCancelableError(
                f"task {task_id} ended before it could be canceled"
            ) from None
        if record.state != "TASK_STATE_CANCELED":
            raise TaskNotCancelableError(f"task {task_id} ended before it could be canceled")
        log.info("task %s canceled by a client", task_id)
        return await self._record_view(record)


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
