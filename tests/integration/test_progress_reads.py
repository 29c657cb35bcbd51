"""Progress while a turn runs is readable by everyone, not only by live streams: GetTask and
ListTasks show a turn's latest progress message at once (from the listing index), and the LLM agent
reports each tool call it makes as progress."""

from __future__ import annotations

import anyio
import pytest
from a2a.types import (
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)

from harness_core import Ask, Complete, Gate, RouteOptions
from harness_core.agents.turn import TurnContext, TurnResult
from tests.conftest import a2a_client, serving, user_message
from tests.fakes.model_servers import serve_fake_openai, text_reply, tool_call_reply
from tests.integration.test_a2a_methods import collect, send_immediately

pytestmark = pytest.mark.anyio


async def test_get_task_shows_a_running_turns_latest_progress(make_harness):
    gate = Gate()

    async def agent(ctx: TurnContext) -> TurnResult:
        await ctx.progress("step:1", "reading the catalogue")
        await gate.pass_through()
        return Complete("done")

    harness = make_harness(options={"agent": agent})
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_immediately(client, user_message("find it"))
        with anyio.fail_after(20):
            while True:
                seen = await client.get_task(GetTaskRequest(id=task.id))
                if seen.status.message.parts:
                    break
                await anyio.sleep(0.05)
        listed = await client.list_tasks(ListTasksRequest())
        gate.release()
        with anyio.fail_after(20):
            while (
                done := await client.get_task(GetTaskRequest(id=task.id))
            ).status.state != TaskState.TASK_STATE_COMPLETED:
                await anyio.sleep(0.05)
    assert seen.status.state == TaskState.TASK_STATE_WORKING
    assert seen.status.message.parts[0].text == "reading the catalogue"
    [row] = [t for t in listed.tasks if t.id == task.id]
    assert row.status.message.parts[0].text == "reading the catalogue"
    assert done.status.message.parts[0].text == "done"


async def test_the_llm_agent_reports_each_tool_call_as_progress(make_harness):
    with serve_fake_openai(
        [tool_call_reply("lookup_order", {"order_id": 42}), text_reply("Order 42 shipped.")]
    ) as server:
        model = {
            "kind": "openai",
            "name": "m",
            "base_url": server.base_url,
            "tools": ["tests.integration.agent_tools:lookup_order"],
        }
        harness = make_harness(model=model)
        async with serving(harness) as url, a2a_client(url) as client:
            events = await collect(
                client.send_message(SendMessageRequest(message=user_message("where is 42?")))
            )
    progress = [
        p.text
        for e in events
        if e.HasField("status_update")
        for p in e.status_update.status.message.parts
    ]
    assert "calling lookup_order" in progress
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_stream_that_does_not_see_the_turn_live_shows_its_progress_once(make_harness):
    """Given streams that follow the durable log only (as in a process where the turn does not
    run: RouteOptions(live=False)), a turn's progress still reaches the client while the turn
    runs (in the task it got first, or from the listing index), and the stream's updates show it
    once."""
    gate = Gate()

    async def agent(ctx: TurnContext) -> TurnResult:
        await ctx.progress("step:1", "reading the catalogue")
        await gate.pass_through()
        return Complete("done")

    harness = make_harness(options={"agent": agent, "routes": RouteOptions(live=False)})
    texts: list[str] = []
    async with serving(harness) as url, a2a_client(url) as client:
        stream = client.send_message(SendMessageRequest(message=user_message("find it")))
        with anyio.fail_after(20):
            async for event in stream:
                if event.HasField("task"):
                    if event.task.status.message.parts:
                        gate.release()  # only now: the progress came while the turn ran
                    continue
                texts.extend(p.text for p in event.status_update.status.message.parts)
                if "reading the catalogue" in texts:
                    gate.release()
                if event.status_update.status.state == TaskState.TASK_STATE_COMPLETED:
                    break
    assert texts.count("reading the catalogue") == 1
    assert texts[-1] == "done"


@pytest.mark.parametrize("how", ["subscribe", "follow-up"])
async def test_a_subscription_or_a_follow_up_shows_running_progress_once(make_harness, how):
    """Given a turn whose progress the listing index has, when a client subscribes to the task
    (whose first task shows the progress) or streams a follow-up message into it, then the
    stream's updates show it once: its durable copy when the turn ends, not the index's
    again (the task was a state; the updates are the events, in their order)."""
    gate = Gate()

    async def agent(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            await ctx.progress("step:1", "reading the catalogue")
            await gate.pass_through()
            if how == "follow-up":
                return Ask("which shop?")  # the follow-up message is the answer
        return Complete(f"done {ctx.number}")

    harness = make_harness(options={"agent": agent, "routes": RouteOptions(live=False)})
    async with (
        serving(harness) as url,
        a2a_client(url, streaming=False) as poller,
        a2a_client(url) as client,
    ):
        task = await send_immediately(poller, user_message("find it"))
        with anyio.fail_after(20):
            while not (await poller.get_task(GetTaskRequest(id=task.id))).status.message.parts:
                await anyio.sleep(0.05)
        if how == "subscribe":
            stream = client.subscribe(SubscribeToTaskRequest(id=task.id))
        else:
            follow_up = user_message("and the price?", task_id=task.id)
            stream = client.send_message(SendMessageRequest(message=follow_up))
        first = ""
        texts: list[str] = []
        with anyio.fail_after(30):
            async for event in stream:  # pyright: ignore[reportUnknownVariableType]
                if event.HasField("task"):
                    first = "".join(p.text for p in event.task.status.message.parts)
                    gate.release()
                    continue
                status = event.status_update.status
                texts.extend(p.text for p in status.message.parts)
                if status.state == TaskState.TASK_STATE_COMPLETED:
                    break
    # A subscription's task is the task as it is; a message's, the task as the message found it.
    assert first == ("reading the catalogue" if how == "subscribe" else "")
    assert texts.count("reading the catalogue") == 1
    assert texts[-1] == ("done 1" if how == "subscribe" else "done 2")
