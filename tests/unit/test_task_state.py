"""The task state machine, without Temporal: its refusals, and its invariants over any sequence of
messages, turns, cancels, expiries and continue-as-new (hypothesis)."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness_core.payloads import (
    TERMINAL_STATES,
    DelegationProgress,
    DelegationResult,
    Inbound,
    TaskEvent,
    TaskStart,
    TurnOutcome,
)
from harness_core.tasks.state import TaskRefused, TaskState, json_size, turn_end

_clock = itertools.count()


def now() -> str:
    return f"2026-12-03T00:00:{next(_clock) % 60:02d}Z"


def inbound(message_id: str, text: str = "hi", who: str | None = "alice", wait: bool = False):
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    return Inbound(
        message=message,
        participant=who,
        wait=wait,
        agent_id="a",
        size=json_size(message),
        digest=f"d-{text}",
    )


def new_task(**start: Any) -> TaskState:
    first = start.pop("first", inbound("m0", wait=True))
    return TaskState(
        TaskStart(task_id="t1", context_id="c1", agent_id="a", first=first, **start), now
    )


def progress(remote_message_id: str) -> DelegationProgress:
    """A status of another agent's task (``b``'s ``r1``) as the stand-in ``s1`` saw it."""
    status = {
        "state": "TASK_STATE_WORKING",
        "message": {"messageId": remote_message_id, "parts": [{"text": "thinking"}]},
    }
    return DelegationProgress(stand_in="s1", target="b", remote_task_id="r1", status=status)


def refusal(task: TaskState, message: Inbound) -> str:
    with pytest.raises(TaskRefused) as refused:
        task.check(message)
    return refused.value.kind


def test_the_first_message_starts_the_task_and_a_turn_takes_it() -> None:
    task = new_task()
    request, taken, local = task.begin_turn()
    assert (taken, local, request.new_ids, request.number) == (1, True, ("m0",), 1)
    assert task.state == "TASK_STATE_WORKING"
    task.apply(TurnOutcome(kind="complete", message=({"text": "done"},)))
    task.end_turn(taken)
    assert task.state == "TASK_STATE_COMPLETED"
    assert task.status["message"]["messageId"] == "t1:final"
    assert [e.seq for e in task.events] == [1, 2]
    assert task.settled()


def test_refusals_say_why_and_only_a_busy_run_is_worth_a_retry() -> None:
    task = new_task(run_messages=2)
    assert refusal(task, attrs.evolve(inbound("x"), agent_id="b")) == "TaskNotFound"
    assert refusal(task, inbound("x", who="mallory")) == "TaskNotFound"
    assert refusal(task, inbound("m0", text="other content")) == "MessageIdReused"
    assert refusal(task, inbound("t1:final")) == "MessageIdReused"
    task.check(inbound("m0"))  # a retry of a message it has changes nothing
    assert not task.accept(inbound("m0"))
    for n in range(1, 4):
        task.check(inbound(f"m{n}"))
        task.accept(inbound(f"m{n}"))
    with pytest.raises(TaskRefused) as busy:
        task.check(inbound("m4"))
    assert busy.value.kind == "TaskBusy" and busy.value.retryable
    task.end("TASK_STATE_FAILED", "no")
    with pytest.raises(TaskRefused) as closed:
        task.check(inbound("m9"))
    assert closed.value.kind == "TaskClosed" and not closed.value.retryable
    assert "task t1 is failed" in closed.value.message


def test_a_message_during_a_turn_waits_for_the_next_one_and_the_answer_is_kept() -> None:
    task = new_task()
    _, taken, _ = task.begin_turn()
    task.accept(inbound("m1", text="also"))
    task.apply(TurnOutcome(kind="complete", message=({"text": "first answer"},)))
    task.end_turn(taken)
    assert task.state == "TASK_STATE_WORKING"  # not settled: m1 is not answered
    assert [m["messageId"] for m in task.history] == ["m0", "t1:answer:1"]
    request, _, _ = task.begin_turn()
    assert request.new_ids == ("m1",)


def test_an_ended_task_refuses_what_is_queued_and_its_sender_is_told() -> None:
    task = new_task()
    _, taken, _ = task.begin_turn()
    task.accept(inbound("m1", text="late"))
    task.apply(TurnOutcome(kind="fail"))
    task.end_turn(taken)
    task.close()
    with pytest.raises(TaskRefused, match="is failed"):
        task.receipt("m1", inbound("m1", text="late"), cursor=0, duplicate=False)
    assert "m1" not in [m["messageId"] for m in task.history]


def test_a_delegation_answer_is_the_next_turns_message_from_the_agent() -> None:
    task = new_task()
    _, taken, _ = task.begin_turn()
    task.delegating(TurnOutcome(kind="delegate", message=({"text": "asking b"},)))
    task.take_answer(
        1,
        DelegationResult(
            target="b", remote_task_id="r1", state="TASK_STATE_COMPLETED", parts=({"text": "42"},)
        ),
    )
    task.apply(TurnOutcome(kind="delegate"))
    task.end_turn(taken)
    request, _, _ = task.begin_turn()
    assert request.new_ids == ("t1:answer-of:1:1",)
    assert ("t1:answer-of:1:1", "agent:b") in request.senders


def test_the_first_delivery_of_the_starting_message_is_new_and_a_retry_is_not() -> None:
    """The start takes the first message; the update that came with the start is its delivery
    (the sender learns it is new), a retry of it is a duplicate, and so is a retry of a later one."""
    task = new_task()
    assert task.take(inbound("m0"))
    assert not task.take(inbound("m0"))
    assert task.take(inbound("m1")) and not task.take(inbound("m1"))
    assert task.accepted == 2


def test_continue_as_new_carries_state_not_content() -> None:
    task = new_task()
    _, taken, _ = task.begin_turn()
    task.apply(TurnOutcome(kind="ask", message=({"text": "which?"},)))
    task.end_turn(taken)
    carry = task.carry()
    assert carry.archived_messages == 2 and carry.archived_events == task.last_seq()
    nxt = TaskState(attrs.evolve(task.start, first=None, carry=carry), now)
    assert nxt.state == "TASK_STATE_INPUT_REQUIRED" and nxt.history == []
    assert refusal(nxt, inbound("m0", text="other")) == "MessageIdReused"


def test_a_turn_given_the_whole_run_stores_the_end_the_workflow_would_store() -> None:
    """A local first turn is given the whole run: the end it stores (as of its own time) is the
    record and archive the task comes to, applying the outcome at that time; a later turn, once
    the index has the run's start, is not given it, nor is a turn a sender does not wait for."""
    task = new_task(record_in_turn=True)
    request, _, local = task.begin_turn()
    assert local and request.record_at
    outcome = TurnOutcome(kind="complete", message=({"text": "done"},))
    ending = turn_end(request, outcome, "2026-12-03T01:00:00Z")
    assert ending is not None
    archive, record = ending
    task.apply(outcome, at=record.updated_at)
    assert task.ended() and task.final_record() == record and task.archive() == archive
    assert record.status["timestamp"] == "2026-12-03T01:00:00Z" and record.messages == 2

    asked = new_task(record_in_turn=True)
    request, taken, _ = asked.begin_turn()
    assert turn_end(request, TurnOutcome(kind="ask", message=({"text": "?"},)), "t") is None
    asked.apply(TurnOutcome(kind="ask", message=({"text": "?"},)))
    asked.end_turn(taken)
    asked.checkpoint()  # the task rests: the index learns the run so far
    asked.accept(inbound("m1", wait=True))
    assert asked.begin_turn()[0].record_at == ""
    quiet = new_task(record_in_turn=True, first=inbound("m0", wait=False))
    assert quiet.begin_turn()[0].record_at == ""
    assert new_task().begin_turn()[0].record_at == ""  # a run started before the rule


