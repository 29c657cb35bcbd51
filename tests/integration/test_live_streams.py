"""Live streaming: what a turn emits reaches an open stream while the turn still runs, and its durable
copy is neither lost nor shown twice (both backends)."""

from __future__ import annotations

import threading

import anyio
import pytest
from a2a.types import SendMessageRequest, StreamResponse, SubscribeToTaskRequest, TaskState

from harness_core import Complete, TurnContext
from harness_core.agents.turn import TurnResult
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import collect

pytestmark = pytest.mark.anyio


def artifact_text(events: list[StreamResponse], artifact_id: str) -> str:
    """The artifact as a client builds it from the stream: a chunk without append replaces."""
    text = ""
    for event in events:
        if not event.HasField("artifact_update"):
            continue
        update = event.artifact_update
        if update.artifact.artifact_id != artifact_id:
            continue
        chunk = "".join(p.text for p in update.artifact.parts)
        text = text + chunk if update.append else chunk
    return text


async def test_progress_and_deltas_reach_the_stream_while_the_turn_runs(make_harness):
    release = threading.Event()

    async def agent(ctx: TurnContext) -> TurnResult:
        await ctx.progress("step:1", "looking it up")
        await ctx.delta("Order 42 ")
        await ctx.delta("shipped.")
        while not release.is_set():
            await anyio.sleep(0.01)
        return Complete("Order 42 shipped.")

    harness = make_harness(agent)
    seen: list[StreamResponse] = []
    live: list[StreamResponse] = []
    async with serving(harness) as url, a2a_client(url) as client:
        request = SendMessageRequest(message=user_message("where is 42?"))
        async with anyio.create_task_group() as tg:

            async def follow() -> None:
                async for event in client.send_message(request):
                    seen.append(event)

            tg.start_soon(follow)
            with anyio.fail_after(20):
                # The turn is held: only the live path can have brought these.
                while artifact_text(seen, f"{seen[0].task.id}:response:1" if seen else "") != (
                    "Order 42 shipped."
                ):
                    await anyio.sleep(0.01)
            live.extend(seen)
            release.set()
        task_id = seen[0].task.id
        async with a2a_client(url, headers={"Last-Event-ID": "0"}) as again:
            replay = await collect(again.subscribe(SubscribeToTaskRequest(id=task_id)))
    progress = f"{task_id}:step:1"
    assert any(
        e.HasField("status_update") and e.status_update.status.message.message_id == progress
        for e in live
    )
    # Each progress message once, the answer once, and the stream ends completed.
    ids = [
        e.status_update.status.message.message_id
        for e in seen
        if e.HasField("status_update") and e.status_update.status.message.message_id
    ]
    assert ids == [progress, f"{task_id}:final"]
    assert artifact_text(seen, f"{task_id}:response:1") == "Order 42 shipped."
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    # A late subscriber gets the durable copy: the same, no gap.
    assert artifact_text(replay, f"{task_id}:response:1") == "Order 42 shipped."
    assert replay[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
