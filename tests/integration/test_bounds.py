"""Bounds a task keeps whatever its agent does: an agent that blocks its worker's event loop (so no
attempt heartbeats) ends its task FAILED, saying why, instead of being retried for ever; turns that
take long stop holding workflow tasks."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest
from a2a.client.errors import A2AClientError
from a2a.types import GetTaskRequest, TaskState
from temporalio.api.enums.v1 import EventType

from harness_core import Ask, Complete, TurnContext
from harness_core.tasks.state import LONG_TURN
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import send_blocking, send_immediately

pytestmark = pytest.mark.anyio

# Over the 10 s heartbeat timeout of a regular activity.
BLOCK_SECONDS = 11


class LoopBlocker:
    """A turn that blocks the event loop it runs on (a synchronous call in async code)."""

    def __init__(self) -> None:
        self.turns = 0
        self._lock = threading.Lock()

    async def turn(self, ctx: TurnContext) -> Complete:
        with self._lock:
            self.turns += 1
        time.sleep(BLOCK_SECONDS)  # noqa: ASYNC251 - the bug under test: no await, no heartbeat
        return Complete("too late")


@pytest.mark.timeout(150)
async def test_an_agent_that_blocks_its_event_loop_ends_failed_saying_why(make_harness):
    blocker = LoopBlocker()
    harness = make_harness(blocker, model={"local_activity": False})
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_immediately(client, user_message("hello"))
        with anyio.fail_after(120):
            while True:
                try:
                    read = await client.get_task(GetTaskRequest(id=task.id))
                except A2AClientError:
                    # Under asyncio the blocked loop is the server's too: a read may be cut off.
                    await anyio.sleep(0.5)
                    continue
                if read.status.state == TaskState.TASK_STATE_FAILED:
                    break
                await anyio.sleep(0.5)
    text = read.status.message.parts[0].text
    assert "stopped heartbeating 3 times in a row" in text
    assert "must not block its event loop" in text
    assert blocker.turns == 3


class SlowAsker:
    """Turns that take LONG_TURN seconds and more (an agent thinking): the first asks."""

    def __init__(self) -> None:
        self.turns = 0

    async def turn(self, ctx: TurnContext) -> Complete | Ask:
        self.turns += 1
        await anyio.sleep(LONG_TURN + 0.5)
        return Ask("which one?") if self.turns == 1 else Complete("done")


async def turn_kinds(harness: Any, task_id: str) -> list[str]:
    """How each turn of the task ran: "local" (a marker) or "regular" (a scheduled activity)."""
    connection = harness.tasks.connection

    async def read() -> list[str]:
        history = await connection.client.get_workflow_handle(task_id).fetch_history()
        kinds: list[str] = []
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                name = event.activity_task_scheduled_event_attributes.activity_type.name
                if name == "run_turn":
                    kinds.append("regular")
            elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                details = event.marker_recorded_event_attributes.details
                datas = [p.data for v in details.values() for p in v.payloads]
                if any(b"run_turn" in d for d in datas):
                    kinds.append("local")
        return kinds

    return await connection.bridge.call(read)


async def test_after_a_long_turn_turns_stop_holding_workflow_tasks(make_harness, caplog):
    """Given an agent whose turns take longer than LONG_TURN, when its first task's first turn
    ran as a local activity (every sender waits), then that task's next turn and the agent's next
    task run as regular activities, so Temporal's "workflow task duration exceeded" is logged at
    most for the first turn."""
    harness = make_harness(SlowAsker())
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        first = await send_blocking(client, user_message("pick"))
        done = await send_blocking(client, user_message("red", task_id=first.id))
        second = await send_blocking(client, user_message("again"))
        kinds = [await turn_kinds(harness, t) for t in (first.id, second.id)]
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert kinds == [["local", "regular"], ["regular"]]
    exceeded = [r for r in caplog.records if "duration exceeded" in r.getMessage()]
    assert len(exceeded) <= 1
