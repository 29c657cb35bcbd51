"""Durable tasks: one ``TaskWorkflow`` per A2A task (workflow id = task id), and the heartbeat.

A message reaches a task through the ``deliver`` update (update-with-start for a new task). Messages are
deduplicated by message id, and a closed task refuses new ones in the update's validator, so a refused
message leaves no trace in history. Each turn is an activity that calls the agent's model. Every status
change and artifact is appended to an event log kept in the workflow, which streaming follows through the
``follow`` update and ``events`` query; progress message ids are ``<task id>:<semantic key>`` and the last
one ``<task id>:final``, so a replay or retry never produces a second copy of a message. Cancel is a
signal. When the task ends, its record goes to the agent's store before the workflow returns it.

Workflow code must be deterministic: time comes from ``workflow.now()``, and nothing here does I/O.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from harness_core.payloads import (
    SETTLED_STATES,
    TERMINAL_STATES,
    ChatMessage,
    EventPage,
    Inbound,
    ProtoJSON,
    Receipt,
    TaskEvent,
    TaskRecord,
    TaskStart,
    TaskView,
    TurnInput,
    TurnOutput,
    may_access,
)

__all__ = ["HeartbeatWorkflow", "TaskWorkflow", "task_closed_message"]

MODEL_TURN = "model_turn"
STORE_RECORD = "store_record"
HEARTBEAT = "heartbeat"

# The text of the validator's refusal; the HTTP layer recognises it to answer with a clear A2A error.
CLOSED_TASK = "task is closed"
#: The most user-message bytes one task holds (each also appears in the record's history).
TASK_MESSAGES_BUDGET = 512 * 1024
#: The most messages one task takes: each is an update, and Temporal refuses a workflow run's
#: 2001st update (retries of a message are updates too, hence the margin).
TASK_MESSAGES_LIMIT = 1000
_TURN_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(milliseconds=200))


def task_closed_message(task_id: str, state: str) -> str:
    return f"{CLOSED_TASK}: task {task_id} is {state.removeprefix('TASK_STATE_').lower()}"


def _text_of(message: ProtoJSON) -> str:
    parts: list[dict[str, Any]] = message.get("parts") or []
    texts = [str(p["text"]) for p in parts if "text" in p]
    return "\n".join(texts)


@workflow.defn(name="TaskWorkflow")
class TaskWorkflow:
    @workflow.init
    def __init__(self, start: TaskStart) -> None:
        # Taken at construction so that an update delivered with the start already knows the task.
        self._start = start
        self._state = "TASK_STATE_SUBMITTED"
        self._status_message: ProtoJSON | None = None
        self._history: list[ProtoJSON] = []
        self._artifacts: list[ProtoJSON] = []
        self._events: list[TaskEvent] = []
        self._mailbox: list[Inbound] = []
        self._messages: dict[str, ProtoJSON] = {}  # every accepted message, by id
        self._refused: set[str] = set()  # accepted, then dropped because the task ended first
        self._messages_bytes = 0  # JSON size of the accepted user messages
        self._participants: list[str] = []
        self._accepted = 0  # messages accepted so far
        self._processed = 0  # messages a finished turn has seen (or the end has refused)
        self._turns = 0
        self._in_turn = False
        self._cancel_requested = False
        self._closed = False
        self._timestamp = workflow.now().isoformat().replace("+00:00", "Z")

    # -- the task as clients see it ---------------------------------------------------------------

    def _task(self, *, full: bool = True) -> ProtoJSON:
        status: ProtoJSON = {"state": self._state, "timestamp": self._timestamp}
        if self._status_message is not None:
            status["message"] = self._status_message
        task: ProtoJSON = {
            "id": self._start.task_id,
            "contextId": self._start.context_id,
            "status": status,
        }
        if full and self._history:
            task["history"] = list(self._history)
        if full and self._artifacts:
            task["artifacts"] = list(self._artifacts)
        return task

    def _view(self, *, full: bool = True) -> TaskView:
        return TaskView(
            task=self._task(full=full),
            last_seq=len(self._events),
            closed=self._closed,
            participants=tuple(self._participants),
            agent_id=self._start.agent_id,
            busy=self._busy(),
        )

    def _busy(self) -> bool:
        """A turn runs, or a message waits for one."""
        return bool(self._mailbox) or self._in_turn

    def _settled(self) -> bool:
        """Nothing to do, and the task rests in a state where a client stops waiting."""
        return not self._busy() and self._state in SETTLED_STATES

    def _emit_status(self, state: str, message: ProtoJSON | None = None) -> None:
        self._state = state
        self._status_message = message
        self._timestamp = workflow.now().isoformat().replace("+00:00", "Z")
        status: ProtoJSON = {"state": state, "timestamp": self._timestamp}
        if message is not None:
            status["message"] = message
        body: ProtoJSON = {
            "taskId": self._start.task_id,
            "contextId": self._start.context_id,
            "status": status,
        }
        self._events.append(TaskEvent(seq=len(self._events) + 1, kind="status", body=body))

    def _emit_artifact(self, artifact: ProtoJSON) -> None:
        self._artifacts.append(artifact)
        body: ProtoJSON = {
            "taskId": self._start.task_id,
            "contextId": self._start.context_id,
            "artifact": artifact,
            "lastChunk": True,
        }
        self._events.append(TaskEvent(seq=len(self._events) + 1, kind="artifact", body=body))

    def _agent_message(self, key: str, text: str) -> ProtoJSON:
        task_id = self._start.task_id
        message: ProtoJSON = {
            "messageId": f"{task_id}:{key}",
            "role": "ROLE_AGENT",
            "parts": [{"text": text}],
            "taskId": task_id,
            "contextId": self._start.context_id,
        }
        self._history.append(message)
        return message

    # -- handlers ---------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: TaskStart) -> TaskRecord:
        while True:
            await workflow.wait_condition(lambda: bool(self._mailbox) or self._cancel_requested)
            if self._cancel_requested:
                self._emit_status("TASK_STATE_CANCELED", self._agent_message("final", "canceled"))
                break
            await self._turn(start)
            if self._state in TERMINAL_STATES:
                break
        self._refuse_pending()
        self._closed = True
        record = TaskRecord(
            task_id=start.task_id,
            context_id=start.context_id,
            agent_id=start.agent_id,
            state=self._state,
            task=self._task(),
            events=tuple(self._events),
            message_ids=tuple(m for m in self._messages if m not in self._refused),
            participants=tuple(self._participants),
            updated_at=self._timestamp,
        )
        await workflow.execute_local_activity(
            STORE_RECORD,
            record,
            start_to_close_timeout=timedelta(seconds=30),
        )
        # Followers and blocked senders wake on _closed; let their updates finish first.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return record

    def _refuse_pending(self) -> None:
        """The task ended with messages still queued: drop them, and tell their waiting senders."""
        for inbound in self._mailbox:
            message_id = str(inbound.message.get("messageId", ""))
            self._refused.add(message_id)
            self._history = [m for m in self._history if m.get("messageId") != message_id]
        self._processed += len(self._mailbox)
        self._mailbox.clear()

    async def _turn(self, start: TaskStart) -> None:
        self._in_turn = True
        taken = len(self._mailbox)
        # A local activity holds the workflow task, so reads, streams and cancels of the task wait
        # for the turn; it is worth it only when every sender is waiting for the answer anyway.
        local = start.local_activity and all(inbound.wait for inbound in self._mailbox)
        in_history = {m.get("messageId") for m in self._history}
        for inbound in self._mailbox:
            message_id = inbound.message.get("messageId")
            if message_id not in in_history:
                self._history.append(self._messages[str(message_id)])
        self._mailbox.clear()
        self._turns += 1
        if self._state != "TASK_STATE_WORKING":
            self._emit_status("TASK_STATE_WORKING")
        turn = TurnInput(
            agent_id=start.agent_id,
            task_id=start.task_id,
            context_id=start.context_id,
            number=self._turns,
            history=tuple(self._chat_history()),
        )
        timeout = timedelta(seconds=start.turn_timeout)
        if local:
            handle = workflow.start_local_activity(
                MODEL_TURN,
                turn,
                result_type=TurnOutput,
                start_to_close_timeout=timeout,
                retry_policy=_TURN_RETRY,
            )
        else:
            handle = workflow.start_activity(
                MODEL_TURN,
                turn,
                result_type=TurnOutput,
                start_to_close_timeout=timeout,
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=_TURN_RETRY,
            )
        await workflow.wait_condition(lambda: handle.done() or self._cancel_requested)
        try:
            if self._cancel_requested and not handle.done():
                handle.cancel()
                self._emit_status("TASK_STATE_CANCELED", self._agent_message("final", "canceled"))
                return
            try:
                output = await handle
            except (ActivityError, ApplicationError):
                # A local activity's final failure arrives as the ApplicationError itself.
                workflow.logger.warning(
                    "model turn %d of task %s failed", self._turns, start.task_id
                )
                output = TurnOutput("the agent could not complete this task", action="fail")
            self._apply(output)
        finally:
            self._processed += taken
            self._in_turn = False

    def _apply(self, output: TurnOutput) -> None:
        number = self._turns
        if output.action == "fail":
            self._emit_status("TASK_STATE_FAILED", self._agent_message("final", output.text))
        elif self._mailbox:
            # Messages arrived during this turn; the model has not seen them, so the task does
            # not settle: its answer is recorded and the next turn takes them.
            key = "ask" if output.action == "ask" else "answer"
            self._agent_message(f"{key}:{number}", output.text)
            if output.action == "answer":
                self._emit_artifact(self._result(number, output.text))
        elif output.action == "ask":
            message = self._agent_message(f"ask:{number}", output.text)
            self._emit_status("TASK_STATE_INPUT_REQUIRED", message)
        else:
            self._emit_artifact(self._result(number, output.text))
            self._emit_status("TASK_STATE_COMPLETED", self._agent_message("final", output.text))

    def _result(self, number: int, text: str) -> ProtoJSON:
        return {
            "artifactId": f"{self._start.task_id}:result:{number}",
            "name": "result",
            "parts": [{"text": text}],
        }

    def _chat_history(self) -> list[ChatMessage]:
        return [
            ChatMessage(
                role="agent" if m.get("role") == "ROLE_AGENT" else "user",
                text=_text_of(m),
                message_id=str(m.get("messageId", "")),
            )
            for m in self._history
        ]

    @workflow.update
    async def deliver(self, inbound: Inbound) -> Receipt:
        message_id = str(inbound.message.get("messageId", ""))
        duplicate = message_id in self._messages
        cursor = len(self._events)
        if not duplicate:
            message = {
                **inbound.message,
                "taskId": self._start.task_id,
                "contextId": self._start.context_id,
            }
            self._messages[message_id] = message
            self._messages_bytes += inbound.size
            if inbound.participant and inbound.participant not in self._participants:
                self._participants.append(inbound.participant)
            if not self._in_turn:
                # Idle: the message is next in the history. During a turn it waits for the next
                # turn to take it, so the history stays in the order the model saw it.
                self._history.append(message)
            self._mailbox.append(inbound)
            self._accepted += 1
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
        return Receipt(duplicate=duplicate, cursor=cursor, view=self._view())

    @deliver.validator
    def _check_delivery(self, inbound: Inbound) -> None:
        if inbound.agent_id != self._start.agent_id:
            # Another agent's task reads as not found (and is left unchanged).
            raise ApplicationError("task not found", type="TaskNotFound", non_retryable=True)
        if self._messages and not may_access(self._participants, inbound.participant):
            # A participant who is not on the task reads it as not found (the first message,
            # delivered with the start, is what puts its sender on the task).
            raise ApplicationError("task not found", type="TaskNotFound", non_retryable=True)
        message_id = str(inbound.message.get("messageId", ""))
        if message_id.startswith(f"{self._start.task_id}:"):
            raise ApplicationError(
                f"message ids starting with {self._start.task_id}: belong to the agent",
                type="MessageIdReused",
                non_retryable=True,
            )
        known = self._messages.get(message_id)
        if known is not None:
            if known.get("parts") != inbound.message.get("parts"):
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
        # The task's record (history, artifacts, events) travels through Temporal, whose
        # payloads stop at 2 MB; refuse the message that would take the task past its budget.
        size = self._messages_bytes + inbound.size
        if size > TASK_MESSAGES_BUDGET or len(self._messages) >= TASK_MESSAGES_LIMIT:
            raise ApplicationError(
                f"task {self._start.task_id} is full: it holds at most {TASK_MESSAGES_LIMIT} "
                f"messages and {TASK_MESSAGES_BUDGET} bytes of them; start a new task",
                type="TaskFull",
                non_retryable=True,
            )

    @workflow.query
    def events(self, after: int) -> EventPage:
        """Events after ``after``, and the whole task."""
        return EventPage(events=tuple(self._events[max(after, 0) :]), view=self._view())

    @workflow.query
    def progress(self, after: int) -> EventPage:
        """Events after ``after``, and the task's state without its history or artifacts.

        Streams poll this (a query is neither written to history nor counted against the
        workflow's update limits, which a long stream of updates would exhaust).
        """
        return EventPage(events=tuple(self._events[max(after, 0) :]), view=self._view(full=False))

    @workflow.query
    def view(self) -> TaskView:
        return self._view()

    @workflow.signal
    def cancel(self) -> None:
        if self._state not in TERMINAL_STATES:
            self._cancel_requested = True


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
