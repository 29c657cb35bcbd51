"""Durable tasks: one ``TaskWorkflow`` per A2A task (workflow id = task id), and the heartbeat.

A message reaches a task through the ``deliver`` update (update-with-start for a new task, whose first
message also travels in the start's input, so it is durable even if the worker dies before the update is
accepted). Messages are deduplicated by id and content digest; a closed task refuses new ones in the
validator, so a refused message leaves no trace in history. The update returns a small receipt.

A turn is either one activity (a custom or built-in agent, given the run's messages and where the rest
is) or, for the built-in LLM agent, a loop the workflow runs: one activity per model request and one per
tool call, until the model answers or the turn's budget (steps, wall clock) is spent. The workflow owns
the retries: each activity gets one attempt per schedule, and only a failure of the agent itself counts
against the turn's attempts; a worker that stopped or died (its activity cancelled or timed out on
heartbeats) is retried without counting, so restarts are never blamed on the model.

Every status change and artifact is appended to the task's event log; progress message ids are
``<task id>:<semantic key>`` and the last one ``<task id>:final``. What a run holds is bounded: when it
passes ``RUN_MESSAGES`` or ``RUN_BYTES`` (or Temporal suggests it) and the task is idle, the run's
messages and events are archived to the agent's store and the workflow continues as new, carrying only
its state, so history grows linearly with the conversation. When the task ends, the last run is archived
with the task's summary.

Workflow code must be deterministic: time comes from ``workflow.now()``, and nothing here does I/O.
``asyncio`` here is Temporal's own deterministic workflow loop, the same whichever backend the host
runs (the host's side goes through ``harness_core.bridge``): temporalio's workflow API is asyncio's
(a task for the pusher, ``CancelledError`` for a canceled stand-in, ``TimeoutError`` for a timed
``wait_condition``).
Changes go behind ``workflow.patched`` (``docs/workflows.md``); ``tests/replay`` replays recorded
histories.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import timedelta
from typing import Any, cast

import attrs
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    FailureError,
    TimeoutError,
    TimeoutType,
)

from harness_core.payloads import (
    SETTLED_STATES,
    TERMINAL_STATES,
    Archive,
    DelegationProgress,
    DelegationRequest,
    DelegationResult,
    Inbound,
    IndexEntry,
    ModelStep,
    ProtoJSON,
    PushBatch,
    Receipt,
    TaskCarry,
    TaskEvent,
    TaskRecord,
    TaskStart,
    TaskTail,
    ToolCallInput,
    ToolCallOutput,
    ToolCallSpec,
    TurnOutcome,
    TurnRequest,
    may_access,
    relayed_status,
    status_key,
)

__all__ = ["DelegationWorkflow", "HeartbeatWorkflow", "TaskWorkflow", "task_closed_message"]

RUN_TURN = "run_turn"
MODEL_STEP = "model_step"
TOOL_CALL = "tool_call"
ARCHIVE = "archive"
CHECKPOINT = "checkpoint"
STORE_RECORD = "store_record"
HEARTBEAT = "heartbeat"
DELEGATE_SEND = "delegate_send"
DELEGATE_STATUS = "delegate_status"
DELEGATE_POLL = "delegate_poll"
DELEGATE_WAIT = "delegate_wait"
DELEGATE_CANCEL = "delegate_cancel"
PUSH = "push_deliver"
# How long an ending task (or a run about to continue as new) waits for its pushes to go out.
_PUSH_PATIENCE = timedelta(minutes=5)

# The text of the validator's refusal; the HTTP layer recognises it to answer with a clear A2A error.
CLOSED_TASK = "task is closed"
#: A run continues as new once idle past this many messages or bytes of them (JSON, blobs by
#: reference); it refuses further messages for a moment (``TaskBusy``, retried by the sender) at
#: twice as many, which only a flood during one turn reaches.
RUN_MESSAGES = 200
RUN_BYTES = 512 * 1024
#: A turn is given the run's unwritten messages inline up to this many bytes (no store write on
#: a short conversation's turns); past it, it writes them to the store and reads its history there.
INLINE_HISTORY = 8 * 1024
#: Attempts of a turn (or a model request) that failed by itself; stops and crashes do not count.
TURN_ATTEMPTS = 3
#: A tool's attempts when it is idempotent (one otherwise).
TOOL_ATTEMPTS = 3
#: Attempts of a store write before the record stays in the workflow's result.
STORE_ATTEMPTS = 5
# Patches (docs/workflows.md): the final record is stored by a local activity; a task that goes idle
# and has not ended writes its state to the listing index.
_LOCAL_STORE_RECORD = "store-record-local"
_INDEX_CHECKPOINT = "index-checkpoint"
# The final record is stored before a webhook hears that the task ended.
_RECORD_BEFORE_PUSH = "record-before-push"
# A task waiting for input expires after [retention] idle_timeout.
_IDLE_EXPIRY = "idle-expiry"
# A stand-in continuing a remote task notes the task's status before it sends.
_DELEGATION_STALE = "delegation-stale"
INTERRUPTED_STATES = frozenset({"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"})
#: The failure type of a turn stopped because a client canceled the task (the activity saw it in
#: the listing index before the workflow's cancel signal arrived).
TASK_CANCELED = "TaskCanceled"
# Failure types that say the worker, not the agent, stopped the attempt.
_WORKER_STOPPED = "WorkerStopped"
_NO_RETRY = RetryPolicy(maximum_attempts=1)
# The longest Retry-After a provider may impose on a turn.
_MAX_ASKED_DELAY = 60.0
_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# Stand-ins that answer within this time do not write their task's waiting state to the index.
_QUICK_DELEGATION = timedelta(seconds=0.5)
#: The most progress statuses one stand-in relays to its delegating task.
MAX_STAND_IN_RELAYS = 100
# The failure types of the delegation activities, whose messages are ours (delegation.py).
_DELEGATION_FAILURES = frozenset({"UnknownAgent", "DelegationRefused", "DelegationUnreachable"})


def task_closed_message(task_id: str, state: str) -> str:
    return f"{CLOSED_TASK}: task {task_id} is {state.removeprefix('TASK_STATE_').lower()}"


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _not_counted(error: BaseException) -> bool:
    """The attempt was stopped by a worker stopping or dying, not by the agent: retry it freely."""
    cause = error.__cause__ if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError) and cause.type == _WORKER_STOPPED:
        return True
    if isinstance(cause, CancelledError):
        return True
    # A worker that dies stops heartbeating; a start-to-close timeout is the agent being slow.
    return isinstance(cause, TimeoutError) and cause.type in (
        TimeoutType.HEARTBEAT,
        TimeoutType.SCHEDULE_TO_START,
    )


def _asked_delay(error: BaseException) -> float:
    """The wait a failure asked for (``next_retry_delay``), in seconds; 0 when none."""
    cause = error.__cause__ if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError) and cause.next_retry_delay is not None:
        return cause.next_retry_delay.total_seconds()
    return 0.0


def _failure_type(error: BaseException) -> str:
    cause = error.__cause__ if isinstance(error, ActivityError) else error
    return cause.type or "" if isinstance(cause, ApplicationError) else ""


def _retryable(error: BaseException) -> bool:
    cause = error.__cause__ if isinstance(error, ActivityError) else error
    return not (isinstance(cause, ApplicationError) and cause.non_retryable)


def _answer_parts(result: DelegationResult) -> list[ProtoJSON]:
    """Another agent's answer: its final message's parts, then its artifacts'."""
    parts: list[ProtoJSON] = list(result.parts)
    for artifact in result.artifacts:
        parts.extend(cast("list[ProtoJSON]", artifact.get("parts") or []))
    return parts


