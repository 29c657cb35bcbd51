"""Which messages a task takes, and what their senders learn: the admission rules of ``TaskState``.

A base of ``TaskState`` (``harness_core.tasks.state``), pure like it: no Temporal, no I/O, no clock.
It checks a message against the task (its agent, its participants, the ids it has, whether it is
closed or its run full), takes it into the mailbox, and says what the sender's receipt holds; when
the run loop ends, it keeps (canceled) or refuses (ended) the messages still queued.
"""

from __future__ import annotations

from typing import Literal

import attrs

from harness_core.payloads import Inbound, ProtoJSON, Receipt, TaskEvent, TaskStart, may_access

__all__ = [
    "CLOSED_TASK",
    "RUN_BYTES",
    "RUN_MESSAGES",
    "Admission",
    "TaskRefused",
    "task_closed_message",
]

# The text of a closed task's refusal; the HTTP layer recognises it to answer with a clear A2A error.
CLOSED_TASK = "task is closed"
#: A run continues as new once idle past this many messages or bytes of them (JSON); it refuses
#: further messages for a moment (``TaskBusy``, retried by the sender) at twice as many, which only
#: a flood during one turn reaches.
RUN_MESSAGES = 200
RUN_BYTES = 512 * 1024


def task_closed_message(task_id: str, state: str) -> str:
    return f"{CLOSED_TASK}: task {task_id} is {state.removeprefix('TASK_STATE_').lower()}"


