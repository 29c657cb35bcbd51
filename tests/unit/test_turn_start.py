"""A task's first turn given the whole run, on a real store: a quick one that ends the task writes
the store once (its start and end together), a slow one shows the task WORKING after 50 ms, and
one that does not end the task writes its start at its end."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from temporalio.testing import ActivityEnvironment

from harness_core import Ask, Complete, TurnContext
from harness_core.activities import AgentActivities
from harness_core.payloads import Inbound, TaskStart, TurnRequest
from harness_core.store import TaskStore
from harness_core.tasks.state import TaskState, json_size
from harness_core.turn_history import LateStart

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # activities run on Temporal's asyncio loop


def now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def first_turn(task_id: str) -> TurnRequest:
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    first = Inbound(
        message=message, participant="alice", wait=True, agent_id="a", size=json_size(message)
    )
    start = TaskStart(
        task_id=task_id, context_id="c", agent_id="a", first=first, record_in_turn=True
    )
    request, _, local = TaskState(start, now).begin_turn()
    assert local and request.record_at
    return request


class Writes:
    """The store's writes a turn makes, counted on the real store."""

    def __init__(self, store: TaskStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for name in ("checkpoint", "store_final", "note_progress"):
            real = getattr(store, name)

            def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
                self.calls.append(_name)
                return _real(*args, **kwargs)

            monkeypatch.setattr(store, name, counted)


async def test_a_quick_turn_that_ends_its_task_writes_the_store_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Quick:
        async def turn(self, ctx: TurnContext) -> Complete:
            return Complete("done")

    store = TaskStore(tmp_path / "a.sqlite3")
    writes = Writes(store, monkeypatch)
    try:
        outcome = await ActivityEnvironment().run(
            AgentActivities("a", Quick(), store).run_turn, first_turn("t1")
        )
        row = store.index_row("t1")
        messages = store.messages("t1", 0, 2)
        events = store.events("t1", 0)
    finally:
        store.close()
    assert writes.calls == ["store_final"]
    assert outcome.recorded is not None and outcome.recorded.state == "TASK_STATE_COMPLETED"
    assert row is not None and row.closed and row.status["state"] == "TASK_STATE_COMPLETED"
    assert [m["parts"][0]["text"] for m in messages] == ["hi", "done"]
    assert [e.seq for e in events] == [1, 2]  # WORKING, then COMPLETED


async def test_a_slow_turn_shows_its_task_working_and_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TaskStore(tmp_path / "a.sqlite3")
    seen: list[str] = []

    class Slow:
        async def turn(self, ctx: TurnContext) -> Complete:
            began = time.monotonic()
            while time.monotonic() - began < 2.0:
                row = await anyio.to_thread.run_sync(store.index_row, "t2")
                if row is not None:
                    seen.append(str(row.status["state"]))
                    break
                await anyio.sleep(0.01)
            await ctx.progress("step:1", "thinking")
            return Complete("done")

    writes = Writes(store, monkeypatch)
    try:
        outcome = await ActivityEnvironment().run(
            AgentActivities("a", Slow(), store).run_turn, first_turn("t2")
        )
    finally:
        store.close()
    assert seen == ["TASK_STATE_WORKING"]
    # The start once (at 50 ms; the progress note waits for it), the note, then the end.
    assert writes.calls == ["checkpoint", "note_progress", "store_final"]
    assert outcome.recorded is not None


async def test_a_quick_turn_that_asks_writes_its_start_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Asks:
        async def turn(self, ctx: TurnContext) -> Ask:
            return Ask("which one?")

    store = TaskStore(tmp_path / "a.sqlite3")
    writes = Writes(store, monkeypatch)
    try:
        outcome = await ActivityEnvironment().run(
            AgentActivities("a", Asks(), store).run_turn, first_turn("t3")
        )
        row = store.index_row("t3")
    finally:
        store.close()
    assert writes.calls == ["checkpoint"]
    assert outcome.recorded is None and outcome.kind == "ask"
    # The workflow writes the answer when the task rests; the start is there already.
    assert row is not None and not row.closed and row.status["state"] == "TASK_STATE_WORKING"


async def test_a_late_start_canceled_before_its_thread_ran_is_still_written(tmp_path: Path) -> None:
    """The watcher that writes the start can be canceled (the turn ended) while the write waits
    for its thread; the write goes on, since a later caller takes it as done."""
    store = TaskStore(tmp_path / "a.sqlite3")
    try:
        late = LateStart(AgentActivities("a", None, store), first_turn("t4"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(late.write)
            await anyio.lowlevel.checkpoint()  # the write has begun; its thread has not run yet
            tg.cancel_scope.cancel()
        await late.write()  # the end of the turn: the start is taken as written
        row = store.index_row("t4")
    finally:
        store.close()
    assert row is not None and row.status["state"] == "TASK_STATE_WORKING"