def _text_message(text: str) -> tuple[ProtoJSON, ...]:
    return ({"text": text},)


@workflow.defn(name="TaskWorkflow")
class TaskWorkflow:
    @workflow.init
    def __init__(self, start: TaskStart) -> None:
        # Taken at construction so that an update delivered with the start already knows the task.
        self._start = start
        carry = start.carry
        now = self._now()
        self._status: ProtoJSON = (
            dict(carry.status) if carry else {"state": "TASK_STATE_SUBMITTED", "timestamp": now}
        )
        self._participants: list[str] = list(carry.participants) if carry else []
        # Message id -> content digest, for this run and the one before it.
        self._ids: dict[str, str] = dict(carry.recent_ids) if carry else {}
        self._run_ids: list[tuple[str, str]] = []
        self._archived_messages = carry.archived_messages if carry else 0
        self._archived_events = carry.archived_events if carry else 0
        # The events the listing index (the agent's store) has: it learns the others at the next
        # durable point (a turn's start, the task going idle or ending).
        self._indexed_seq = self._archived_events
        self._turns = carry.turns if carry else 0
        self._runs = (carry.runs if carry else 0) + 1
        self._cancel_requested = carry.cancel_requested if carry else False
        # Push notifications: on once a client registers a webhook for the task.
        self._push = carry.push if carry else False
        self._pushed = carry.pushed_seq if carry else 0
        # Pushes of an ended task wait for its final record (a receiver that reads the task on
        # COMPLETED must find it COMPLETED); False only between the end and the record.
        self._push_open = True
        self._history: list[ProtoJSON] = []  # this run's messages
        self._events: list[TaskEvent] = []  # this run's events
        self._mailbox: list[Inbound] = []
        self._senders: dict[str, str] = {}  # message id -> participant, for this run
        # This run's messages that turns have already written to the store (each turn sends only
        # the ones after these, so no input copies the run's history).
        self._persisted = 0
        self._refused: set[str] = set()  # accepted, then dropped because the task ended first
        self._run_bytes = 0
        self._accepted = 0  # messages accepted in this run
        self._processed = 0  # of those, the ones a finished turn has seen (or the end refused)
        self._in_turn = False
        self._closing = False  # about to continue as new: new messages wait (TaskBusy)
        self._closed = False
        self._may_reply = False
        self._reply: ProtoJSON | None = None  # a direct Message answered the first message
        if start.first is not None:
            self._accept(start.first)

    # -- state --------------------------------------------------------------------------------------

    @staticmethod
    def _now() -> str:
        return workflow.now().isoformat().replace("+00:00", "Z")

    @property
    def _state(self) -> str:
        return str(self._status.get("state", ""))

    def _busy(self) -> bool:
        """A turn runs, or a message waits for one."""
        return bool(self._mailbox) or self._in_turn

    def _settled(self) -> bool:
        """Nothing to do, and the task rests in a state where a client stops waiting."""
        return not self._busy() and self._state in SETTLED_STATES

    def _last_seq(self) -> int:
        return self._archived_events + len(self._events)

    def _event(self, kind: str, body: ProtoJSON) -> None:
        body = {"taskId": self._start.task_id, "contextId": self._start.context_id, **body}
        seq = self._last_seq() + 1
        self._events.append(
            TaskEvent(seq=seq, kind="status" if kind == "status" else "artifact", body=body)
        )
        self._run_bytes += _json_size(body)

    def _emit_status(self, state: str, message: ProtoJSON | None = None) -> None:
        status: ProtoJSON = {"state": state, "timestamp": self._now()}
        if message is not None:
            status["message"] = message
        self._status = status
        self._event("status", {"status": status})

    def _agent_message(
        self, key: str, parts: tuple[ProtoJSON, ...], *, in_history: bool = True
    ) -> ProtoJSON:
        task_id = self._start.task_id
        message: ProtoJSON = {
            "messageId": f"{task_id}:{key}",
            "role": "ROLE_AGENT",
            "parts": list(parts),
            "taskId": task_id,
            "contextId": self._start.context_id,
        }
        if in_history:
            self._history.append(message)
            self._run_bytes += _json_size(message)
        return message

    def _accept(self, inbound: Inbound) -> bool:
        """Take a user message into the task (False: a retry of one it has)."""
        message_id = str(inbound.message.get("messageId", ""))
        if message_id in self._ids:
            return False
        message = {
            **inbound.message,
            "taskId": self._start.task_id,
            "contextId": self._start.context_id,
        }
        self._ids[message_id] = inbound.digest
        self._run_ids.append((message_id, inbound.digest))
        if inbound.participant:
            self._senders[message_id] = inbound.participant
            if inbound.participant not in self._participants:
                self._participants.append(inbound.participant)
        # Idle: the message is next in the history. During a turn it waits for the next turn to
        # take it, so the history stays in the order the model saw it.
        self._mailbox.append(attrs.evolve(inbound, message=message))
        if not self._in_turn:
            self._history.append(message)
        self._run_bytes += inbound.size
        self._accepted += 1
        if inbound.push:
            self._push = True
        return True

    def _tail(self, after_event: int, after_message: int) -> TaskTail:
        first_event = max(after_event - self._archived_events, 0)
        first_message = max(after_message - self._archived_messages, 0)
        return TaskTail(
            status=self._status,
            participants=tuple(self._participants),
            agent_id=self._start.agent_id,
            closed=self._closed,
            busy=self._busy(),
            archived_messages=self._archived_messages,
            archived_events=self._archived_events,
            messages=tuple(self._history[first_message:]),
            events=tuple(self._events[first_event:]),
            last_seq=self._last_seq(),
        )

    # -- the run ------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: TaskStart) -> TaskRecord:
        pusher = asyncio.create_task(self._pusher(start))
        try:
            return await self._run(start)
        finally:
            pusher.cancel()

    async def _pusher(self, start: TaskStart) -> None:
        """Once the task pushes, deliver each new update to its webhooks, in order, by an activity
        that retries with backoff (and so survives restarts)."""
        await workflow.wait_condition(lambda: self._push)
        while True:
            await workflow.wait_condition(
                lambda: self._last_seq() > self._pushed and self._push_open
            )
            upto = self._last_seq()
            first = max(self._pushed - self._archived_events, 0)
            batch = PushBatch(
                agent_id=start.agent_id,
                task_id=start.task_id,
                events=tuple(self._events[first : upto - self._archived_events]),
            )
            try:
                await workflow.execute_activity(
                    PUSH,
                    batch,
                    start_to_close_timeout=timedelta(minutes=2),
                    heartbeat_timeout=_HEARTBEAT_TIMEOUT,
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(seconds=1),
                        maximum_interval=timedelta(seconds=60),
                        maximum_attempts=8,
                        non_retryable_error_types=["WrongAgent"],
                    ),
                )
            except ActivityError:
                workflow.logger.warning("task %s: its push notifications failed", start.task_id)
            self._pushed = upto

    async def _pushes_sent(self) -> None:
        """Wait (a while) for the pushes of what happened so far to go out."""
        if not self._push:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await workflow.wait_condition(
                lambda: self._pushed >= self._last_seq(), timeout=_PUSH_PATIENCE
            )

    @workflow.signal
    def enable_push(self) -> None:
        """A client registered a push notification config for the task."""
        self._push = True

    async def _run(self, start: TaskStart) -> TaskRecord:
        while True:
            idle = self._idle_limit(start)
            try:
                await workflow.wait_condition(
                    lambda: bool(self._mailbox) or self._cancel_requested, timeout=idle
                )
            except asyncio.TimeoutError:  # noqa: UP041 - the builtin name is temporalio's here
                self._expire(start)
                break
            if self._cancel_requested:
                self._emit_status(
                    "TASK_STATE_CANCELED", self._agent_message("final", _text_message("canceled"))
                )
                break
            await self._turn(start)
            if self._state in TERMINAL_STATES:
                break
            if not self._mailbox and workflow.patched(_INDEX_CHECKPOINT):
                await self._checkpoint(start)
            if not self._mailbox and self._run_is_full():
                await self._continue_as_new(start)
        if self._state == "TASK_STATE_CANCELED":
            self._keep_pending()
        else:
            self._refuse_pending()
        self._closed = True
        if workflow.patched(_RECORD_BEFORE_PUSH):
            self._push_open = False
            record = await self._store_final(start)
            self._push_open = True
            await self._pushes_sent()
        else:
            await self._pushes_sent()
            record = await self._store_final(start)
        # Blocked senders wake on _closed; let their updates finish first.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return record

    def _idle_limit(self, start: TaskStart) -> timedelta | None:
        """How long the task may wait for input before it expires (None: as long as it takes)."""
        if not start.idle_seconds or self._state not in INTERRUPTED_STATES:
            return None
        if not workflow.patched(_IDLE_EXPIRY):
            return None
        return timedelta(seconds=start.idle_seconds)

    def _expire(self, start: TaskStart) -> None:
        seconds = start.idle_seconds
        waited = f"{seconds / 86400:g}d" if seconds >= 86400 else f"{seconds:g}s"
        self._emit_status(
            start.expired_state,
            self._agent_message(
                "final",
                _text_message(
                    f"this task expired: it waited for input for {waited} "
                    "([retention] idle_timeout); start a new task"
                ),
            ),
        )

    def _run_is_full(self) -> bool:
        return (
            self._accepted >= self._start.run_messages
            or self._run_bytes >= RUN_BYTES
            or workflow.info().is_continue_as_new_suggested()
        )

    def _archive(self, start: TaskStart) -> Archive:
        return Archive(
            task_id=start.task_id,
            agent_id=start.agent_id,
            context_id=start.context_id,
            first_message=self._archived_messages,
            messages=tuple(self._history),
            events=tuple(self._events),
            participants=tuple(self._participants),
            senders=tuple(self._senders.items()),
        )

    def _index_entry(self, start: TaskStart, first_message: int, messages: int) -> IndexEntry:
        """The index's news: this run's messages from ``first_message`` (of the run) on, the events
        it has not had, and the task's state."""
        archive = Archive(
            task_id=start.task_id,
            agent_id=start.agent_id,
            context_id=start.context_id,
            first_message=self._archived_messages + first_message,
            messages=tuple(self._history[first_message:messages]),
            events=tuple(self._events[max(self._indexed_seq - self._archived_events, 0) :]),
            participants=tuple(self._participants),
            senders=tuple(
                (m, p)
                for m in (
                    str(h.get("messageId", "")) for h in self._history[first_message:messages]
                )
                if (p := self._senders.get(m)) is not None
            ),
        )
        self._indexed_seq = self._last_seq()
        return IndexEntry(
            archive=archive,
            status=self._status,
            last_seq=self._last_seq(),
            messages=self._archived_messages + len(self._history),
            busy=self._busy(),
        )

    async def _checkpoint(self, start: TaskStart) -> None:
        """The index learns the task's state and what happened since its last write: when the
        task rests (waiting for input), in the workflow task that ended the turn, and while a
        turn waits for other agents."""
        entry = self._index_entry(start, self._persisted, len(self._history))
        try:
            await workflow.execute_local_activity(
                CHECKPOINT,
                entry,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(
                    maximum_attempts=STORE_ATTEMPTS,
                    non_retryable_error_types=["WrongAgent", "StoreRefused"],
                ),
            )
        except (ActivityError, ApplicationError):
            # Listings show the task as the last write left it; the next durable point (its next
            # turn, or its end) writes again.
            workflow.logger.warning("task %s: the index did not take its state", start.task_id)

    async def _continue_as_new(self, start: TaskStart) -> None:
        self._closing = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        await self._pushes_sent()
        try:
            await workflow.execute_activity(
                ARCHIVE,
                self._archive(start),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=STORE_ATTEMPTS),
            )
        except ActivityError:
            # The store refused; keep this run going and try again after the next turn.
            workflow.logger.warning("task %s: archiving its run failed", start.task_id)
            self._closing = False
            return
        carry = TaskCarry(
            status=self._status,
            participants=tuple(self._participants),
            recent_ids=tuple(self._run_ids),
            archived_messages=self._archived_messages + len(self._history),
            archived_events=self._last_seq(),
            turns=self._turns,
            runs=self._runs,
            cancel_requested=self._cancel_requested,
            push=self._push,
            pushed_seq=self._pushed,
        )
        workflow.continue_as_new(
            TaskStart(
                task_id=start.task_id,
                context_id=start.context_id,
                agent_id=start.agent_id,
                local_activity=start.local_activity,
                turn_timeout=start.turn_timeout,
                loop=start.loop,
                max_steps=start.max_steps,
                turn_seconds=start.turn_seconds,
                run_messages=start.run_messages,
                carry=carry,
                idle_seconds=start.idle_seconds,
                expired_state=start.expired_state,
            )
        )

    async def _store_final(self, start: TaskStart) -> TaskRecord:
        archive = self._archive(start)
        record = TaskRecord(
            task_id=start.task_id,
            context_id=start.context_id,
            agent_id=start.agent_id,
            state=self._state,
            status=self._status,
            participants=tuple(self._participants),
            updated_at=str(self._status.get("timestamp", self._now())),
            messages=self._archived_messages + len(self._history),
            events=self._last_seq(),
            reply=self._reply,
        )
        retry = RetryPolicy(
            maximum_attempts=STORE_ATTEMPTS,
            non_retryable_error_types=["WrongAgent", "StoreRefused"],
        )
        try:
            if workflow.patched(_LOCAL_STORE_RECORD):
                # In the workflow task that ends the turn: no round trip through the task queue.
                await workflow.execute_local_activity(
                    STORE_RECORD,
                    args=[archive, record],
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=retry,
                )
            else:
                await workflow.execute_activity(
                    STORE_RECORD,
                    args=[archive, record],
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=retry,
                )
        except (ActivityError, ApplicationError):
            workflow.logger.error(
                "task %s: its record could not be stored; it stays in the workflow's result",
                start.task_id,
            )
            return attrs.evolve(record, unstored=archive)
        return record

    def _keep_pending(self) -> None:
        """The task was canceled with messages still queued: they were accepted before the cancel,
        so they stay in the task, unanswered (their waiting senders get the canceled task)."""
        in_history = {m.get("messageId") for m in self._history}
        for inbound in self._mailbox:
            if inbound.message.get("messageId") not in in_history:
                self._history.append(inbound.message)
        self._processed += len(self._mailbox)
        self._mailbox.clear()

    def _refuse_pending(self) -> None:
        """The task ended with messages still queued: drop them, and tell their waiting senders."""
        for inbound in self._mailbox:
            message_id = str(inbound.message.get("messageId", ""))
            self._refused.add(message_id)
            self._history = [m for m in self._history if m.get("messageId") != message_id]
        self._processed += len(self._mailbox)
        self._mailbox.clear()

    # -- turns --------------------------------------------------------------------------------------

    async def _turn(self, start: TaskStart) -> None:
        self._in_turn = True
        taken = len(self._mailbox)
        # A local activity holds the workflow task, so reads, streams and cancels of the task wait
        # for the turn; it is worth it only when every sender is waiting for the answer anyway.
        local = start.local_activity and all(inbound.wait for inbound in self._mailbox)
        in_history = {m.get("messageId") for m in self._history}
        new_ids: list[str] = []
        for inbound in self._mailbox:
            message_id = str(inbound.message.get("messageId", ""))
            new_ids.append(message_id)
            if message_id not in in_history:
                self._history.append(inbound.message)
        self._mailbox.clear()
        self._turns += 1
        if self._state != "TASK_STATE_WORKING":
            self._emit_status("TASK_STATE_WORKING")
        unwritten = self._history[self._persisted :]
        persist = _json_size(unwritten) > INLINE_HISTORY
        request = TurnRequest(
            agent_id=start.agent_id,
            task_id=start.task_id,
            context_id=start.context_id,
            number=self._turns,
            archived=self._archived_messages + self._persisted,
            messages=tuple(self._history[self._persisted :]),
            new_ids=tuple(new_ids),
            senders=tuple(
                (m, p)
                for m in (str(h.get("messageId", "")) for h in self._history[self._persisted :])
                if (p := self._senders.get(m)) is not None
            ),
            may_reply=self._turns == 1 and self._archived_events == 0 and len(self._events) <= 1,
            persist=persist,
            # The turn's messages travel in the request itself; the entry carries the rest.
            index=self._index_entry(start, len(self._history), len(self._history)),
        )
        self._may_reply = request.may_reply
        if persist:
            # The turn's activity writes these messages to the store before reading its history.
            self._persisted = len(self._history)
        try:
            if start.loop == "llm":
                outcome = await self._llm_turn(start, request, local)
            else:
                try:
                    outcome = await self._attempts(
                        RUN_TURN, request, TurnOutcome, local=local, attempts=TURN_ATTEMPTS
                    )
                except (ActivityError, ApplicationError) as error:
                    workflow.logger.warning("turn %d of task %s failed", self._turns, start.task_id)
                    outcome = self._model_failed(error)
            if outcome is not None and outcome.kind == "delegate":
                outcome = await self._delegate(start, outcome)
            if outcome is None:
                self._emit_status(
                    "TASK_STATE_CANCELED", self._agent_message("final", _text_message("canceled"))
                )
                return
            self._apply(outcome)
        finally:
            self._processed += taken
            self._in_turn = False

    async def _attempts(
        self,
        activity: str,
        arg: Any,
        result_type: type[Any],
        *more: Any,
        local: bool,
        attempts: int,
        seconds: float | None = None,
        free_retries: bool = True,
    ) -> Any:
        """Run an activity (with ``arg`` and ``more`` as its arguments) until it succeeds, its
        attempts are spent, or the task is canceled (None).

        Attempts stopped by a worker (shutdown, crash) are retried without counting. Raises the
        last ``ActivityError`` when the attempts are spent or the failure is not retryable.
        """
        failures = 0
        delay = 0.2
        limit = timedelta(seconds=seconds if seconds is not None else self._start.turn_timeout)
        while True:
            if local:
                handle = workflow.start_local_activity(
                    activity,
                    args=[arg, *more],
                    result_type=result_type,
                    start_to_close_timeout=limit,
                    retry_policy=_NO_RETRY,
                )
            else:
                handle = workflow.start_activity(
                    activity,
                    args=[arg, *more],
                    result_type=result_type,
                    start_to_close_timeout=limit,
                    heartbeat_timeout=_HEARTBEAT_TIMEOUT,
                    retry_policy=_NO_RETRY,
                )
            await workflow.wait_condition(
                lambda handle=handle: handle.done() or self._cancel_requested
            )
            if self._cancel_requested and not handle.done():
                # Reaches the activity through its heartbeat: the model call or tool in flight
                # is cancelled.
                handle.cancel()
                return None
            try:
                return await handle
            except (ActivityError, ApplicationError) as error:
                # A local activity's failure arrives as the ApplicationError itself.
                if _failure_type(error) == TASK_CANCELED:
                    # A client canceled the task; the signal saying so is on its way.
                    self._cancel_requested = True
                    return None
                if free_retries and _not_counted(error):
                    workflow.logger.info(
                        "task %s: %s stopped by its worker; retrying", self._start.task_id, activity
                    )
                    await workflow.sleep(timedelta(seconds=0.5))
                    continue
                failures += 1
                if failures >= attempts or not _retryable(error):
                    raise
                wait = delay * (0.8 + 0.4 * workflow.random().random())
                # A provider that said when to come back (Retry-After) is asked no sooner.
                asked = _asked_delay(error)
                await workflow.sleep(timedelta(seconds=max(wait, min(asked, _MAX_ASKED_DELAY))))
                delay = min(delay * 2, 10.0)

    async def _llm_turn(
        self, start: TaskStart, request: TurnRequest, local: bool
    ) -> TurnOutcome | None:
        """The model loop: request, call the tools it asks for, until it answers or the budget ends."""
        exchange: list[Any] = []
        emitted: list[tuple[str, ProtoJSON]] = []
        started = workflow.now()
        budget = timedelta(seconds=start.turn_seconds)
        step = 0
        while True:
            step += 1
            final = step >= start.max_steps or workflow.now() - started >= budget
            try:
                answer = await self._attempts(
                    MODEL_STEP,
                    # The first step writes the index entry; the others need not carry it. The
                    # turn and each exchange entry are arguments of their own: a large one is
                    # stored once by the claim check, and every later step refers to it.
                    request if step == 1 else attrs.evolve(request, index=None),
                    ModelStep,
                    step,
                    final,
                    *exchange,
                    # Streams follow the model's text live only when the workflow is free to
                    # answer their reads.
                    local=local,
                    attempts=TURN_ATTEMPTS,
                )
            except (ActivityError, ApplicationError) as error:
                return self._model_failed(error)
            if answer is None:
                return None
            emitted.extend(answer.emitted)
            exchange.append(answer.response)
            if not answer.tool_calls or final:
                return TurnOutcome(
                    kind="complete",
                    message=answer.message or _text_message(answer.text),
                    emitted=tuple(emitted),
                )
            results: list[Any] = []
            for spec in answer.tool_calls:
                if spec.delegate:
                    output = await self._ask(start, spec)
                else:
                    output = await self._tool(start, spec)
                if output is None:
                    return None
                results.append(
                    {
                        "tool_call_id": spec.call_id,
                        "name": spec.name,
                        "text": output.text,
                        "failed": output.failed,
                    }
                )
            exchange.append({"tool_results": results})

    async def _ask(self, start: TaskStart, spec: ToolCallSpec) -> ToolCallOutput | None:
        """The model asked another agent (a delegation tool): one stand-in, its answer as the
        tool's result. None: the task was canceled meanwhile."""
        try:
            arguments: Any = json.loads(spec.arguments or "{}")
            text = (
                str(cast("ProtoJSON", arguments).get("message", ""))
                if isinstance(arguments, dict)
                else ""
            )
        except ValueError:
            text = ""
        if not text:
            return ToolCallOutput(f"{spec.name} needs a message to send", failed=True)
        message: ProtoJSON = {"role": "ROLE_USER", "parts": [{"text": text}]}
        results = await self._stand_ins(start, [(spec.call_id, spec.delegate, message)])
        if results is None:
            return None
        [result] = results
        if result is None:  # a failed stand-in is a failed tool call
            return ToolCallOutput(f"the agent {spec.delegate} could not be asked", failed=True)
        if result.error:
            return ToolCallOutput(f"the agent {spec.delegate} failed: {result.error}", failed=True)
        texts = [str(p.get("text", "")) for p in _answer_parts(result) if "text" in p]
        state = result.state.removeprefix("TASK_STATE_").lower()
        return ToolCallOutput(f"({spec.delegate} {state}) " + "\n".join(texts))

    async def _tool(self, start: TaskStart, spec: ToolCallSpec) -> ToolCallOutput | None:
        call = ToolCallInput(
            agent_id=start.agent_id,
            task_id=start.task_id,
            call_id=spec.call_id,
            name=spec.name,
            arguments=spec.arguments,
        )
        try:
            return await self._attempts(
                TOOL_CALL,
                call,
                ToolCallOutput,
                local=False,
                attempts=TOOL_ATTEMPTS if spec.idempotent else 1,
                seconds=spec.timeout,
                # A tool that must not run twice is not run again after a worker stopped it: it
                # may have taken effect.
                free_retries=spec.idempotent,
            )
        except (ActivityError, ApplicationError) as error:
            # The model hears that the tool failed and decides what to do; nothing internal.
            kind = _failure_type(error) or "error"
            if _not_counted(error):
                kind = "interrupted; it may or may not have taken effect"
            return ToolCallOutput(f"the tool {spec.name} failed ({kind})", failed=True)

    async def _delegate(self, start: TaskStart, outcome: TurnOutcome) -> TurnOutcome | None:
        """Hand the turn's messages to other agents, each through a stand-in child workflow, and
        wait for all of them; their answers become the next turn's messages. None: the task was
        canceled meanwhile (the stand-ins, and so the remote tasks, are canceled too)."""
        number = self._turns
        for kind, body in outcome.emitted:
            self._event(kind, body)
        if outcome.message:
            self._emit_status(
                "TASK_STATE_WORKING", self._agent_message(f"delegating:{number}", outcome.message)
            )
        sends: list[tuple[str, str, ProtoJSON]] = []
        for index, spec in enumerate(outcome.delegations, start=1):
            message: ProtoJSON = {"role": "ROLE_USER", "parts": list(spec.parts)}
            if spec.task_id:
                message["taskId"] = spec.task_id
            sends.append((str(index), spec.target, message))
        results = await self._stand_ins(start, sends)
        if results is None:
            return None
        for index, (spec, result) in enumerate(zip(outcome.delegations, results, strict=True)):
            if result is None:  # a failed stand-in is told as a failed delegation
                result = DelegationResult(
                    target=spec.target, remote_task_id="", state="", error="the delegation failed"
                )
            self._take_answer(start, number, index + 1, result)
        # Not an answer: the next turn, with the other agents' answers, decides.
        return TurnOutcome(kind="delegate")

    async def _stand_ins(
        self, start: TaskStart, sends: list[tuple[str, str, ProtoJSON]]
    ) -> list[DelegationResult | None] | None:
        """Start one stand-in child workflow per (key, target, message) of this turn, all at once,
        and wait for all of them: their results in order (None for a stand-in that failed), or
        None when the task was canceled meanwhile (the stand-ins, and so the remote tasks, are
        canceled too). The key names the message and the stand-in within the turn."""
        number = self._turns
        participant = self._participants[0] if self._participants else f"agent:{start.agent_id}"
        handles: list[workflow.ChildWorkflowHandle[Any, DelegationResult]] = list(
            await asyncio.gather(
                *(
                    workflow.start_child_workflow(
                        DelegationWorkflow.run,
                        DelegationRequest(
                            agent_id=start.agent_id,
                            parent_task_id=start.task_id,
                            target=target,
                            message={"messageId": f"{start.task_id}:{number}:{key}", **message},
                            participant=participant,
                            parent_context_id=start.context_id,
                        ),
                        id=f"{start.task_id}:delegate:{number}:{key}",
                        task_queue=workflow.info().task_queue,
                    )
                    for key, target, message in sends
                )
            )
        )

        def waiting() -> bool:
            return not all(h.done() for h in handles) and not self._cancel_requested

        # The task waits, maybe long: past a moment, readers learn that it delegates (and, as
        # they come, what the other agents relay) from the index, while the stand-ins run.
        with contextlib.suppress(asyncio.TimeoutError):
            await workflow.wait_condition(lambda: not waiting(), timeout=_QUICK_DELEGATION)
        while waiting():
            if self._last_seq() > self._indexed_seq:
                await self._checkpoint(start)
            await workflow.wait_condition(
                lambda: not waiting() or self._last_seq() > self._indexed_seq
            )
        if self._cancel_requested:
            for handle in handles:
                if not handle.done():
                    handle.cancel()
            for handle in handles:
                # Each ends as it can (canceled, or done just before); the task is canceled anyway.
                with contextlib.suppress(BaseException):
                    await handle
            return None
        results: list[DelegationResult | None] = []
        for handle in handles:
            try:
                result = handle.result()
            except BaseException:
                results.append(None)
                continue
            # What the other agent said on the way (its stream showed it live already).
            self.relay(result.relays(handle.id))
            results.append(result)
        return results

    def _take_answer(
        self, start: TaskStart, number: int, index: int, result: DelegationResult
    ) -> None:
        """Another agent's answer, as a message of this task for the agent's next turn."""
        if result.error:
            parts: list[ProtoJSON] = [
                {"text": f"the delegation to {result.target} failed: {result.error}"}
            ]
        else:
            parts = [dict(p) for p in _answer_parts(result)]
        message_id = f"{start.task_id}:answer-of:{number}:{index}"
        message: ProtoJSON = {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": parts,
            "taskId": start.task_id,
            "contextId": start.context_id,
            "metadata": {
                "harness.delegation": {
                    "agent": result.target,
                    "taskId": result.remote_task_id,
                    "state": result.state,
                }
            },
        }
        sender = f"agent:{result.target}"
        self._ids[message_id] = ""
        self._senders[message_id] = sender
        self._mailbox.append(
            Inbound(
                message=message,
                participant=sender,
                # Taken by the next turn at once (as a local activity when the task allows it).
                wait=True,
                agent_id=start.agent_id,
                size=_json_size(message),
            )
        )
        self._run_bytes += _json_size(message)
        self._accepted += 1

    def _model_failed(self, error: BaseException) -> TurnOutcome:
        cause = error.__cause__ if isinstance(error, ActivityError) else error
        text = "the agent could not complete this task"
        if isinstance(cause, ApplicationError) and cause.type == "ModelRefused":
            # Our own message (the activity classified the provider's answer), safe to show.
            text = f"{text}: {cause.message}"
        return TurnOutcome(kind="fail", message=_text_message(text))

    def _apply(self, outcome: TurnOutcome) -> None:
        number = self._turns
        for kind, body in outcome.emitted:
            if kind == "status":
                self._status = dict(body.get("status", self._status))
            self._event(kind, body)
        for artifact in outcome.artifacts:
            self._event("artifact", {"artifact": artifact, "lastChunk": True})
        message = outcome.message
        if outcome.kind == "fail":
            self._emit_status(
                "TASK_STATE_FAILED",
                self._agent_message("final", message or _text_message("the task failed")),
            )
        elif outcome.kind == "delegate":
            pass  # the answers wait in the mailbox: the next turn takes them
        elif outcome.kind == "reject":
            self._emit_status("TASK_STATE_REJECTED", self._agent_message("final", message))
        elif self._mailbox:
            # Messages arrived during this turn; the agent has not seen them, so the task does
            # not settle: its answer is recorded and the next turn takes them.
            if message:
                self._agent_message(f"answer:{number}", message)
        elif outcome.kind == "ask":
            self._emit_status(
                "TASK_STATE_INPUT_REQUIRED", self._agent_message(f"ask:{number}", message)
            )
        elif outcome.kind == "auth":
            self._emit_status(
                "TASK_STATE_AUTH_REQUIRED", self._agent_message(f"auth:{number}", message)
            )
        else:
            final = self._agent_message("final", message) if message else None
            self._emit_status("TASK_STATE_COMPLETED", final)
            direct = outcome.kind == "reply" and self._may_reply and not outcome.emitted
            if direct and final is not None and not outcome.artifacts:
                self._reply = final

    # -- handlers -----------------------------------------------------------------------------------

    @workflow.update
    async def deliver(self, inbound: Inbound) -> Receipt:
        message_id = str(inbound.message.get("messageId", ""))
        cursor = self._last_seq()
        duplicate = not self._accept(inbound)
        mine = self._accepted
        if inbound.wait:
            await workflow.wait_condition(
                lambda: self._closed or (self._processed >= mine and self._settled())
            )
        if message_id in self._refused:
            raise ApplicationError(
                task_closed_message(self._start.task_id, self._state),
                type="TaskClosed",
                non_retryable=True,
            )
        exchange, first = self._exchange(message_id, inbound)
        return Receipt(
            duplicate=duplicate,
            cursor=cursor,
            status=self._status,
            closed=self._closed,
            busy=self._busy(),
            reply=self._reply,
            context_id=self._start.context_id,
            participants=tuple(self._participants),
            messages=exchange,
            events=tuple(self._events[max(cursor - self._archived_events, 0) :]),
            last_seq=self._last_seq(),
            first_message=first,
        )

    def _exchange(self, message_id: str, inbound: Inbound) -> tuple[tuple[ProtoJSON, ...], int]:
        """The message and what followed it in this run (itself alone while it waits for a turn),
        and the position of the first of them in the task (-1 while it waits)."""
        for index, message in enumerate(self._history):
            if message.get("messageId") == message_id:
                return tuple(self._history[index:]), self._archived_messages + index
        if message_id in self._refused:
            return (), -1
        return (inbound.message,), -1

    @deliver.validator
    def _check_delivery(self, inbound: Inbound) -> None:
        if inbound.agent_id != self._start.agent_id:
            # Another agent's task reads as not found (and is left unchanged).
            raise ApplicationError("task not found", type="TaskNotFound", non_retryable=True)
        first = self._start.first
        first_id = first.message.get("messageId") if first is not None else None
        owner_only = bool(self._ids) and inbound.message.get("messageId") != first_id
        if owner_only and not may_access(self._participants, inbound.participant):
            # A participant who is not on the task reads it as not found (the first message
            # is what puts its sender on the task).
            raise ApplicationError("task not found", type="TaskNotFound", non_retryable=True)
        message_id = str(inbound.message.get("messageId", ""))
        if message_id.startswith(f"{self._start.task_id}:"):
            raise ApplicationError(
                f"message ids starting with {self._start.task_id}: belong to the agent",
                type="MessageIdReused",
                non_retryable=True,
            )
        known = self._ids.get(message_id)
        if known is not None:
            if known != inbound.digest:
                raise ApplicationError(
                    f"message id {message_id} was already used for another message",
                    type="MessageIdReused",
                    non_retryable=True,
                )
            return
        if self._closed or self._state in TERMINAL_STATES or self._cancel_requested:
            raise ApplicationError(
                task_closed_message(self._start.task_id, self._state),
                type="TaskClosed",
                non_retryable=True,
            )
        full = self._accepted >= 2 * self._start.run_messages or self._run_bytes >= 2 * RUN_BYTES
        if self._closing or full:
            # The run is archiving itself; the sender retries in a moment, on the next run.
            raise ApplicationError("task is busy; retry", type="TaskBusy")

    @workflow.query
    def tail(self, after_event: int, after_message: int) -> TaskTail:
        """The task's status, and this run's messages and events after the given positions.

        Streams and reads use this (a query is neither written to history nor counted against the
        workflow's update limits).
        """
        return self._tail(after_event, after_message)

    @workflow.signal
    def cancel(self) -> None:
        if self._state not in TERMINAL_STATES:
            self._cancel_requested = True

    @workflow.signal
    def relay(self, progress: list[DelegationProgress]) -> None:
        """Another agent's progress on a delegation of this task, from its stand-in: shown as
        WORKING updates while the delegating turn waits (late ones change nothing)."""
        if not self._in_turn or self._state != "TASK_STATE_WORKING":
            return
        for item in progress:
            status = relayed_status(item, self._start.task_id, self._start.context_id)
            status["timestamp"] = self._now()
            self._status = status
            self._event("status", {"status": status})