class TaskRefused(Exception):
    """A message the task does not take. ``kind`` is the failure type the sender learns
    (``TaskNotFound``, ``MessageIdReused``, ``TaskClosed``, or ``TaskBusy``, the one worth a retry)."""

    def __init__(
        self,
        kind: Literal["TaskNotFound", "MessageIdReused", "TaskClosed", "TaskBusy"],
        message: str,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.kind == "TaskBusy"


class Admission:
    """The messages of ``TaskState``: which it takes, and what their senders learn."""

    start: TaskStart
    status: ProtoJSON
    participants: list[str]
    ids: dict[str, str]
    run_ids: list[tuple[str, str]]
    archived_messages: int
    archived_events: int
    cancel_requested: bool
    push: bool
    history: list[ProtoJSON]
    events: list[TaskEvent]
    mailbox: list[Inbound]
    senders: dict[str, str]
    refused: set[str]
    run_bytes: int
    accepted: int
    processed: int
    in_turn: bool
    closing: bool
    closed: bool
    reply: ProtoJSON | None
    _started_with: str

    @property
    def state(self) -> str:
        raise NotImplementedError

    @property
    def task_id(self) -> str:
        raise NotImplementedError

    def busy(self) -> bool:
        raise NotImplementedError

    def settled(self) -> bool:
        raise NotImplementedError

    def ended(self) -> bool:
        raise NotImplementedError

    def last_seq(self) -> int:
        raise NotImplementedError

    def check(self, inbound: Inbound) -> None:
        """Raise ``TaskRefused`` unless the task takes ``inbound`` (a retry of a message it has is
        taken: it changes nothing)."""
        if inbound.agent_id != self.start.agent_id:
            # Another agent's task reads as not found (and is left unchanged).
            raise TaskRefused("TaskNotFound", "task not found")
        first = self.start.first
        first_id = first.message.get("messageId") if first is not None else None
        owner_only = bool(self.ids) and inbound.message.get("messageId") != first_id
        if owner_only and not may_access(self.participants, inbound.participant):
            # A participant who is not on the task reads it as not found (the first message
            # is what puts its sender on the task).
            raise TaskRefused("TaskNotFound", "task not found")
        message_id = str(inbound.message.get("messageId", ""))
        if message_id.startswith(f"{self.task_id}:"):
            raise TaskRefused(
                "MessageIdReused", f"message ids starting with {self.task_id}: belong to the agent"
            )
        known = self.ids.get(message_id)
        if known is not None:
            if known != inbound.digest:
                raise TaskRefused(
                    "MessageIdReused",
                    f"message id {message_id} was already used for another message",
                )
            return
        if self.closed or self.ended() or self.cancel_requested:
            raise TaskRefused("TaskClosed", task_closed_message(self.task_id, self.state))
        full = self.accepted >= 2 * self.start.run_messages or self.run_bytes >= 2 * RUN_BYTES
        if self.closing or full:
            # The run is archiving itself; the sender retries in a moment, on the next run.
            raise TaskRefused("TaskBusy", "task is busy; retry")

    def accept(self, inbound: Inbound) -> bool:
        """Take a user message into the task (False: a retry of one it has)."""
        message_id = str(inbound.message.get("messageId", ""))
        if message_id in self.ids:
            return False
        message = {**inbound.message, "taskId": self.task_id, "contextId": self.start.context_id}
        self.ids[message_id] = inbound.digest
        self.run_ids.append((message_id, inbound.digest))
        if inbound.participant:
            self.senders[message_id] = inbound.participant
            if inbound.participant not in self.participants:
                self.participants.append(inbound.participant)
        # Idle: the message is next in the history. During a turn it waits for the next turn to
        # take it, so the history stays in the order the model saw it.
        self.mailbox.append(attrs.evolve(inbound, message=message))
        if not self.in_turn:
            self.history.append(message)
        self.run_bytes += inbound.size
        self.accepted += 1
        if inbound.push:
            self.push = True
        return True

    def take(self, inbound: Inbound) -> bool:
        """A delivery of ``inbound``: whether it is new to the task (False: a retry of a message
        it has). The first delivery of the message the task started with is new, though the
        start took the message already."""
        if self.accept(inbound):
            return True
        if self._started_with and inbound.message.get("messageId") == self._started_with:
            self._started_with = ""
            return True
        return False

    def answered(self, accepted: int) -> bool:
        """A blocking sender whose message was the ``accepted``-th of the run may have its answer."""
        return self.closed or (self.processed >= accepted and self.settled())

    def receipt(
        self, message_id: str, inbound: Inbound, *, cursor: int, duplicate: bool
    ) -> Receipt:
        """What the sender of ``inbound`` learns: raises ``TaskRefused`` when the task ended
        before a turn took it."""
        if message_id in self.refused:
            raise TaskRefused("TaskClosed", task_closed_message(self.task_id, self.state))
        exchange, first = self._exchange(message_id, inbound)
        return Receipt(
            duplicate=duplicate,
            cursor=cursor,
            status=self.status,
            closed=self.closed,
            busy=self.busy(),
            reply=self.reply,
            context_id=self.start.context_id,
            participants=tuple(self.participants),
            messages=exchange,
            events=tuple(self.events[max(cursor - self.archived_events, 0) :]),
            last_seq=self.last_seq(),
            first_message=first,
        )

    def _exchange(self, message_id: str, inbound: Inbound) -> tuple[tuple[ProtoJSON, ...], int]:
        """The message and what followed it in this run (itself alone while it waits for a turn),
        and the position of the first of them in the task (-1 while it waits)."""
        for index, message in enumerate(self.history):
            if message.get("messageId") == message_id:
                return tuple(self.history[index:]), self.archived_messages + index
        if message_id in self.refused:
            return (), -1
        return (inbound.message,), -1

    def keep_pending(self) -> None:
        """The task was canceled with messages still queued: they were accepted before the cancel,
        so they stay in the task, unanswered (their waiting senders get the canceled task)."""
        in_history = {m.get("messageId") for m in self.history}
        for inbound in self.mailbox:
            if inbound.message.get("messageId") not in in_history:
                self.history.append(inbound.message)
        self.processed += len(self.mailbox)
        self.mailbox.clear()

    def refuse_pending(self) -> None:
        """The task ended with messages still queued: drop them, and tell their waiting senders."""
        for inbound in self.mailbox:
            message_id = str(inbound.message.get("messageId", ""))
            self.refused.add(message_id)
            self.history = [m for m in self.history if m.get("messageId") != message_id]
        self.processed += len(self.mailbox)
        self.mailbox.clear()
