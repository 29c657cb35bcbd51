"""Traces end to end: one request to agent a, which delegates to agent b over A2A, is one trace
(the SDK's in-memory exporter collects it), on both backends: a's request span, its workflow and
turn, the delegation, the A2A call to b (its ``traceparent`` taken by b's request span), b's
workflow and turn, and the answer back in a's next turn. JSON log lines name the trace.

Off (no tracer provider), no span is made, no ``traceparent`` leaves the process.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from a2a.types import TaskState
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harness_core import Complete, Delegate, Delegation, Harness, TurnContext, telemetry
from harness_core.agents.turn import TurnResult
from harness_core.logs import JsonFormatter
from harness_core.temporal.names import TOOL_CALL
from harness_core.urls import http_client
from tests.conftest import a2a_client, agent_settings, serving, unique_id, user_message
from tests.fakes.model_servers import serve_fake_openai, text_reply, tool_call_reply
from tests.integration import agent_tools
from tests.integration.test_a2a_methods import send_blocking
from tests.integration.test_llm_agent import KEY_VARIABLE, llm_config

pytestmark = pytest.mark.anyio


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with telemetry.use(provider):
        yield exporter
    provider.shutdown()


class Pair:
    def __init__(self) -> None:
        self.ids = {"a": unique_id("a"), "b": unique_id("b")}
        self.headers: list[dict[str, str]] = []

    async def a(self, ctx: TurnContext) -> TurnResult:
        logging.getLogger("harness.test").info("a's turn %d", ctx.number)
        if ctx.number == 1:
            return Delegate(Delegation(self.ids["b"], "what is the answer?"))
        return Complete(f"b said: {ctx.new_messages[-1].text}")

    async def b(self, ctx: TurnContext) -> TurnResult:
        return Complete("42")


def harnesses(tmp_path: Path, address: str, pair: Pair, block_for: float = 2.0) -> list[Harness]:
    return [
        Harness(
            agent_settings(
                tmp_path / name, address, pair.ids[name], delegation={"block_for": block_for}
            ),
            agent=getattr(pair, name),
            prefix=f"/agents/{pair.ids[name]}",
        )
        for name in "ab"
    ]


def tree(spans: list[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {span.context.span_id: span for span in spans if span.context is not None}


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    names: list[str] = []
    parent = span.parent
    while parent is not None and parent.span_id in by_id:
        above = by_id[parent.span_id]
        names.append(above.name)
        parent = above.parent
    return names


@pytest.mark.parametrize("way", ["asked", "stand-in"])
async def test_a_delegated_request_is_one_trace_across_both_agents(
    tmp_path: Path, temporal_address: str, spans: InMemorySpanExporter, way: str
) -> None:
    """Asked first within a's workflow task (``delegate_ask``), or through a stand-in workflow
    (``[delegation] block_for = 0``: its ``delegate_send``), the delegation is in a's trace."""
    pair = Pair()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("harness.test")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        async with (
            serving(
                *harnesses(tmp_path, temporal_address, pair, 2.0 if way == "asked" else 0)
            ) as url,
            a2a_client(f"{url}/agents/{pair.ids['a']}", streaming=False) as client,
        ):
            task = await send_blocking(client, user_message("ask b"))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "b said: 42"

    finished = list(spans.get_finished_spans())
    by_id = tree(finished)
    a_post, b_post = f"POST /agents/{pair.ids['a']}/", f"POST /agents/{pair.ids['b']}/"
    [root] = [s for s in finished if s.name == a_post]
    assert root.parent is None and root.context is not None
    trace_id = root.context.trace_id
    ours = [s for s in finished if s.context is not None and s.context.trace_id == trace_id]

    def named(name: str) -> list[ReadableSpan]:
        return sorted((s for s in ours if s.name == name), key=lambda s: s.start_time or 0)

    # a's request, its workflow and turn, the delegation and its send to b.
    sender = "RunActivity:delegate_ask" if way == "asked" else "RunActivity:delegate_send"
    [send] = named(sender)
    assert a_post in ancestors(send, by_id)
    stand_in = "RunWorkflow:DelegationWorkflow.2" in [s.name for s in ours]
    assert stand_in == (way == "stand-in")
    # b's request is a child of that send (its traceparent), and b's turn runs under it.
    [b_request] = named(b_post)
    assert ancestors(b_request, by_id)[0] == sender
    turns = named("RunActivity:run_turn")
    b_turns = [t for t in turns if b_post in ancestors(t, by_id)]
    a_turns = [t for t in turns if b_post not in ancestors(t, by_id)]
    assert len(b_turns) == 1 and len(a_turns) == 2, [ancestors(t, by_id) for t in turns]
    assert all(a_post in ancestors(t, by_id) for t in turns)
    # In order: a's first turn, the send, b's turn, then a's turn with b's answer.
    assert (a_turns[0].start_time or 0) < (send.start_time or 0)
    assert (send.start_time or 0) < (b_turns[0].start_time or 0)
    assert (b_turns[0].end_time or 0) < (a_turns[1].start_time or 0)
    # The ASGI spans are the requests only (not each send and receive of their bodies).
    assert not [s for s in ours if s.name.endswith((" http send", " http receive"))]
    # A JSON log line of a's turn names the trace.
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert any(line.get("trace_id") == f"{trace_id:032x}" for line in lines), lines


