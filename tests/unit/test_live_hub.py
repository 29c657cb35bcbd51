"""The live fan-out's memory of where a task's turns run (``LiveHub.turn_here``): a stream takes a
running turn's progress from the listing index only for a task whose turn is not, and was not
just, in this process."""

from __future__ import annotations

from harness_core import live
from harness_core.live import LiveHub


def test_a_task_is_here_while_its_turn_publishes_and_after_it_ended() -> None:
    hub = LiveHub()
    assert not hub.turn_here("a", "t1")
    hub.publish("a", "t1", "status", {"status": {"state": "TASK_STATE_WORKING"}})
    assert hub.turn_here("a", "t1")
    hub.end("a", "t1")  # ended here: its durable copy is on the way
    assert hub.turn_here("a", "t1")
    assert not hub.turn_here("a", "t2") and not hub.turn_here("b", "t1")


def test_the_memory_of_ended_turns_is_bounded_oldest_first(monkeypatch) -> None:
    monkeypatch.setattr(live, "RECENT_TURNS", 3)
    hub = LiveHub()
    for n in range(5):
        hub.end("a", f"t{n}")
    hub.end("a", "t2")  # ended again: the newest
    assert [hub.turn_here("a", f"t{n}") for n in range(5)] == [False, False, True, True, True]
    hub.end("a", "t5")
    assert [hub.turn_here("a", f"t{n}") for n in (2, 3, 4, 5)] == [True, False, True, True]
