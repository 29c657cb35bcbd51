"""The built-in LLM agent from configuration: a real provider library over HTTP to a fake model server
on loopback, tools as their own activities, streamed text, classified failures, cancel (both backends)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToJson

from harness_core.temporal.names import TOOL_CALL
from tests.conftest import a2a_client, free_port, serving, user_message
from tests.fakes.model_servers import (
    FakeServer,
    error_reply,
    serve_fake_anthropic,
    serve_fake_openai,
    text_reply,
    tool_call_reply,
)
from tests.integration import agent_tools
from tests.integration.test_a2a_methods import HELD, collect, send_blocking, send_immediately

pytestmark = pytest.mark.anyio

KEY_VARIABLE = "HARNESS_TEST_MODEL_KEY"
KEY = "sk-test-5ecret-model-key"
TOOLS = "tests.integration.agent_tools"


@pytest.fixture(params=["openai", "anthropic"])
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(flavor: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    serve = serve_fake_openai if flavor == "openai" else serve_fake_anthropic
    with serve() as fake:
        yield fake


def llm_config(server: FakeServer, flavor: str, *tools: str, **more: Any) -> dict[str, Any]:
    return {
        "kind": flavor,
        "name": "test-model",
        "base_url": server.base_url,
        "api_key_env": KEY_VARIABLE,
        "system": "You are the order desk.",
        "tools": [f"{TOOLS}:{t}" for t in tools],
        **more,
    }


async def test_an_agent_from_configuration_calls_a_tool_and_streams_its_answer(
    make_harness, server: FakeServer, flavor: str
):
    agent_tools.CALLS.clear()
    server.push(
        tool_call_reply("lookup_order", {"order_id": 42}),
        text_reply("Order 42 ", "shipped ", "on Monday."),
    )
    harness = make_harness(model=llm_config(server, flavor, "lookup_order"))
    async with serving(harness) as url, a2a_client(url) as client:
        events = await collect(
            client.send_message(SendMessageRequest(message=user_message("where is order 42?")))
        )
        async with a2a_client(url, streaming=False) as reader:
            task = await reader.get_task(GetTaskRequest(id=events[0].task.id))
    assert agent_tools.CALLS == [("lookup_order", 42)]
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "Order 42 shipped on Monday."
    streamed = "".join(
        p.text
        for e in events
        if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts
    )
    assert streamed == "Order 42 shipped on Monday."
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    # The second request carried the tool's result; both carried the system prompt and the key.
    assert len(server.requests) == 2
    assert "shipped on Monday" in json.dumps(server.requests[1].body)
    assert "You are the order desk." in json.dumps(server.requests[0].body)
    assert all(KEY in (r.authorization or r.x_api_key or "") for r in server.requests)
    assert KEY not in MessageToJson(task)


async def _history_of(harness: Any, task_id: str) -> Any:
    connection = harness.tasks.connection

    async def fetch() -> Any:
        return await connection.client.get_workflow_handle(task_id).fetch_history()

    return await connection.bridge.call(fetch)


def _scheduled_activities(history: Any) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


async def test_a_blocking_turn_with_a_tool_is_one_workflow_task_and_asks_without_streaming(
    make_harness, server: FakeServer, flavor: str
):
    """Nobody can watch a blocking sender's turn, so the model is asked without streaming, and
    its idempotent tool runs as a local activity: the whole turn is one workflow task."""
    agent_tools.CALLS.clear()
    server.push(
        tool_call_reply("lookup_order", {"order_id": 7}), text_reply("Order 7 ", "shipped.")
    )
    harness = make_harness(model=llm_config(server, flavor, "lookup_order"))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("where is order 7?"))
        whole = await client.get_task(GetTaskRequest(id=task.id))
        history = await _history_of(harness, task.id)
    assert agent_tools.CALLS == [("lookup_order", 7)]
    assert task.status.message.parts[0].text == "Order 7 shipped."
    response = next(a for a in whole.artifacts if a.name == "response")
    assert "".join(p.text for p in response.parts) == "Order 7 shipped."
    assert [bool(r.body.get("stream")) for r in server.requests] == [False, False]
    assert _scheduled_activities(history) == []  # no task-queue round trip for the tool
    completed = [
        e for e in history.events if e.HasField("workflow_task_completed_event_attributes")
    ]
    assert len(completed) == 1
    markers = [e for e in history.events if e.HasField("marker_recorded_event_attributes")]
    # The two model requests and the tool: the step that answers stored the task's end itself
    # (``TurnRequest.record_at``), so the workflow ran no local activity to store it.
    assert len(markers) == 3
    names = b"".join(
        p.data
        for e in markers
        for v in e.marker_recorded_event_attributes.details.values()
        for p in v.payloads
    )
    assert b'"store_record"' not in names and names.count(b'"model_step"') == 2
    # Read back (from the store): the end the step stored, whole.
    assert whole.status.state == TaskState.TASK_STATE_COMPLETED
    assert whole.status.message.parts[0].text == "Order 7 shipped."
    assert [m.role for m in whole.history] == [Role.ROLE_USER, Role.ROLE_AGENT]


async def test_an_unreachable_model_server_is_tried_again_then_named_in_the_failure(
    make_harness, caplog
):
    caplog.set_level(logging.INFO)
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    harness = make_harness(model={"kind": "openai", "name": "m", "base_url": closed})
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("hello"))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert task.status.message.parts[0].text == (
        "the agent could not complete this task: the connection to the model server failed "
        "(connection error)"
    )
    failed = [r.getMessage() for r in caplog.records if "a model request failed" in r.getMessage()]
    assert len(failed) == 5
    assert f"(m at {closed})" in failed[0]  # which model, and where it was asked
    assert not [r for r in caplog.records if r.exc_info is not None and r.levelno >= logging.INFO]


async def test_a_refused_key_fails_the_turn_at_once_with_our_message(
    make_harness, server: FakeServer, flavor: str
):
    server.push(error_reply(401))
    harness = make_harness(model=llm_config(server, flavor))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("hello"))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    text = task.status.message.parts[0].text
    assert "api_key_env" in text
    assert KEY not in MessageToJson(task)
    assert len(server.requests) == 1  # not retried


async def test_a_server_error_is_retried_and_the_turn_completes(
    make_harness, server: FakeServer, flavor: str
):
    server.push(error_reply(503), text_reply("back again"))
    harness = make_harness(model=llm_config(server, flavor))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("hello"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "back again"
    assert len(server.requests) == 2


async def test_a_tool_that_must_not_run_twice_gets_one_attempt_and_the_model_hears_it_failed(
    make_harness, server: FakeServer, flavor: str
):
    agent_tools.CALLS.clear()
    server.push(tool_call_reply("charge_card", {"amount": 5}), text_reply("The charge failed."))
    harness = make_harness(model=llm_config(server, flavor, "charge_card"))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("charge me 5"))
        history = await _history_of(harness, task.id)
    assert agent_tools.CALLS == [("charge_card", 5)]
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    second = json.dumps(server.requests[1].body)
    assert "charge_card failed" in second
    assert "card processor is down" not in second  # the tool's own text stays inside
    # A tool that must not run twice stays a regular activity, even in a local turn: a local one
    # would run again if its workflow task were retried on another worker.
    assert _scheduled_activities(history) == [TOOL_CALL]


@pytest.mark.parametrize("flavor", ["openai"])
async def test_cancelling_a_task_cancels_the_tool_call_in_flight(
    make_harness, server: FakeServer, flavor: str
):
    agent_tools.STARTED.clear()
    agent_tools.CANCELLED.clear()
    server.push(tool_call_reply("slow_search", {"query": "refunds"}))
    harness = make_harness(model=llm_config(server, flavor, "slow_search", **HELD))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_immediately(client, user_message("search refunds"))
        with anyio.fail_after(30):
            while not agent_tools.STARTED.is_set():
                await anyio.sleep(0.02)
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        with anyio.fail_after(30):
            while not agent_tools.CANCELLED.is_set():
                await anyio.sleep(0.05)
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert len(server.requests) == 1  # the model was not asked again


async def test_a_long_answer_travels_by_reference_and_arrives_whole(
    make_harness, server: FakeServer, flavor: str
):
    deltas = [f"{n:05d}" + "y" * 995 for n in range(400)]  # 400 KB in 1 KB deltas
    server.push(text_reply(*deltas))
    harness = make_harness(model=llm_config(server, flavor))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("write a long one"))
        whole = await client.get_task(GetTaskRequest(id=task.id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert whole.status.message.parts[0].text == "".join(deltas)
    response = next(a for a in whole.artifacts if a.name == "response")
    assert "".join(p.text for p in response.parts) == "".join(deltas)


async def test_a_rate_limited_request_waits_as_asked_and_then_completes(
    make_harness, server: FakeServer, flavor: str
):
    server.push(error_reply(429, retry_after=1), text_reply("after the wait"))
    harness = make_harness(model=llm_config(server, flavor))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("hello"))
        connection = harness.tasks.connection

        async def history() -> Any:
            return await connection.client.get_workflow_handle(task.id).fetch_history()

        events = (await connection.bridge.call(history)).events
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "after the wait"
    assert len(server.requests) == 2
    # The workflow waited as long as the provider asked (Retry-After: 1) before asking again.
    timers = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        for e in events
        if e.HasField("timer_started_event_attributes")
    ]
    assert [t.total_seconds() for t in timers] == [1.0]


async def test_the_test_kind_calls_each_tool_offline_and_answers_with_what_it_returned(
    make_harness,
):
    """``kind = "test"`` (pydantic-ai's TestModel, no server): the tutorial's offline model. It
    calls the configured tool once, durably like any model's call, then answers with its result."""
    agent_tools.CALLS.clear()
    harness = make_harness(model={"kind": "test", "tools": [f"{TOOLS}:lookup_order"], "agents": []})
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("where is order 42?"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    [(name, order_id)] = agent_tools.CALLS
    assert name == "lookup_order" and isinstance(order_id, int)  # made from the schema
    assert f"order {order_id} shipped on Monday" in task.status.message.parts[0].text