@workflow.defn(name="DelegationWorkflow", sandboxed=False)
class DelegationWorkflow:
    """The stand-in of one delegation, a child of the delegating task on the same queue.

    It sends the message to the other agent over A2A and reads the answer on the send's own
    stream for a moment (``[delegation] stream_for``); a task still running then is followed by
    the other agent's pushes to this stand-in, or by reading it (GetTask, backing off) until it
    settles (answered, asking, ended). The other agent's progress on the way is relayed to the
    delegating task. Canceled with its parent, it cancels the remote task.

    It runs outside the sandbox (creating a sandboxed workflow costs ~10 ms, paid on every
    delegation): it calls nothing but Temporal's workflow API and pure functions of ``payloads``.
    """

    def __init__(self) -> None:
        self._pushes: list[ProtoJSON] = []  # pushed statuses not looked at yet
        self._relays = 0  # statuses relayed to the delegating task

    @workflow.signal
    def pushed(self, state: str, status: ProtoJSON | None = None) -> None:
        """The other agent pushed an update of its task (checked by the receiver first)."""
        self._pushes.append(status if status is not None else {"state": state})

    @workflow.run
    async def run(self, request: DelegationRequest) -> DelegationResult:
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=10,
            non_retryable_error_types=["UnknownAgent", "DelegationRefused"],
        )
        remote_task_id = ""
        try:
            stale = ""
            if request.message.get("taskId") and workflow.patched(_DELEGATION_STALE):
                # It answers the other agent's question: the question's status, noted once
                # before the send (a retried send must not take the answer for the question).
                stale = await workflow.execute_local_activity(
                    DELEGATE_STATUS,
                    request,
                    result_type=str,
                    start_to_close_timeout=timedelta(seconds=60),
                    retry_policy=retry,
                )
            # Short calls run as local activities: no round trip through the task queue.
            result: DelegationResult = await workflow.execute_local_activity(
                DELEGATE_SEND,
                args=[request, stale],
                result_type=DelegationResult,
                # The send reads the answer on its stream for at most a few seconds.
                start_to_close_timeout=timedelta(seconds=90),
                retry_policy=retry,
            )
            if result.state in SETTLED_STATES:
                return result  # the delegating task shows its progress with the answer
            remote_task_id = result.remote_task_id
            seen = await self._relay(request, result, result.stale)
            silence = 60.0
            while result.pushed and result.state not in SETTLED_STATES:
                # Woken by a push, or after a silence: then the task is read.
                with contextlib.suppress(asyncio.TimeoutError):
                    await workflow.wait_condition(
                        lambda: bool(self._pushes), timeout=timedelta(seconds=silence)
                    )
                pushes = [p for p in self._pushes if status_key(p) != seen]
                self._pushes.clear()
                news = [
                    p for p in pushes if "message" in p and p.get("state") not in SETTLED_STATES
                ]
                if news:
                    # The latest of a batch is enough to show.
                    latest = attrs.evolve(result, progress=tuple(news[-1:]))
                    seen = await self._relay(request, latest, seen)
                settled = any(p.get("state") in SETTLED_STATES for p in pushes)
                if pushes and not settled:
                    silence = 60.0
                    continue
                silence = min(silence * 2, 600.0)
                polled = await workflow.execute_local_activity(
                    DELEGATE_POLL,
                    # Told that it settled, the read waits (a little) for the task to show it.
                    args=[request, remote_task_id, seen, 5.0 if settled else 0.0],
                    result_type=DelegationResult,
                    start_to_close_timeout=timedelta(seconds=60),
                    retry_policy=retry,
                )
                result = attrs.evolve(polled, pushed=True)
            while result.state not in SETTLED_STATES:
                # Followed: an activity that reads the task until it settles or says something,
                # heartbeating.
                result = await workflow.execute_activity(
                    DELEGATE_WAIT,
                    args=[request, remote_task_id, seen, self._relays < MAX_STAND_IN_RELAYS],
                    result_type=DelegationResult,
                    start_to_close_timeout=timedelta(days=1),
                    heartbeat_timeout=_HEARTBEAT_TIMEOUT,
                    retry_policy=retry,
                )
                if result.state not in SETTLED_STATES:
                    seen = await self._relay(request, result, seen)
            return result
        except (ActivityError, ApplicationError) as error:
            # A local activity's failure arrives as the ApplicationError itself.
            cause = error.__cause__ if isinstance(error, ActivityError) else error
            if not isinstance(cause, CancelledError):
                # Only our own words: anything else may carry the other side's text.
                why = "it could not be reached"
                if isinstance(cause, ApplicationError) and cause.type in _DELEGATION_FAILURES:
                    why = cause.message
                return DelegationResult(
                    target=request.target, remote_task_id="", state="", error=why
                )
            await self._cancel_remote(request, remote_task_id)
            raise
        except asyncio.CancelledError:
            await self._cancel_remote(request, remote_task_id)
            raise

    async def _relay(self, request: DelegationRequest, result: DelegationResult, seen: str) -> str:
        """Show the other agent's progress to the delegating task's clients (one signal); returns
        the ``status_key`` of the last status relayed (``seen`` when none). Past
        ``MAX_STAND_IN_RELAYS`` nothing more is relayed: the task's history stays bounded."""
        if not result.progress or self._relays >= MAX_STAND_IN_RELAYS:
            return seen
        self._relays += len(result.progress)
        parent = workflow.get_external_workflow_handle(request.parent_task_id)
        with contextlib.suppress(FailureError):  # the delegating task ended: nobody to tell
            await parent.signal(TaskWorkflow.relay, result.relays(workflow.info().workflow_id))
        return status_key(result.progress[-1])

    async def _cancel_remote(self, request: DelegationRequest, remote_task_id: str) -> None:
        """The delegating task was canceled: cancel the other agent's task too."""
        if not remote_task_id:
            return
        await workflow.execute_activity(
            DELEGATE_CANCEL,
            args=[request, remote_task_id],
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(maximum_attempts=3),
        )


@workflow.defn(name="HeartbeatWorkflow")
class HeartbeatWorkflow:
    """Started by the agent's schedule every ``[heartbeat] interval``: records that the agent is served."""

    @workflow.run
    async def run(self, agent_id: str) -> None:
        await workflow.execute_activity(
            HEARTBEAT,
            agent_id,
            start_to_close_timeout=timedelta(seconds=30),
        )
