"""What others learn of a task's run: a reader's tail, the store's archive, the listing index's
entry, and what the next run carries.

A base of ``TaskState`` (``harness_core.tasks.state``), pure like it: no Temporal, no I/O, no clock.
Each record is read off the run's state; only the index entry changes it (the events the index has).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness_core.payloads import (
    Archive,
    IndexEntry,
    ProtoJSON,
    TaskCarry,
    TaskEvent,
    TaskRecord,
    TaskStart,
    TaskTail,
)

__all__ = ["Records"]


class Records:
    """What ``TaskState`` tells the others: readers, the agent's store, its index, the next run."""

    start: TaskStart
    status: ProtoJSON
    participants: list[str]
    run_ids: list[tuple[str, str]]
    archived_messages: int
    archived_events: int
    indexed_seq: int
    turns: int
    runs: int
    cancel_requested: bool
    push: bool
    pushed: int
    long_turns: bool
    history: list[ProtoJSON]
    events: list[TaskEvent]
    senders: dict[str, str]
    persisted: int
    closed: bool
    reopen: bool
    reply: ProtoJSON | None
    _now: Callable[[], str]

    def busy(self) -> bool:
        raise NotImplementedError

    def last_seq(self) -> int:
        raise NotImplementedError

    def _senders_of(self, messages: Sequence[ProtoJSON]) -> tuple[tuple[str, str], ...]:
        return tuple(
            (m, p)
            for m in (str(h.get("messageId", "")) for h in messages)
            if (p := self.senders.get(m)) is not None
        )

    def tail(self, after_event: int, after_message: int) -> TaskTail:
        first_event = max(after_event - self.archived_events, 0)
        first_message = max(after_message - self.archived_messages, 0)
        return TaskTail(
            status=self.status,
            participants=tuple(self.participants),
            agent_id=self.start.agent_id,
            closed=self.closed,
            busy=self.busy(),
            archived_messages=self.archived_messages,
            archived_events=self.archived_events,
            messages=tuple(self.history[first_message:]),
            events=tuple(self.events[first_event:]),
            last_seq=self.last_seq(),
        )

    def archive(self) -> Archive:
        """The run's messages and events, for the agent's store."""
        start = self.start
        return Archive(
            task_id=start.task_id,
            agent_id=start.agent_id,
            context_id=start.context_id,
            first_message=self.archived_messages,
            messages=tuple(self.history),
            events=tuple(self.events),
            participants=tuple(self.participants),
            senders=tuple(self.senders.items()),
        )

    def final_record(self) -> TaskRecord:
        """The ended task's summary, for the store (with ``archive``) and the workflow's result."""
        start = self.start
        return TaskRecord(
            task_id=start.task_id,
            context_id=start.context_id,
            agent_id=start.agent_id,
            state=str(self.status.get("state", "")),
            status=self.status,
            participants=tuple(self.participants),
            updated_at=str(self.status.get("timestamp", self._now())),
            messages=self.archived_messages + len(self.history),
            events=self.last_seq(),
            reply=self.reply,
        )

    def index_entry(self, first_message: int, messages: int) -> IndexEntry:
        """The index's news: this run's messages from ``first_message`` (of the run) on, the events
        it has not had, and the task's state. The index has every event after this."""
        start = self.start
        written = self.history[first_message:messages]
        archive = Archive(
            task_id=start.task_id,
            agent_id=start.agent_id,
            context_id=start.context_id,
            first_message=self.archived_messages + first_message,
            messages=tuple(written),
            events=tuple(self.events[max(self.indexed_seq - self.archived_events, 0) :]),
            participants=tuple(self.participants),
            senders=self._senders_of(written),
        )
        self.indexed_seq = self.last_seq()
        return IndexEntry(
            archive=archive,
            status=self.status,
            last_seq=self.last_seq(),
            messages=self.archived_messages + len(self.history),
            busy=self.busy(),
            reopen=self.reopen,
        )

    def checkpoint(self) -> IndexEntry:
        """The index entry of a task at rest (or waiting on other agents)."""
        return self.index_entry(self.persisted, len(self.history))

    def carry(self) -> TaskCarry:
        """What the next run carries: the task's state, not its content (archived first)."""
        return TaskCarry(
            status=self.status,
            participants=tuple(self.participants),
            # The latest ids, whichever run took them: a run that took none still knows the
            # last run's (a retry of one of them changes nothing); older ones are in the store.
            recent_ids=tuple(self.run_ids[-2 * self.start.run_messages :]),
            archived_messages=self.archived_messages + len(self.history),
            archived_events=self.last_seq(),
            turns=self.turns,
            runs=self.runs,
            cancel_requested=self.cancel_requested,
            push=self.push,
            pushed_seq=self.pushed,
            long_turns=self.long_turns,
        )
