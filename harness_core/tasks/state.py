"""The rules of one task, with no I/O: what a message, an outcome, a cancel or a timer does to it.

``TaskState`` holds one run of a task (its messages, events, mailbox and counters) and decides:
whether a message is taken (and what a refusal says), what a turn is given, how an outcome changes the
task, what the listing index and the archive learn, when the run is full, and what the next run
carries. Two of those live in its bases: which messages it takes, in ``Admission``
(``harness_core.tasks.admission``), and what a reader, the store, the index and the next run learn,
in ``Records`` (``harness_core.tasks.records``). It imports nothing from Temporal and reads the time
only through the clock it is given, so every rule is tested without a server
(``tests/unit/test_task_state.py``, with hypothesis over any sequence of inputs). ``TaskWorkflow``
(``harness_core.tasks.workflow``) is its driver: it waits, runs activities and child workflows, and
feeds what they return back in (hypercorn's sans-IO protocol classes with thin runners are the
model, ``shared/STYLE.md`` §10).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, cast

from harness_core.payloads import (
    DECLINED_KEY,
    SETTLED_STATES,
    TERMINAL_STATES,
    Archive,
    DelegationProgress,
    DelegationResult,
    Inbound,
    ProtoJSON,
    TaskCarry,
    TaskEvent,
    TaskRecord,
    TaskStart,
    TurnOutcome,
    TurnRequest,
    declined,
    relayed_status,
)
from harness_core.retention import expiry_text, idle_limit
from harness_core.tasks.admission import (
    CLOSED_TASK,
    RUN_BYTES,
    RUN_MESSAGES,
    Admission,
    TaskRefused,
    task_closed_message,
)
from harness_core.tasks.records import Records

__all__ = [
    "CLOSED_TASK",
    "INLINE_HISTORY",
    "INTERRUPTED_STATES",
    "LONG_TURN",
    "RUN_BYTES",
    "RUN_MESSAGES",
    "TaskRefused",
    "TaskState",
    "answer_parts",
    "json_size",
    "task_closed_message",
    "text_message",
    "turn_end",
]

#: A turn is given the run's unwritten messages inline up to this many bytes (no store write on
#: a short conversation's turns); past it, it writes them to the store and reads its history there.
INLINE_HISTORY = 8 * 1024
INTERRUPTED_STATES = frozenset({"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"})
#: A turn this long (seconds) is long: it should not hold a workflow task (``tasks/pace.py``).
LONG_TURN = 4.0


def json_size(value: Any) -> int:
    """The size of ``value`` as compact JSON, in bytes."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def text_message(text: str) -> tuple[ProtoJSON, ...]:
    return ({"text": text},)


def answer_parts(result: DelegationResult) -> list[ProtoJSON]:
    """Another agent's answer: its final message's parts, then its artifacts'."""
    parts: list[ProtoJSON] = list(result.parts)
    for artifact in result.artifacts:
        parts.extend(cast("list[ProtoJSON]", artifact.get("parts") or []))
    return parts