# -- any sequence -------------------------------------------------------------------------------------

_KINDS = ["complete", "ask", "auth", "reject", "fail", "reply", "delegate", "declined"]
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 6), st.sampled_from(["alice", "bob", None])),
        st.tuples(st.just("turn"), st.sampled_from(_KINDS), st.integers(0, 2)),
        st.tuples(st.just("cancel"), st.just(0), st.just(0)),
        st.tuples(st.just("expire"), st.just(0), st.just(0)),
        st.tuples(st.just("continue"), st.just(0), st.just(0)),
        st.tuples(st.just("relay"), st.lists(st.integers(0, 2), max_size=4), st.just(0)),
    ),
    max_size=40,
)


class Driver:
    """What ``TaskWorkflow`` does with the state, without Temporal; remembers what went where."""

    def __init__(self) -> None:
        self.task = new_task(run_messages=3, idle_seconds=60, record_in_turn=True)
        self.archived_messages: list[dict[str, Any]] = []
        self.archived_events: list[TaskEvent] = []
        self.accepted: set[str] = {"m0"}
        self.states: list[str] = []
        self.serial = 0
        self.relays: list[int] = []  # remote messages relayed during the next delegation
        self.stored_ends = 0  # turns that stored their task's end
        self.skipped_stores = 0  # of those, the ends the workflow would not store again

    def send(self, n: int, who: str | None) -> None:
        self.serial += 1
        # Some senders wait for the answer: a turn that takes only theirs is local.
        message = inbound(f"s{n}", text=f"text-{n}", who=who, wait=n % 2 == 0)
        try:
            self.task.check(message)
        except TaskRefused:
            return
        if self.task.accept(message):
            self.accepted.add(f"s{n}")

    def turn(self, kind: str, arrivals: int) -> None:
        task = self.task
        if not task.mailbox or task.closed:
            return
        request, taken, _ = task.begin_turn()
        for extra in range(arrivals):
            self.send(100 + self.serial * 10 + extra, "alice")
        if kind == "delegate":
            task.delegating(TurnOutcome(kind="delegate", message=({"text": "asking"},)))
            task.relay([progress(f"r{n}") for n in self.relays])  # by push, stream, reads
            task.relay([progress(f"r{n}") for n in self.relays])  # and again at the end
            self.relays = []
            task.take_answer(1, DelegationResult(target="b", remote_task_id="r", state="x"))
            self.accepted.add(f"t1:answer-of:{task.turns}:1")
        before = task.before_turn
        gated = ("gate",) if kind == "declined" else ()
        outcome = TurnOutcome(kind=kind, message=({"text": f"answer {kind}"},), declined=gated)  # type: ignore[arg-type]
        # A turn given the whole run stores the task's end itself, as of its own time.
        ending = turn_end(request, outcome, "2026-12-03T01:00:00Z") if request.record_at else None
        task.apply(outcome, at="2026-12-03T01:00:00Z" if ending is not None else None)
        if ending is not None:
            self.check_turn_end(*ending, reached=arrivals > 0)
        if request.record_at and not task.ended():
            task.reopen = True  # as the workflow does: the turn may have stored an end
        task.end_turn(taken)
        if kind == "declined":  # a declined turn leaves the task as it was, and says so
            assert task.state == before
            assert task.status["metadata"]["harness.declined"]["plugins"] == ["gate"]
            assert task.settled() or task.busy()
        if task.ended():
            task.close()

    def check_turn_end(self, archive: Any, record: Any, *, reached: bool) -> None:
        """The end a turn stored is the task's own, unless something reached the task during
        the turn; and where the two records agree (the workflow then stores nothing), so do the
        archives, to the message."""
        task = self.task
        self.stored_ends += 1
        if not reached:
            assert task.ended()
        if not task.ended() or task.final_record() != record:
            return  # the workflow takes the task back, or stores its own end
        self.skipped_stores += 1
        mine = task.archive()
        assert attrs.evolve(archive, senders=()) == attrs.evolve(mine, senders=())
        ids = {str(m["messageId"]) for m in mine.messages}
        assert dict(archive.senders) == {k: v for k, v in mine.senders if k in ids}

    def cancel(self) -> None:
        self.task.cancel()
        if self.task.cancel_requested and not self.task.closed:
            self.task.end("TASK_STATE_CANCELED", "canceled")
            self.task.close()

    def expire(self) -> None:
        task = self.task
        if task.idle_seconds() is not None and not task.mailbox and not task.closed:
            task.expire()
            task.close()

    def continue_as_new(self) -> None:
        task = self.task
        if task.closed or task.mailbox or task.in_turn:
            return
        self.archived_messages.extend(task.history)
        self.archived_events.extend(task.events)
        self.task = TaskState(attrs.evolve(task.start, first=None, carry=task.carry()), now)

    def relay(self, remote: list[int]) -> None:
        self.task.relay([progress("late")])  # outside a turn: changes nothing
        self.relays = remote

    def check_invariants(self) -> None:
        task = self.task
        events = [*self.archived_events, *task.events]
        assert [e.seq for e in events] == list(range(1, task.last_seq() + 1))
        states = [e.body["status"]["state"] for e in events if e.kind == "status"]
        ended = [i for i, s in enumerate(states) if s in TERMINAL_STATES]
        if ended:  # one terminal state, and nothing after it
            assert ended == [len(states) - 1]
        messages = [*self.archived_messages, *task.history]
        ids = [str(m["messageId"]) for m in messages]
        assert len(ids) == len(set(ids)), "a message id twice"
        relayed = [
            e.body["status"]["message"]["messageId"]
            for e in events
            if e.kind == "status"
            and "harness.delegation" in e.body["status"].get("message", {}).get("metadata", {})
        ]
        assert len(relayed) == len(set(relayed)), "another agent's progress shown twice"
        pending = {str(i.message["messageId"]) for i in task.mailbox}
        for message_id in self.accepted:  # nothing accepted is dropped unanswered
            assert message_id in ids or message_id in pending or message_id in task.refused
        assert task.archived_messages == len(self.archived_messages)


