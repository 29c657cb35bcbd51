"""A turn that ends its task stores the task's end itself (``TurnRequest.record_at``): the sender hears
the answer one local activity sooner, readers find exactly what the workflow's own write would
have left, and a task that a message reached during such a turn is taken back from its stored end."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from a2a.types import GetTaskRequest, ListTasksRequest, TaskState
from temporalio.api.enums.v1 import EventType

from harness_core import Ask, Complete, TurnContext
from harness_core.tasks.state import INLINE_HISTORY
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import send_blocking, send_immediately, wait_for_state

pytestmark = pytest.mark.anyio


async def local_activities(harness: Any, task_id: str) -> list[str]:
    """The names of the local activities the task's workflow ran, in order (its markers)."""
    connection = harness.tasks.connection
    names = ("run_turn", "store_record", "checkpoint", "archive")

    async def read() -> list[str]:
        history = await connection.client.get_workflow_handle(task_id).fetch_history()
        found: list[str] = []
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                details = event.marker_recorded_event_attributes.details
                data = b"".join(p.data for v in details.values() for p in v.payloads)
                found.extend(n for n in names if f'"{n}"'.encode() in data)
        return found

    return await connection.bridge.call(read)


class Echo:
    async def turn(self, ctx: TurnContext) -> Complete:
        return Complete(f"heard {len(ctx.history[-1].text)} characters")


class AskThenComplete:
    async def turn(self, ctx: TurnContext) -> Complete | Ask:
        return Ask("which one?") if ctx.number == 1 else Complete(f"took {ctx.history[-1].text}")


async def test_a_turn_that_ends_its_task_stores_the_end_and_readers_find_it_whole(make_harness):
    """Given a task whose first turn completes it (a short message, and one over the size a turn
    carries inline), the workflow runs one local activity, the turn, and GetTask and ListTasks
    read the task whole and COMPLETED; a task that ends on a later turn stores its end as
    before."""
    harness = make_harness(Echo())
    long_text = "x" * (2 * INLINE_HISTORY)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        short = await send_blocking(client, user_message("hi"))
        long = await send_blocking(client, user_message(long_text))
        reads = [await client.get_task(GetTaskRequest(id=t.id)) for t in (short, long)]
        listed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
        kinds = [await local_activities(harness, t.id) for t in (short, long)]
    assert kinds == [["run_turn"], ["run_turn"]]
    for sent, text, read in zip((short, long), ("hi", long_text), reads, strict=True):
        assert read.status.state == TaskState.TASK_STATE_COMPLETED
        assert read.status.timestamp == sent.status.timestamp
        assert [m.parts[0].text for m in read.history] == [
            text,
            f"heard {len(text)} characters",
        ]
        assert read.status.message.message_id == f"{read.id}:final"
    assert {t.id for t in listed.tasks} >= {short.id, long.id}

    harness = make_harness(AskThenComplete())
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        first = await send_blocking(client, user_message("pick"))
        done = await send_blocking(client, user_message("red", task_id=first.id))
        read = await client.get_task(GetTaskRequest(id=first.id))
        kinds = await local_activities(harness, first.id)
    assert done.status.state == read.status.state == TaskState.TASK_STATE_COMPLETED
    assert [m.parts[0].text for m in read.history] == ["pick", "which one?", "red", "took red"]
    # The second turn does not hold the whole run (the index has the first): the workflow stores.
    assert kinds[-2:] == ["run_turn", "store_record"]


class SlowThenHeld:
    """A first turn long enough for its workflow task to heartbeat (a message gets in meanwhile),
    then a turn that waits until the test lets it go."""

    def __init__(self) -> None:
        self.release = threading.Event()

    async def turn(self, ctx: TurnContext) -> Complete:
        if ctx.number == 1:
            await anyio.sleep(9.5)
            return Complete("first answer")
        while not self.release.is_set():
            await anyio.sleep(0.05)
        return Complete(f"then {ctx.history[-1].text}")


@pytest.mark.timeout(120)
async def test_a_task_a_message_reached_during_a_turn_that_stored_its_end_is_taken_back(
    make_harness, monkeypatch
):
    """Given a turn that stores its task's end although its workflow task heartbeat (a store
    that took long to write: here the age check is lifted) and a second message that reached
    the task meanwhile, the task is not left COMPLETED: readers see it WORKING on the second
    message, and it completes after it, whole."""
    monkeypatch.setattr("harness_core.activities.RECORD_WITHIN", 3600.0)
    agent = SlowThenHeld()
    harness = make_harness(agent)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        context_id = "ctx-reopen"
        async with anyio.create_task_group() as tg:
            first_message = user_message("one")
            first_message.context_id = context_id
            tg.start_soon(send_blocking, client, first_message)
            with anyio.fail_after(30):
                while not (
                    listed := await client.list_tasks(ListTasksRequest(context_id=context_id))
                ).tasks:
                    await anyio.sleep(0.1)
            task_id = listed.tasks[0].id
            await send_immediately(client, user_message("two", task_id=task_id))
            # The first turn ends (its end stored); the second one takes "two", and is held.
            with anyio.fail_after(60):
                while (
                    len((during := await client.get_task(GetTaskRequest(id=task_id))).history) < 3
                ):
                    await anyio.sleep(0.1)
            assert during.status.state == TaskState.TASK_STATE_WORKING
            assert [m.parts[0].text for m in during.history] == ["one", "first answer", "two"]
            agent.release.set()
            done = await wait_for_state(client, task_id, TaskState.TASK_STATE_COMPLETED)
            texts = [m.parts[0].text for m in done.history]
            assert texts == ["one", "first answer", "two", "then two"]