class TaskState(Admission, Records):
    """One run of one task: its state, and every decision about it.

    ``now`` gives the time as an ISO-8601 string (the workflow's clock); ``start`` is the run's input,
    with what an earlier run carried over.
    """

    def __init__(self, start: TaskStart, now: Callable[[], str]) -> None:
        self.start = start
        self._now = now
        carry = start.carry
        self.status: ProtoJSON = (
            dict(carry.status) if carry else {"state": "TASK_STATE_SUBMITTED", "timestamp": now()}
        )
        self.participants: list[str] = list(carry.participants) if carry else []
        # Message id -> content digest, for this run and the one before it.
        self.ids: dict[str, str] = dict(carry.recent_ids) if carry else {}
        # The ids (with digests) this run knows of and carries on: those carried in, then its own.
        self.run_ids: list[tuple[str, str]] = list(carry.recent_ids) if carry else []
        self.archived_messages = carry.archived_messages if carry else 0
        self.archived_events = carry.archived_events if carry else 0
        # The events the listing index (the agent's store) has: it learns the others at the next
        # durable point (a turn's start, the task going idle or ending).
        self.indexed_seq = self.archived_events
        self.turns = carry.turns if carry else 0
        self.runs = (carry.runs if carry else 0) + 1
        self.cancel_requested = carry.cancel_requested if carry else False
        # Push notifications: on once a client registers a webhook for the task.
        self.push = carry.push if carry else False
        self.pushed = carry.pushed_seq if carry else 0
        # A local turn of the task took long: its later turns run as regular activities.
        self.long_turns = carry.long_turns if carry else False
        self.history: list[ProtoJSON] = []  # this run's messages
        self.events: list[TaskEvent] = []  # this run's events
        self.mailbox: list[Inbound] = []
        self.senders: dict[str, str] = {}  # message id -> participant, for this run
        # Who asked for the current turn (the sender of its latest message that names one): the
        # participant its delegations act for.
        self.asker: str | None = None
        # This run's messages that turns have already written to the store (each turn sends only
        # the ones after these, so no input copies the run's history).
        self.persisted = 0
        self.refused: set[str] = set()  # accepted, then dropped because the task ended first
        self.run_bytes = 0
        self.accepted = 0  # messages accepted in this run
        self.processed = 0  # of those, the ones a finished turn has seen (or the end refused)
        self.in_turn = False
        # The state the task had when its latest turn began.
        self.before_turn = self.state
        # The message ids of this run's relayed progress: each is shown once, however many ways
        # (push, stream, a read of the other agent's task) the stand-in learned of it.
        self.relayed: set[str] = set()
        # The index may hold an end the task did not reach (``TurnRequest.record_at``): every
        # later entry of this run takes the task back.
        self.reopen = False
        self.closing = False  # about to continue as new: new messages wait (TaskBusy)
        self.closed = False
        self.may_reply = False
        self.reply: ProtoJSON | None = None  # a direct Message answered the first message
        # The task's first message, taken at the start: the update that came with the start is
        # its delivery (not a retry), which ``take`` says once.
        self._started_with = ""
        if start.first is not None:
            self.accept(start.first)
            self._started_with = str(start.first.message.get("messageId", ""))

    @classmethod
    def resumed(
        cls,
        task_id: str,
        context_id: str,
        agent_id: str,
        *,
        status: ProtoJSON,
        participants: Sequence[str],
        archived_messages: int,
        archived_events: int,
        turns: int,
        now: str,
    ) -> TaskState:
        """A task taken up again outside its workflow, as of ``now``, from what the store (or a
        turn's request) says of it: the messages and events before these counts are stored."""
        carry = TaskCarry(
            status=status,
            participants=tuple(participants),
            recent_ids=(),
            archived_messages=archived_messages,
            archived_events=archived_events,
            turns=turns,
            runs=0,
        )
        start = TaskStart(task_id=task_id, context_id=context_id, agent_id=agent_id, carry=carry)
        return cls(start, lambda: now)

    # -- what it is ---------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return str(self.status.get("state", ""))

    @property
    def task_id(self) -> str:
        return self.start.task_id

    def busy(self) -> bool:
        """A turn runs, or a message waits for one."""
        return bool(self.mailbox) or self.in_turn

    def settled(self) -> bool:
        """Nothing to do, and the task rests in a state where a client stops waiting."""
        return not self.busy() and (self.state in SETTLED_STATES or declined(self.status))

    def ended(self) -> bool:
        return self.state in TERMINAL_STATES

    def last_seq(self) -> int:
        return self.archived_events + len(self.events)

    def run_is_full(self, suggested: bool = False) -> bool:
        """The run should continue as new (``suggested``: Temporal says its history is long)."""
        return self.accepted >= self.start.run_messages or self.run_bytes >= RUN_BYTES or suggested

    def idle_seconds(self) -> float | None:
        """How long the task may wait for input before it expires (None: as long as it takes)."""
        waiting = self.state in INTERRUPTED_STATES or declined(self.status)
        return idle_limit(self.start.idle_seconds, waiting)

    # -- events -------------------------------------------------------------------------------------

    def event(self, kind: str, body: ProtoJSON) -> None:
        body = {"taskId": self.task_id, "contextId": self.start.context_id, **body}
        seq = self.last_seq() + 1
        self.events.append(
            TaskEvent(seq=seq, kind="status" if kind == "status" else "artifact", body=body)
        )
        self.run_bytes += json_size(body)

    def emit_status(self, state: str, message: ProtoJSON | None = None) -> None:
        status: ProtoJSON = {"state": state, "timestamp": self._now()}
        if message is not None:
            status["message"] = message
        self.status = status
        self.event("status", {"status": status})

    def agent_message(self, key: str, parts: Sequence[ProtoJSON]) -> ProtoJSON:
        """An agent message with a semantic id (``<task id>:<key>``), added to the history."""
        message: ProtoJSON = {
            "messageId": f"{self.task_id}:{key}",
            "role": "ROLE_AGENT",
            "parts": list(parts),
            "taskId": self.task_id,
            "contextId": self.start.context_id,
        }
        self.history.append(message)
        self.run_bytes += json_size(message)
        return message

    def end(self, state: str, text: str) -> None:
        """The task ends in ``state``, saying ``text``."""
        self.emit_status(state, self.agent_message("final", text_message(text)))

    def expire(self) -> None:
        """It waited for input past ``[retention] idle_timeout``."""
        self.end(self.start.expired_state, expiry_text(self.start.idle_seconds))

    # -- messages -----------------------------------------------------------------------------------

    def close(self) -> None:
        """The run loop is over: queued messages stay (canceled) or are refused (ended)."""
        if self.state == "TASK_STATE_CANCELED":
            self.keep_pending()
        else:
            self.refuse_pending()
        self.closed = True

    def cancel(self) -> None:
        """A client canceled the task (the running turn is canceled by the driver)."""
        if not self.ended():
            self.cancel_requested = True

    def relay(self, progress: Sequence[DelegationProgress], *, once: bool = True) -> None:
        """Another agent's progress on a delegation of this task, shown as WORKING updates while
        the delegating turn waits (late ones change nothing). ``once``: a message relayed before
        in this run is not shown again (runs recorded before that rule pass False)."""
        if not self.in_turn or self.state != "TASK_STATE_WORKING":
            return
        for item in progress:
            status = relayed_status(item, self.task_id, self.start.context_id)
            message_id = str(status["message"]["messageId"])
            if once and message_id in self.relayed:
                continue
            self.relayed.add(message_id)
            status["timestamp"] = self._now()
            self.status = status
            self.event("status", {"status": status})

    # -- turns --------------------------------------------------------------------------------------

    def begin_turn(self) -> tuple[TurnRequest, int, bool]:
        """Start a turn on the mailbox: the request, how many messages it takes, and whether it
        may run as a local activity (every sender waits for the answer anyway)."""
        start = self.start
        self.in_turn = True
        taken = len(self.mailbox)
        local = (
            start.local_activity
            and not self.long_turns
            and all(inbound.wait for inbound in self.mailbox)
        )
        in_history = {m.get("messageId") for m in self.history}
        new_ids: list[str] = []
        self.asker = next(
            (
                i.participant
                for i in reversed(self.mailbox)
                if i.participant and not i.participant.startswith("agent:")
            ),
            self.asker,
        )
        for inbound in self.mailbox:
            message_id = str(inbound.message.get("messageId", ""))
            new_ids.append(message_id)
            if message_id not in in_history:
                self.history.append(inbound.message)
        self.mailbox.clear()
        self.turns += 1
        # What a turn that a plugin's gate declines leaves the task as.
        self.before_turn = self.state
        if self.state != "TASK_STATE_WORKING" or declined(self.status):
            self.emit_status("TASK_STATE_WORKING")
        # The request holds the whole run (no turn wrote messages, no index write took events):
        # a local turn may then store the task's end itself (``turn_end``).
        whole = self.persisted == 0 and self.indexed_seq == self.archived_events
        record = start.record_in_turn and local and whole
        unwritten = self.history[self.persisted :]
        persist = json_size(unwritten) > INLINE_HISTORY
        request = TurnRequest(
            agent_id=start.agent_id,
            task_id=start.task_id,
            context_id=start.context_id,
            number=self.turns,
            archived=self.archived_messages + self.persisted,
            messages=tuple(unwritten),
            new_ids=tuple(new_ids),
            senders=self._senders_of(unwritten),
            may_reply=self.turns == 1 and self.archived_events == 0 and len(self.events) <= 1,
            persist=persist,
            # The turn's messages travel in the request itself; the entry carries the rest.
            index=self.index_entry(len(self.history), len(self.history)),
            record_at=self._now() if record else "",
        )
        self.may_reply = request.may_reply
        if persist:
            # The turn's activity writes these messages to the store before reading its history.
            self.persisted = len(self.history)
        return request, taken, local

    def end_turn(self, taken: int) -> None:
        self.processed += taken
        self.in_turn = False

    def apply(self, outcome: TurnOutcome, at: str | None = None) -> None:
        """What the turn did: its events, artifacts, and how it ended (``at``: its status's time,
        the clock's by default)."""
        if at is None:
            self._apply(outcome)
            return
        clock, self._now = self._now, lambda: at
        try:
            self._apply(outcome)
        finally:
            self._now = clock

    def _apply(self, outcome: TurnOutcome) -> None:
        number = self.turns
        for kind, body in outcome.emitted:
            if kind == "status":
                self.status = dict(body.get("status", self.status))
            self.event(kind, body)
        for artifact in outcome.artifacts:
            self.event("artifact", {"artifact": artifact, "lastChunk": True})
        message = outcome.message
        if outcome.kind == "declined":
            # The task stays as it was before the turn, and says why (its status's metadata,
            # shown as the task's metadata): no message, no reply.
            why = {DECLINED_KEY: {"turn": number, "plugins": list(outcome.declined)}}
            status: ProtoJSON = {"state": self.before_turn, "timestamp": self._now()}
            self.status = {**status, "metadata": why}
            self.event("status", {"status": status, "metadata": why})
        elif outcome.kind == "fail":
            self.emit_status(
                "TASK_STATE_FAILED",
                self.agent_message("final", message or text_message("the task failed")),
            )
        elif outcome.kind == "delegate":
            pass  # the answers wait in the mailbox: the next turn takes them
        elif outcome.kind == "reject":
            self.emit_status("TASK_STATE_REJECTED", self.agent_message("final", message))
        elif self.mailbox:
            # Messages arrived during this turn; the agent has not seen them, so the task does
            # not settle: its answer is recorded and the next turn takes them.
            if message:
                self.agent_message(f"answer:{number}", message)
        elif outcome.kind == "ask":
            self.emit_status(
                "TASK_STATE_INPUT_REQUIRED", self.agent_message(f"ask:{number}", message)
            )
        elif outcome.kind == "auth":
            self.emit_status(
                "TASK_STATE_AUTH_REQUIRED", self.agent_message(f"auth:{number}", message)
            )
        else:
            final = self.agent_message("final", message) if message else None
            self.emit_status("TASK_STATE_COMPLETED", final)
            direct = outcome.kind == "reply" and self.may_reply and not outcome.emitted
            if direct and final is not None and not outcome.artifacts:
                self.reply = final

    def delegating(self, outcome: TurnOutcome) -> None:
        """A turn hands messages to other agents: what it emitted, and what it said meanwhile."""
        for kind, body in outcome.emitted:
            self.event(kind, body)
        if outcome.message:
            self.emit_status(
                "TASK_STATE_WORKING",
                self.agent_message(f"delegating:{self.turns}", outcome.message),
            )

    def take_answer(self, index: int, result: DelegationResult) -> None:
        """Another agent's answer, as a message of this task for the agent's next turn."""
        if result.error:
            parts: list[ProtoJSON] = [
                {"text": f"the delegation to {result.target} failed: {result.error}"}
            ]
        else:
            parts = [dict(p) for p in answer_parts(result)]
        message_id = f"{self.task_id}:answer-of:{self.turns}:{index}"
        message: ProtoJSON = {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": parts,
            "taskId": self.task_id,
            "contextId": self.start.context_id,
            "metadata": {
                "harness.delegation": {
                    "agent": result.target,
                    "taskId": result.remote_task_id,
                    "state": result.state,
                }
            },
        }
        sender = f"agent:{result.target}"
        self.ids[message_id] = ""
        self.senders[message_id] = sender
        self.mailbox.append(
            Inbound(
                message=message,
                participant=sender,
                # Taken by the next turn at once (as a local activity when the task allows it).
                wait=True,
                agent_id=self.start.agent_id,
                size=json_size(message),
            )
        )
        self.run_bytes += json_size(message)
        self.accepted += 1


def turn_end(
    request: TurnRequest, outcome: TurnOutcome, now: str
) -> tuple[Archive, TaskRecord] | None:
    """What a turn that ends its task stores, by the task's own rules: the run's archive and the
    task's final record as of ``now``, or None when ``outcome`` does not end the task (or
    ``request`` may not record).

    The task is taken up again from the request (with ``record_at``, it holds the whole run), so
    the workflow, applying the same outcome at the record's time (``TaskState.apply``'s ``at``),
    comes to the same record; if anything reached the task meanwhile, its record differs, and it
    stores its own (``TaskWorkflow``)."""
    entry = request.index or request.entry
    if not request.record_at or entry is None:
        return None
    events = entry.archive.events
    task = TaskState.resumed(
        request.task_id,
        request.context_id,
        request.agent_id,
        status=entry.status,
        participants=entry.archive.participants,
        archived_messages=request.archived,
        archived_events=entry.last_seq - len(events),
        turns=request.number,
        now=now,
    )
    task.history = list(request.messages)
    task.events = list(events)
    task.senders = dict(request.senders)
    task.may_reply = request.may_reply
    task.apply(outcome)
    if not task.ended():
        return None
    task.close()
    return task.archive(), task.final_record()