@settings(max_examples=300, deadline=None)
@given(st.tuples(st.sampled_from(_KINDS), st.integers(0, 2)), _steps)
@example(("ask", 0), [("send", 1, "alice"), ("relay", [1, 0, 1], 0), ("turn", "delegate", 0)])
@example(("complete", 0), [])  # the first turn stores the task's end
@example(("ask", 1), [("continue", 0, 0), ("send", 2, "bob"), ("turn", "fail", 1)])
def test_any_sequence_keeps_the_invariants(
    first: tuple[str, int], steps: list[tuple[str, Any, Any]]
) -> None:
    driver = Driver()
    driver.turn(*first)
    driver.check_invariants()
    for op, a, b in steps:
        if op == "send":
            driver.send(a, b)
        elif op == "turn":
            driver.turn(a, b)
        elif op == "cancel":
            driver.cancel()
        elif op == "expire":
            driver.expire()
        elif op == "continue":
            driver.continue_as_new()
        else:
            driver.relay(a)
        driver.check_invariants()


def test_a_declined_turn_leaves_the_task_as_it_was_and_says_why() -> None:
    task = new_task(idle_seconds=60)
    _, taken, _ = task.begin_turn()
    assert task.state == "TASK_STATE_WORKING"
    task.apply(TurnOutcome(kind="declined", declined=("notes",)))
    task.end_turn(taken)
    assert task.state == "TASK_STATE_SUBMITTED"
    why = {"harness.declined": {"turn": 1, "plugins": ["notes"]}}
    assert task.status["metadata"] == why
    # No message, no reply; the status event carries the reason as the event's metadata.
    assert [m["messageId"] for m in task.history] == ["m0"]
    last = task.events[-1].body
    assert last["status"]["state"] == "TASK_STATE_SUBMITTED" and last["metadata"] == why
    assert "metadata" not in last["status"]
    # A blocking sender has its answer; the task waits for input and may expire.
    assert task.settled() and task.answered(1)
    assert task.idle_seconds() == 60
    # The next message's turn answers, and the reason goes with the state it replaced.
    task.accept(inbound("m1", text="again"))
    _, taken, _ = task.begin_turn()
    task.apply(TurnOutcome(kind="ask", message=({"text": "and?"},)))
    task.end_turn(taken)
    assert task.state == "TASK_STATE_INPUT_REQUIRED" and "metadata" not in task.status
    # Declined while waiting for input: it still waits for input.
    task.accept(inbound("m2", text="hush"))
    _, taken, _ = task.begin_turn()
    task.apply(TurnOutcome(kind="declined", declined=("notes",)))
    task.end_turn(taken)
    assert task.state == "TASK_STATE_INPUT_REQUIRED"
    assert task.status["metadata"]["harness.declined"]["turn"] == 3