async def outgoing_headers() -> httpx.Headers:
    """The headers one request of the runtime's HTTP client (delegations, webhooks) carries."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    async with http_client(transport=httpx.MockTransport(answer)) as http:
        with telemetry.span("a turn"):
            await http.post("http://127.0.0.1:9/hook", json={})
    return seen[0].headers


async def test_the_runtimes_http_calls_carry_the_trace_only_while_tracing(
    spans: InMemorySpanExporter,
) -> None:
    headers = await outgoing_headers()
    [turn] = spans.get_finished_spans()
    assert turn.context is not None
    assert headers["traceparent"].split("-")[1] == f"{turn.context.trace_id:032x}"
    with telemetry.use(None):
        assert "traceparent" not in await outgoing_headers()


async def test_with_tracing_off_nothing_is_added(tmp_path: Path, temporal_address: str) -> None:
    """No provider: the Temporal clients have no interceptor, the outgoing calls no trace header,
    and the delegation still completes."""
    pair = Pair()
    with telemetry.use(None):
        assert not telemetry.enabled()
        assert telemetry.request_hooks() == {}
        carrier: dict[str, str] = {}
        telemetry.inject(carrier)
        assert carrier == {}
        a, b = harnesses(tmp_path, temporal_address, pair)
        async with (
            serving(a, b) as url,
            a2a_client(f"{url}/agents/{pair.ids['a']}", streaming=False) as client,
        ):
            assert a.tasks.connection.client.config()["interceptors"] == []
            task = await send_blocking(client, user_message("ask b"))
    assert task.status.message.parts[0].text == "b said: 42"


async def test_an_llm_turn_traces_its_model_requests_and_tool_call(
    make_harness: Callable[..., Harness],
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A turn of the built-in LLM agent: each model request is a span, the tool call its
    activity's, all under the request's trace."""
    monkeypatch.setenv(KEY_VARIABLE, "sk-test-key")
    agent_tools.CALLS.clear()
    with serve_fake_openai() as server:
        server.push(tool_call_reply("lookup_order", {"order_id": 7}), text_reply("Shipped."))
        harness = make_harness(model=llm_config(server, "openai", "lookup_order"))
        async with serving(harness) as url, a2a_client(url, streaming=False) as client:
            task = await send_blocking(client, user_message("where is order 7?"))
    assert task.status.message.parts[0].text == "Shipped."
    finished = list(spans.get_finished_spans())
    by_id = tree(finished)
    [root] = [s for s in finished if s.name == "POST /" and s.parent is None]
    assert root.context is not None
    ours = [s for s in finished if s.context and s.context.trace_id == root.context.trace_id]
    requests = [s for s in ours if s.name == "model request"]
    assert len(requests) == 2, sorted(s.name for s in ours)
    assert all(
        s.attributes and s.attributes["gen_ai.request.model"] == "test-model" for s in requests
    )
    [tool] = [s for s in ours if s.name == f"RunActivity:{TOOL_CALL}"]
    assert "POST /" in ancestors(tool, by_id)
    assert all("POST /" in ancestors(s, by_id) for s in requests)
