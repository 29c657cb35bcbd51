"""Records the histories that ``test_replay.py`` replays: real runs of each kind of task on the real dev
server. Run it when the workflow changes on purpose (and add a ``workflow.patched`` branch for what
runs in production): ``HARNESS_RECORD_HISTORIES=1 python -m pytest tests/replay/test_record.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from a2a.types import CancelTaskRequest, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict
from temporalio.client import Client

from harness_core import (
    Ask,
    Complete,
    DataPart,
    Delegate,
    Delegation,
    Harness,
    Reply,
    RouteOptions,
    TurnContext,
)
from harness_core.agents.turn import Artifact, TurnResult
from harness_core.store import content_digest
from harness_core.tasks.service import derive_task_id
from tests.conftest import a2a_client, serving, user_message
from tests.fakes.model_servers import serve_fake_openai, text_reply, tool_call_reply
from tests.integration.test_a2a_methods import (
    HELD,
    collect,
    send_blocking,
    send_immediately,
    wait_for_state,
)

HISTORIES = Path(__file__).parent / "histories"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not os.environ.get("HARNESS_RECORD_HISTORIES"),
        reason="records histories only when HARNESS_RECORD_HISTORIES=1",
    ),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def save(harness: Harness, task_id: str, scenario: str) -> None:
    client: Client = harness.tasks.connection.client
    runs = [w async for w in client.list_workflows(f"WorkflowId = '{task_id}'")]
    runs.sort(key=lambda w: w.start_time)
    for number, run in enumerate(runs, start=1):
        history = await client.get_workflow_handle(task_id, run_id=run.run_id).fetch_history()
        (HISTORIES / f"{scenario}-{number}.json").write_text(history.to_json())


async def test_record_ask_then_answer_with_progress_and_artifacts(make_harness):
    async def agent(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            await ctx.progress("step:1", "thinking")
            return Ask("which city?")
        await ctx.delta("sunny ")
        await ctx.delta("in Paris")
        return Complete("sunny", artifacts=[Artifact((DataPart({"c": 21}),), name="weather")])

    harness = make_harness(agent)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        asked = await send_blocking(client, user_message("weather?"))
        await send_blocking(client, user_message("Paris", task_id=asked.id))
        await save(harness, asked.id, "ask-answer")


async def test_record_a_direct_reply(make_harness):
    async def agent(ctx: TurnContext) -> TurnResult:
        return Reply("hi")

    harness = make_harness(agent)
    message = user_message("yo")
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        events = [e async for e in client.send_message(SendMessageRequest(message=message))]
        assert events[0].HasField("message")
        digest = content_digest(MessageToDict(message))
        task_id = derive_task_id(harness.agent_id, None, message.message_id, digest)
        await save(harness, task_id, "direct-reply")


async def test_record_turns_that_store_their_tasks_end(make_harness):
    """A first turn given the whole run stores its task's end itself (``record_in_turn``): a
    completed task, and a direct reply."""

    async def agent(ctx: TurnContext) -> TurnResult:
        return Reply("hi") if ctx.history[-1].text == "reply" else Complete("done")

    harness = make_harness(agent)
    message = user_message("reply")
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        done = await send_blocking(client, user_message("work"))
        events = [e async for e in client.send_message(SendMessageRequest(message=message))]
        assert events[0].HasField("message")
        digest = content_digest(MessageToDict(message))
        replied = derive_task_id(harness.agent_id, None, message.message_id, digest)
        await save(harness, done.id, "turn-end")
        await save(harness, replied, "turn-end-reply")


@pytest.mark.parametrize("blocking", [False, True], ids=["streamed", "blocking"])
async def test_record_tool_calls_of_the_llm_loop(make_harness, monkeypatch, blocking):
    """The LLM loop with a tool call: for a streaming sender the turn's steps are regular
    activities (``llm-tools``); for a blocking one the model requests and the idempotent tool are
    local activities in one workflow task, the model asked without streaming (``llm-tools-local``)."""
    monkeypatch.setenv("RECORD_KEY", "sk-record")
    with serve_fake_openai(
        [tool_call_reply("lookup_order", {"order_id": 7}), text_reply("Order 7 ", "shipped.")]
    ) as server:
        model: dict[str, Any] = {
            "kind": "openai",
            "name": "m",
            "base_url": server.base_url,
            "api_key_env": "RECORD_KEY",
            "tools": ["tests.integration.agent_tools:lookup_order"],
        }
        harness = make_harness(model=model)
        async with serving(harness) as url, a2a_client(url, streaming=not blocking) as client:
            if blocking:
                task = await send_blocking(client, user_message("where is 7?"))
                await save(harness, task.id, "llm-tools-local")
            else:
                events = await collect(
                    client.send_message(SendMessageRequest(message=user_message("where is 7?")))
                )
                await save(harness, events[0].task.id, "llm-tools")


async def test_record_continue_as_new(make_harness, monkeypatch):
    async def agent(ctx: TurnContext) -> TurnResult:
        return Ask(f"noted {ctx.number}")

    original = Harness._task_start  # pyright: ignore[reportPrivateUsage]
    monkeypatch.setattr(
        Harness, "_task_start", lambda self: attrs.evolve(original(self), run_messages=3)
    )
    harness = make_harness(agent)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        first = await send_blocking(client, user_message("m0"))
        for n in range(1, 8):
            await send_blocking(client, user_message(f"m{n}", task_id=first.id))
        await save(harness, first.id, "continue-as-new")


async def test_record_cancel_mid_turn(make_harness):
    release = anyio.Event()

    async def agent(ctx: TurnContext) -> TurnResult:
        await release.wait()
        return Complete("never")

    harness = make_harness(agent, model=HELD)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_immediately(client, user_message("slow"))
        await wait_for_state(client, task.id, TaskState.TASK_STATE_WORKING)
        await client.cancel_task(CancelTaskRequest(id=task.id))
        await save(harness, task.id, "cancel")


async def test_record_a_failing_agent(make_harness):
    async def agent(ctx: TurnContext) -> TurnResult:
        raise RuntimeError("boom")

    harness = make_harness(agent, model=HELD)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("fail please"))
        assert task.status.state == TaskState.TASK_STATE_FAILED
        await save(harness, task.id, "failure")


@pytest.mark.parametrize("updates", ["stream", "follow"])
async def test_record_a_delegation(make_harness, updates):
    """a delegates to b: with "stream", b's progress comes with its answer on the send's stream;
    with "follow", the stand-in reads b's task until it completes."""
    b_id = "rec-b-" + updates

    async def a(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            return Delegate(Delegation(b_id, "go"), message="asking b")
        return Complete(f"b said {ctx.new_messages[-1].text}")

    async def b(ctx: TurnContext) -> TurnResult:
        await ctx.progress("step:1", "b is on it")
        await anyio.sleep(0.8)  # past a's quick wait: a writes its waiting state to the index
        return Complete("done")

    stream_for = {"stream_for": "2s" if updates == "stream" else 0}
    routes = {"routes": RouteOptions(push=False)}
    a_harness = make_harness(
        a, "rec-a-" + updates, options={"prefix": "/a", **routes}, delegation=stream_for
    )
    b_harness = make_harness(b, b_id, options={"prefix": f"/{b_id}"})
    async with (
        serving(a_harness, b_harness) as url,
        a2a_client(f"{url}/a", streaming=False) as client,
    ):
        task = await send_blocking(client, user_message("ask b"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        await save(a_harness, task.id, f"delegate-{updates}")
        await save(a_harness, f"{task.id}:delegate:1:1", f"delegate-{updates}-standin")