def test_a_turn_after_a_declined_one_in_working_says_working_again() -> None:
    task = new_task()
    _, taken, _ = task.begin_turn()
    task.accept(inbound("m1", text="during"))  # arrives during the turn: the task stays busy
    task.apply(TurnOutcome(kind="declined", declined=("notes",)))
    task.end_turn(taken)
    assert task.state == "TASK_STATE_SUBMITTED"
    _, taken, _ = task.begin_turn()
    assert task.state == "TASK_STATE_WORKING" and "metadata" not in task.status
    task.apply(TurnOutcome(kind="declined", declined=("notes",)))
    task.end_turn(taken)
    task.accept(inbound("m2", text="again"))
    _, taken, _ = task.begin_turn()
    # The turn began in WORKING (declined there); it still says so, without the old reason.
    assert task.state == "TASK_STATE_WORKING" and "metadata" not in task.status


def test_another_agents_progress_is_shown_once_however_often_it_is_relayed() -> None:
    """A stand-in may learn of one status of the other agent's task several ways (its push, its
    stream, a read of the task that shows the running turn's progress from the listing index, each
    with its own timestamp): the delegating task shows it once."""
    task = new_task()
    task.begin_turn()
    task.delegating(TurnOutcome(kind="delegate", message=({"text": "asking b"},)))
    before = task.last_seq()
    first = progress("r-msg-1")
    again = attrs.evolve(first, status={**first.status, "timestamp": "2026-12-04T00:00:01Z"})
    task.relay([first])
    task.relay([again, progress("r-msg-2")])
    task.relay([first])
    shown = [e.body["status"]["message"]["messageId"] for e in task.events[before:]]
    assert shown == ["s1:r-msg-1", "s1:r-msg-2"]
    # Histories recorded before the rule replay as they were recorded.
    task.relay([first], once=False)
    assert task.last_seq() == before + 3


def test_a_turns_delegations_act_for_the_participant_who_asked() -> None:
    """The asker is the sender of the turn's latest message that names a participant; the answers
    of other agents (``agent:<id>``) do not change it."""
    task = new_task(first=inbound("m0", who="alice", wait=True))
    _, taken, _ = task.begin_turn()
    assert task.asker == "alice"
    task.delegating(TurnOutcome(kind="delegate", message=({"text": "asking b"},)))
    task.take_answer(
        1, DelegationResult(target="b", remote_task_id="r1", state="TASK_STATE_COMPLETED")
    )
    task.apply(TurnOutcome(kind="delegate"))
    task.end_turn(taken)
    task.begin_turn()  # the answer's turn: still alice's
    assert task.asker == "alice"
    # A second participant's message (the state machine would take it if the task were shared).
    task.mailbox.append(inbound("m1", who="bob"))
    task.begin_turn()
    assert task.asker == "bob"
