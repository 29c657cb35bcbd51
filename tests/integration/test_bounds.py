"""Bounds a task keeps whatever its agent does: an agent that blocks its worker's event loop (so no
attempt heartbeats) ends its task FAILED, saying why, instead of being retried for ever."""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from a2a.client.errors import A2AClientError
from a2a.types import GetTaskRequest, TaskState

from harness_core import Complete, TurnContext
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import send_immediately

pytestmark = pytest.mark.anyio

# Over the 10 s heartbeat timeout of a regular activity.
BLOCK_SECONDS = 12


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
