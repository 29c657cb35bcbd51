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
)

__all__ = ["HeartbeatWorkflow", "TaskWorkflow", "task_closed_message"]

MODEL_TURN = "model_turn"
STORE_RECORD = "store_record"
HEARTBEAT = "heartbeat"

# The text of the validator's refusal; the HTTP layer recognises it to answer with a clear A2A error.
CLOSED_TASK = "task is closed"
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
        self._start: TaskStart | None = start
        self._state = "TASK_STATE_SUBMITTED"
        self._status_message: ProtoJSON | None = None
        self._history: list[ProtoJSON] = []
        self._artifacts: list[ProtoJSON] = []
        self._events: list[TaskEvent] = []
        self._mailbox: list[Inbound] = []
        self._message_ids: list[str] = []
        self._participants: list[str] = []
        self._accepted = 0  # messages accepted so far
        self._processed = 0  # messages a finished turn has seen
        self._turns = 0
        self._in_turn = False
        self._cancel_requested = False
        self._closed = False
        self._timestamp = workflow.now().isoformat().replace("+00:00", "Z")

    # -- the task as clients see it ---------------------------------------------------------------

    def _ids(self) -> tuple[str, str]:
        assert self._start is not None
        return self._start.task_id, self._start.context_id

    def _task(self) -> ProtoJSON:
        task_id, context_id = self._ids()
        status: ProtoJSON = {"state": self._state, "timestamp": self._timestamp}
        if self._status_message is not None:
            status["message"] = self._status_message
        task: ProtoJSON = {"id": task_id, "contextId": context_id, "status": status}
        if self._history:
            task["history"] = list(self._history)
        if self._artifacts:
            task["artifacts"] = list(self._artifacts)
        return task

    def _view(self) -> TaskView:
        return TaskView(
            task=self._task(),
            last_seq=len(self._events),
            closed=self._closed,
            participants=tuple(self._participants),
        )

    def _settled(self) -> bool:
        """No turn running or waiting, and the task rests in a state where a client stops waiting."""
        return not self._mailbox and not self._in_turn and self._state in SETTLED_STATES

    def _page(self, after: int) -> EventPage:
        return EventPage(events=tuple(self._events[max(after, 0) :]), view=self._view())

    def _emit_status(self, state: str, message: ProtoJSON | None = None) -> None:
        task_id, context_id = self._ids()
        self._state = state
        self._status_message = message
        self._timestamp = workflow.now().isoformat().replace("+00:00", "Z")
        status: ProtoJSON = {"state": state, "timestamp": self._timestamp}
        if message is not None:
            status["message"] = message
        body: ProtoJSON = {"taskId": task_id, "contextId": context_id, "status": status}
        self._events.append(TaskEvent(seq=len(self._events) + 1, kind="status", body=body))

    def _emit_artifact(self, artifact: ProtoJSON) -> None:
        task_id, context_id = self._ids()
        self._artifacts.append(artifact)
        body: ProtoJSON = {
            "taskId": task_id,
            "contextId": context_id,
            "artifact": artifact,
            "lastChunk": True,
        }
        self._events.append(TaskEvent(seq=len(self._events) + 1, kind="artifact", body=body))

    def _agent_message(self, key: str, text: str) -> ProtoJSON:
        task_id, context_id = self._ids()
        message: ProtoJSON = {
            "messageId": f"{task_id}:{key}",
            "role": "ROLE_AGENT",
            "parts": [{"text": text}],
            "taskId": task_id,
            "contextId": context_id,
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
        self._closed = True
        record = TaskRecord(
            task_id=start.task_id,
            context_id=start.context_id,
            agent_id=start.agent_id,
            state=self._state,
            task=self._task(),
            events=tuple(self._events),
            message_ids=tuple(self._message_ids),
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

    async def _turn(self, start: TaskStart) -> None:
        self._in_turn = True
        taken = len(self._mailbox)
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
        if start.local_activity:
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
        task_id, _ = self._ids()
        if output.action == "ask":
            message = self._agent_message(f"ask:{self._turns}", output.text)
            self._emit_status("TASK_STATE_INPUT_REQUIRED", message)
        elif output.action == "fail":
            self._emit_status("TASK_STATE_FAILED", self._agent_message("final", output.text))
        else:
            self._emit_artifact(
                {
                    "artifactId": f"{task_id}:result:{self._turns}",
                    "name": "result",
                    "parts": [{"text": output.text}],
                }
            )
            self._emit_status("TASK_STATE_COMPLETED", self._agent_message("final", output.text))

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
        duplicate = message_id in self._message_ids
        cursor = len(self._events)
        if not duplicate:
            self._message_ids.append(message_id)
            if inbound.participant and inbound.participant not in self._participants:
                self._participants.append(inbound.participant)
            task_id, context_id = self._ids()
            message = {**inbound.message, "taskId": task_id, "contextId": context_id}
            self._history.append(message)
            self._mailbox.append(inbound)
            self._accepted += 1
        mine = self._accepted
        if inbound.wait:
            await workflow.wait_condition(
                lambda: self._closed or (self._processed >= mine and self._settled())
            )
        return Receipt(duplicate=duplicate, cursor=cursor, view=self._view())

    @deliver.validator
    def _refuse_closed(self, inbound: Inbound) -> None:
        message_id = str(inbound.message.get("messageId", ""))
        if self._start is None or message_id in self._message_ids:
            return
        if self._closed or self._state in TERMINAL_STATES or self._cancel_requested:
            raise ApplicationError(
                task_closed_message(self._start.task_id, self._state),
                type="TaskClosed",
                non_retryable=True,
            )

    @workflow.update
    async def follow(self, after: int) -> EventPage:
        """Wait until the log has events after ``after``, or the task settled; return them."""
        await workflow.wait_condition(
            lambda: len(self._events) > after or self._settled() or self._closed
        )
        return self._page(after)

    @workflow.query
    def events(self, after: int) -> EventPage:
        return self._page(after)

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
