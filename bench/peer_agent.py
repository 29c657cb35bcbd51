"""One LLM turn with one tool call: a2a-harness against pydantic-ai's Temporal durability.

What is measured
----------------
One unit of work is one agent turn: the model asks for the tool ``lookup_order(order_id)``, the
tool runs, the model answers with text built from the tool's result. The model is a fake
OpenAI-compatible Chat Completions server on loopback, in its own process (started once by the
parent, so its CPU is nobody's): it answers deterministically and at once, streamed or not, and
counts requests (``GET /stats``), so every scenario must show exactly two model requests a turn.
Scenarios:

* ``product``: ``HarnessGroup(Harness(settings)).serve`` (embedded dev server + worker + Hypercorn),
  ``[model] kind = "openai"`` with ``base_url`` = the fake server and ``tools =
  ["bench.peer_agent:lookup_order"]``; one blocking JSON-RPC ``SendMessage`` per turn over HTTP.
* ``peer-embedded``: pydantic-ai 2.68's durable agent as its docs build it: ``Agent(OpenAIChatModel
  (... OpenAIProvider(openai_client=AsyncOpenAI(base_url=fake))), tools=[lookup_order],
  capabilities=[TemporalDurability()])``, a client connected with ``PydanticAIPlugin()``, a worker
  whose workflow runs the agent once per request; ``start_workflow`` + ``result`` from the same
  process. The workflow runs in Temporal's sandbox (what the plugin configures) with this module,
  which holds the agent and the workflow, passed through: the peer's fastest sandboxed layout (no
  re-import of the agent or the workflow per run). On the dev server exactly as the product starts
  it (``harness_core.embedded.open_embedded_temporal``, fresh SQLite file): the same server.
* ``peer-stock``: the same peer on a stock ``temporal server start-dev --headless`` (in memory,
  default dynamic config), the setup pydantic-ai's docs show.
* ``peer-unsandboxed`` (only with ``--only``): the peer on the embedded server with
  ``UnsandboxedWorkflowRunner``, to show what the sandbox costs the peer.

Per scenario: warm-up turns, then ``--requests`` sequential turns (p50, p95), then ``--total``
turns issued by ``--concurrency`` clients back to back (turns/s), each phase bounded by a count
and a time cap, and the CPU seconds per turn of the scenario's process tree: the child process
(the system under test and its load generator, all threads) plus its dev server, read from
``getrusage`` and ``/proc/<pid>/stat`` around each timed phase.

Each scenario runs in a fresh child interpreter (``--scenario X --json``); the closely compared
ones (product, peer-embedded) run twice in mirrored order (A B B A) and each row is the mean. The
parent prints the table and the ratios product/peer against the targets (same server: p50 <=
0.5x, CPU per turn <= 0.5x, turns/s >= 1.5x). Exit code 0 whatever the ratios; 1 only if a
scenario failed entirely.

Run from the repository root: ``PYTHONPATH=. python bench/peer_agent.py`` (``--quick`` for a smoke
run).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import anyio
import httpx
from anyio.abc import SocketAttribute, SocketStream
from temporalio import workflow

from bench.durable_send import (
    Options,
    _dig,  # pyright: ignore[reportPrivateUsage]
    _fmt,  # pyright: ignore[reportPrivateUsage]
    _http_client,  # pyright: ignore[reportPrivateUsage]
    _stop_child,  # pyright: ignore[reportPrivateUsage]
    concurrent,
    mean,
    ratio,
    sequential,
)
from bench.durable_send import (
    Result as BaseResult,
)
from bench.durable_send import (
    mean_result as base_mean_result,
)

SCENARIOS = ("product", "peer-embedded", "peer-stock", "peer-unsandboxed")
DEFAULT_SCENARIOS = ("peer-stock", "product", "peer-embedded")
# Run twice, in mirrored order: whichever scenario runs later in a run tends to measure slower.
MIRRORED = ("product", "peer-embedded")
LOOPBACK = "127.0.0.1"
STARTUP_CAP = 60.0  # seconds to bring a scenario's servers up
SHUTDOWN_CAP = 60.0  # slack for a child to stop its servers after the measurement
FAKE_MODEL_START_CAP = 30.0

MODEL_NAME = "bench-model"
TOOL_NAME = "lookup_order"
ORDER_ID = 42
PROMPT = f"where is order {ORDER_ID}?"
TOOL_RESULT = f"order {ORDER_ID} shipped on Monday"
ANSWER = f"Your order: {TOOL_RESULT}."  # what the fake model answers once it has the tool's result

Call = Callable[[], Awaitable[None]]
"""One turn; raises on any failure (wrong answer included)."""


# -- the tool, shared by both agents ------------------------------------------------------------


async def lookup_order(order_id: int) -> str:
    """Where an order is.

    Args:
        order_id: the order's number.
    """
    return f"order {order_id} shipped on Monday"


# -- the fake Chat Completions server (its own process) ------------------------------------------


class FakeModel:
    """Answers Chat Completions requests: a tool call first, then text from the tool's result.

    Deterministic from the request alone: a request whose messages hold a ``tool`` message gets
    the answer, any other gets a call of ``lookup_order`` (which must be among the offered
    tools). Streamed requests get the same content as SSE chunks, in one response body.
    """

    def __init__(self) -> None:
        self.counts = {"requests": 0, "tool_calls": 0, "answers": 0, "streamed": 0, "errors": 0}

    def respond(self, method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
        if method == "GET" and path == "/stats":
            return 200, "application/json", json.dumps(self.counts).encode()
        if method != "POST" or path.rstrip("/") != "/v1/chat/completions":
            return self._error(404, f"no route {method} {path}")
        self.counts["requests"] += 1
        number = self.counts["requests"]
        try:
            request = cast("dict[str, Any]", json.loads(body))
            messages = cast("list[dict[str, Any]]", request.get("messages") or [])
            tools = cast("list[dict[str, Any]]", request.get("tools") or [])
        except (ValueError, AttributeError):
            return self._error(400, "the body is not a JSON object")
        results = [m for m in messages if m.get("role") == "tool"]
        stream = bool(request.get("stream"))
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        if results:
            content = _text_of(results[-1].get("content"))
            if TOOL_RESULT not in content:
                return self._error(400, f"unexpected tool result {content[:80]!r}")
            self.counts["answers"] += 1
            message: dict[str, Any] = {"role": "assistant", "content": f"Your order: {content}."}
            finish = "stop"
        else:
            names = [_dig_str(t, "function", "name") for t in tools]
            if TOOL_NAME not in names:
                return self._error(400, f"{TOOL_NAME} is not among the tools offered: {names}")
            self.counts["tool_calls"] += 1
            call = {
                "id": f"call_{number}",
                "type": "function",
                "function": {"name": TOOL_NAME, "arguments": json.dumps({"order_id": ORDER_ID})},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        model = str(request.get("model", MODEL_NAME))
        if stream:
            self.counts["streamed"] += 1
            chunks = _chunks(message, finish, model, number, include_usage=include_usage)
            return 200, "text/event-stream", "".join(chunks).encode()
        completion = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": _USAGE,
        }
        return 200, "application/json", json.dumps(completion).encode()

    def _error(self, status: int, text: str) -> tuple[int, str, bytes]:
        self.counts["errors"] += 1
        error = {"error": {"message": text, "type": "invalid_request_error", "code": None}}
        return status, "application/json", json.dumps(error).encode()


_USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = cast("list[object]", content)
        return "".join(_dig_str(p, "text") for p in parts)
    return ""


def _dig_str(value: object, *keys: str) -> str:
    for key in keys:
        if not isinstance(value, dict):
            return ""
        value = cast("dict[str, object]", value).get(key)
    return value if isinstance(value, str) else ""


def _chunks(
    message: dict[str, Any], finish: str, model: str, number: int, *, include_usage: bool
) -> Iterator[str]:
    """The message as Chat Completions stream chunks (tool arguments in two deltas)."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        payload = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        return f"data: {json.dumps(payload)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for index, call in enumerate(cast("list[dict[str, Any]]", message.get("tool_calls") or [])):
        arguments = str(call["function"]["arguments"])
        start = {"index": index, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [{**start, "function": {"name": TOOL_NAME, "arguments": ""}}]})
        middle = len(arguments) // 2
        for piece in (arguments[:middle], arguments[middle:]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, finish)
    if include_usage:
        usage = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [],
            "usage": _USAGE,
        }
        yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"


async def serve_fake_model(port_file: Path) -> None:
    """Serve :class:`FakeModel` over HTTP/1.1 (keep-alive) on loopback until killed.

    A hand-written HTTP/1.1 reader, not an ASGI stack: the model must cost the scenarios as little
    latency as possible. Bodies come with Content-Length (what the openai SDK sends); responses
    carry Content-Length too, SSE included. The port is written to ``port_file`` once listening.
    """
    from anyio.streams.buffered import BufferedByteReceiveStream

    model = FakeModel()
    listener = await anyio.create_tcp_listener(local_host=LOOPBACK, local_port=0)
    port = int(listener.extra(SocketAttribute.local_port))
    partial = port_file.with_suffix(".partial")
    partial.write_text(str(port))
    partial.replace(port_file)

    async def handle(stream: SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            with contextlib.suppress(
                anyio.EndOfStream,
                anyio.IncompleteRead,
                anyio.DelimiterNotFound,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
                OSError,
            ):
                while True:
                    head = (await reader.receive_until(b"\r\n\r\n", 65536)).decode("latin-1")
                    request_line, *header_lines = head.split("\r\n")
                    method, path, _version = request_line.split(" ", 2)
                    headers = {
                        name.strip().lower(): value.strip()
                        for name, _, value in (line.partition(":") for line in header_lines)
                    }
                    if "chunked" in headers.get("transfer-encoding", ""):
                        await stream.send(b"HTTP/1.1 501 Not Implemented\r\n\r\n")
                        return
                    length = int(headers.get("content-length") or 0)
                    body = await reader.receive_exactly(length) if length else b""
                    status, content_type, payload = model.respond(method, path, body)
                    reason = "OK" if status == 200 else "Error"
                    head_out = (
                        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
                        f"content-length: {len(payload)}\r\n\r\n"
                    )
                    await stream.send(head_out.encode() + payload)

    await listener.serve(handle)


@dataclass
class FakeModelProcess:
    port: int
    pid: int

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"


@contextlib.contextmanager
def fake_model_process(directory: Path) -> Iterator[FakeModelProcess]:
    """The fake model server in a child process for the block's duration; stopped and reaped."""
    port_file = directory / "fake-model.port"
    log_path = directory / "fake-model.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--fake-model-server", str(port_file)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_child_env(),
        )
    try:
        deadline = time.monotonic() + FAKE_MODEL_START_CAP
        while not port_file.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-500:]
                raise RuntimeError(f"the fake model server did not start: {tail}")
            time.sleep(0.05)
        yield FakeModelProcess(int(port_file.read_text()), process.pid)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait()


async def fake_model_requests(client: httpx.AsyncClient, port: int) -> int:
    response = await client.get(f"http://{LOOPBACK}:{port}/stats")
    response.raise_for_status()
    return int(response.json()["requests"])


# -- measurement ----------------------------------------------------------------------------------


@dataclass
class Result(BaseResult):
    """durable_send's result (a request is a turn here: its CPU and latency fields are per turn)
    with the model requests a turn took and the count of turns that went through."""

    model_requests_per_turn: float | None = None
    turns_ok: int = 0  # warm-up included


def mean_result(runs: Sequence[Result]) -> Result:
    """Several runs of one scenario as one: the mean of each figure, the sum of the counts."""
    return Result(
        **asdict(base_mean_result(runs)),
        model_requests_per_turn=mean([r.model_requests_per_turn for r in runs]),
        turns_ok=sum(r.turns_ok for r in runs),
    )


def counted(call: Call, result: Result) -> Call:
    """``call``, counting each turn that went through in ``result.turns_ok``."""

    async def counting() -> None:
        await call()
        result.turns_ok += 1

    return counting


@dataclass
class Scenario:
    """What a scenario's runner gets: the options, its directory, the fake model, its result."""

    options: Options
    workdir: Path
    model_port: int
    exclude: frozenset[int]  # pids not counted in its CPU (a fake model it started itself)
    result: Result

    @property
    def model_url(self) -> str:
        return f"http://{LOOPBACK}:{self.model_port}/v1"


async def measure(
    scenario: Scenario, calls: Callable[[], contextlib.AbstractAsyncContextManager[Call]]
) -> None:
    """Both phases, each with a fresh ``calls()`` (one HTTP client per phase), and the model
    requests a turn took in the sequential phase (warm-up included).

    Counted there only: turns cut off by the throughput phase's time cap have made requests too.
    """
    result = scenario.result
    async with httpx.AsyncClient(timeout=10.0) as stats:
        before = await fake_model_requests(stats, scenario.model_port)
        async with calls() as call:
            await sequential(counted(call, result), scenario.options, result, scenario.exclude)
        requests = await fake_model_requests(stats, scenario.model_port) - before
        turns = result.turns_ok
        async with calls() as call:
            await concurrent(counted(call, result), scenario.options, result, scenario.exclude)
    if turns:
        result.model_requests_per_turn = requests / turns
        if requests != 2 * turns:
            result.notes.append(f"{requests} model requests for {turns} sequential turns")


# -- the product ----------------------------------------------------------------------------------


async def run_product(scenario: Scenario) -> None:
    from harness_core import Harness, HarnessGroup, settings_from_mapping

    settings = settings_from_mapping(
        {
            "agent": {"id": "bench"},
            "server": {"bind": f"{LOOPBACK}:0"},
            "model": {
                "kind": "openai",
                "name": MODEL_NAME,
                "base_url": scenario.model_url,
                # No api_key_env: the product then sends a placeholder key, which the fake ignores.
                "tools": [f"{__name__}:{lookup_order.__name__}"],
            },
        },
        base_dir=scenario.workdir,  # the embedded dev server's database: <workdir>/.harness/
    )
    group = HarnessGroup(Harness(settings))
    async with anyio.create_task_group() as tg:
        try:
            with anyio.fail_after(STARTUP_CAP):
                host, port = await tg.start(group.serve)
            url = f"http://{host}:{port}/"

            @contextlib.asynccontextmanager
            async def calls() -> AsyncIterator[Call]:
                async with _http_client(scenario.options) as client:

                    async def call() -> None:
                        body = {
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "SendMessage",
                            "params": {
                                "message": {
                                    "messageId": uuid.uuid4().hex,
                                    "role": "ROLE_USER",
                                    "parts": [{"text": PROMPT}],
                                }
                            },
                        }
                        response = await client.post(url, json=body, headers={"A2A-Version": "1.0"})
                        if response.status_code != 200:
                            raise RuntimeError(
                                f"HTTP {response.status_code}: {response.text[:200]}"
                            )
                        answer: object = response.json()
                        status = _dig(answer, "result", "task", "status")
                        if _dig(status, "state") != "TASK_STATE_COMPLETED":
                            raise RuntimeError(f"not completed: {response.text[:300]}")
                        if ANSWER not in json.dumps(_dig(status, "message")):
                            raise RuntimeError(f"wrong answer: {response.text[:300]}")

                    yield call

            await measure(scenario, calls)
        finally:
            tg.cancel_scope.cancel()


# -- the peer: pydantic-ai's Temporal durability --------------------------------------------------

_PEER_AGENTS: list[Any] = []
"""The peer agent, built once the fake model's address is known (``build_peer_agent``).

Workflow code reads it from here: this module is passed through the sandbox, so the sandboxed
workflow sees the host's module and its agent, as the agent module of pydantic-ai's docs would be
when imported through ``workflow.unsafe.imports_passed_through()``.
"""


@workflow.defn(name="BenchPeerAgentWorkflow")
class PeerAgentWorkflow:
    """Runs the peer agent once on the prompt and returns its text (pydantic-ai's docs' shape)."""

    # Read by PydanticAIPlugin when the worker is configured: it registers the agent's activities.
    __pydantic_ai_agents__: ClassVar[list[Any]] = _PEER_AGENTS

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await _PEER_AGENTS[0].run(prompt)
        return str(result.output)


def build_peer_agent(model_url: str) -> Callable[[], Awaitable[None]]:
    """Build the peer agent against ``model_url`` for the workflow; return how to close its client.

    The same client settings as the product's model (``max_retries=0``: Temporal retries).
    """
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, Tool
    from pydantic_ai.durable_exec.temporal import TemporalDurability
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=model_url, api_key="bench-placeholder-key", max_retries=0)
    model = OpenAIChatModel(MODEL_NAME, provider=OpenAIProvider(openai_client=client))
    agent = Agent(
        model,
        name="peer",  # activity names derive from it
        tools=[Tool(lookup_order, takes_ctx=False)],
        capabilities=[TemporalDurability()],
    )
    _PEER_AGENTS[:] = [agent]
    return client.close


@contextlib.asynccontextmanager
async def peer_server(kind: str, workdir: Path) -> AsyncIterator[str]:
    """The address of a fresh dev server: the product's embedded settings, or a stock one."""
    if kind == "stock":
        from bench.durable_send import stock_dev_server

        async with stock_dev_server() as address:
            yield address
        return
    from harness_core.embedded import open_embedded_temporal

    # open_embedded_temporal bounds its own start (start_timeout, 30 s by default).
    async with open_embedded_temporal(workdir / "temporal.sqlite3") as server:
        yield server.address


async def run_peer(scenario: Scenario, *, server: str, sandboxed: bool) -> None:
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
    from temporalio.client import Client
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    if __name__ == "__main__":
        raise RuntimeError("run the peer from the module bench.peer_agent, not __main__")
    close = build_peer_agent(scenario.model_url)
    try:
        async with peer_server(server, scenario.workdir) as address:
            client: Client | None = None
            with anyio.fail_after(STARTUP_CAP):
                while client is None:
                    try:
                        client = await Client.connect(address, plugins=[PydanticAIPlugin()])
                    except RuntimeError:
                        await anyio.sleep(0.1)
            connected = client
            queue = f"bench-peer-{uuid.uuid4().hex[:8]}"
            # PydanticAIPlugin keeps the runner given here and adds its own pass-through modules.
            runner: WorkflowRunner = (
                SandboxedWorkflowRunner(
                    restrictions=SandboxRestrictions.default.with_passthrough_modules(__name__)
                )
                if sandboxed
                else UnsandboxedWorkflowRunner()
            )

            @contextlib.asynccontextmanager
            async def calls() -> AsyncIterator[Call]:
                async def call() -> None:
                    handle = await connected.start_workflow(
                        PeerAgentWorkflow.run,
                        PROMPT,
                        id=f"bench-peer-{uuid.uuid4().hex}",
                        task_queue=queue,
                    )
                    answer = await handle.result()
                    if ANSWER not in answer:
                        raise RuntimeError(f"wrong answer {answer[:200]!r}")

                yield call

            worker = Worker(
                connected, task_queue=queue, workflows=[PeerAgentWorkflow], workflow_runner=runner
            )
            async with worker:
                await measure(scenario, calls)
    finally:
        with anyio.CancelScope(shield=True):
            await close()


# -- child: one scenario --------------------------------------------------------------------------

Runner = Callable[[Scenario], Awaitable[None]]


async def _run_peer_embedded(scenario: Scenario) -> None:
    await run_peer(scenario, server="embedded", sandboxed=True)


async def _run_peer_stock(scenario: Scenario) -> None:
    await run_peer(scenario, server="stock", sandboxed=True)


async def _run_peer_unsandboxed(scenario: Scenario) -> None:
    await run_peer(scenario, server="embedded", sandboxed=False)


RUNNERS: dict[str, Runner] = {
    "product": run_product,
    "peer-embedded": _run_peer_embedded,
    "peer-stock": _run_peer_stock,
    "peer-unsandboxed": _run_peer_unsandboxed,
}


def run_scenario(name: str, options: Options, workdir: Path, model_port: int | None) -> Result:
    """Run one scenario in this process; SIGINT or SIGTERM cancels it (and its cleanup runs).

    Without ``model_port`` it starts a fake model process of its own (not counted in its CPU).
    """
    result = Result(name)
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        exclude: frozenset[int] = frozenset()
        if model_port is None:
            fake = stack.enter_context(fake_model_process(workdir))
            model_port, exclude = fake.port, frozenset({fake.pid})
        scenario = Scenario(options, workdir, model_port, exclude, result)

        async def main() -> None:
            async with anyio.create_task_group() as tg:

                async def stop_on_signal() -> None:
                    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                        async for signum in signals:
                            result.notes.append(f"interrupted by {signal.Signals(signum).name}")
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(stop_on_signal)
                await RUNNERS[name](scenario)
                tg.cancel_scope.cancel()

        anyio.run(main)
    return result


# -- parent: every scenario in its own child ------------------------------------------------------


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    # Bytecode caches as an installed product has them (see durable_send.py).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def child_command(name: str, options: Options, workdir: Path, model_port: int) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--scenario",
        name,
        "--json",
        "--workdir",
        str(workdir),
        "--model-port",
        str(model_port),
        "--warmup",
        str(options.warmup),
        "--requests",
        str(options.requests),
        "--concurrency",
        str(options.concurrency),
        "--total",
        str(options.total),
        "--sequential-cap",
        str(options.sequential_cap),
        "--time-cap",
        str(options.time_cap),
    ]


def run_child(name: str, options: Options, workdir: Path, model_port: int) -> Result:
    """Run one scenario in a fresh interpreter, bounded; always stop and reap it."""
    cap = STARTUP_CAP + options.sequential_cap + options.time_cap + SHUTDOWN_CAP
    print(f"-- {name} ...", file=sys.stderr, flush=True)
    began = time.perf_counter()
    notes: list[str] = []
    stdout = ""
    # Its own session: a Ctrl-C on the terminal reaches only this parent, which then stops the
    # child in order; and a last-resort SIGKILL of its group reaches the child's own children.
    process = subprocess.Popen(
        child_command(name, options, workdir, model_port),
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_child_env(),
        text=True,
        start_new_session=True,
    )
    try:
        stdout, _ = process.communicate(timeout=cap)
    except subprocess.TimeoutExpired:
        notes.append(f"the child overran its {cap:g} s cap and was stopped")
    finally:
        if process.poll() is None:
            stdout = _stop_child(process, workdir) or stdout
    print(
        f"-- {name} done in {time.perf_counter() - began:.1f} s (exit {process.returncode})",
        file=sys.stderr,
        flush=True,
    )
    result = Result(name)
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            data: dict[str, Any] = json.loads(line)
            result = Result(**data)
            break
    else:
        notes.append("the child printed no result")
    if process.returncode != 0:
        notes.append(f"the child exited with code {process.returncode}")
    result.notes.extend(notes)
    return result


def report(results: dict[str, Result]) -> list[dict[str, Any]]:
    """The ratios product/peer, each with its target (same server) and verdict."""
    product, embedded, stock = results["product"], results["peer-embedded"], results["peer-stock"]
    # (name, value, target text, lower bound, upper bound); no bounds: informational.
    rows: list[tuple[str, float | None, str, float | None, float | None]] = [
        (
            "product p50 / peer-embedded p50",
            ratio(product.p50_ms, embedded.p50_ms),
            "<= 0.5",
            None,
            0.5,
        ),
        (
            "product CPU/turn / peer-embedded CPU/turn",
            ratio(product.cpu_ms_per_request, embedded.cpu_ms_per_request),
            "<= 0.5",
            None,
            0.5,
        ),
        (
            "product turns/s / peer-embedded turns/s",
            ratio(product.rps, embedded.rps),
            ">= 1.5",
            1.5,
            None,
        ),
        (
            "product p50 / peer-stock p50",
            ratio(product.p50_ms, stock.p50_ms),
            "informational",
            None,
            None,
        ),
        (
            "product CPU/turn / peer-stock CPU/turn",
            ratio(product.cpu_ms_per_request, stock.cpu_ms_per_request),
            "informational",
            None,
            None,
        ),
        (
            "product turns/s / peer-stock turns/s",
            ratio(product.rps, stock.rps),
            "informational",
            None,
            None,
        ),
        (
            "peer-embedded p50 / peer-stock p50",
            ratio(embedded.p50_ms, stock.p50_ms),
            "informational",
            None,
            None,
        ),
    ]
    out: list[dict[str, Any]] = []
    for name, value, target, low, high in rows:
        if low is None and high is None:
            verdict = "info"
        elif value is None:
            verdict = "not measured"
        elif (low is None or value >= low) and (high is None or value <= high):
            verdict = "met"
        else:
            verdict = "not met"
        out.append({"ratio": name, "value": value, "target": target, "verdict": verdict})
    return out


def print_table(
    results: dict[str, Result], shown: Sequence[str], ratios: list[dict[str, Any]], options: Options
) -> None:
    print(
        f"one LLM turn (model -> {TOOL_NAME} -> model): {options.warmup} warm-up, "
        f"{options.requests} sequential, {options.total} at concurrency {options.concurrency} "
        f"(caps {options.sequential_cap:g} s / {options.time_cap:g} s)"
    )
    print()
    print(
        "| scenario | p50 ms | p95 ms | turns/s | CPU ms/turn | of which dev server "
        "| CPU ms/turn sequential | model requests/turn | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in shown:
        r = results[name]
        print(
            f"| {name} | {_fmt(r.p50_ms)} | {_fmt(r.p95_ms)} | {_fmt(r.rps)} "
            f"| {_fmt(r.cpu_ms_per_request)} | {_fmt(r.server_cpu_ms_per_request)} "
            f"| {_fmt(r.sequential_cpu_ms_per_request)} | {_fmt(r.model_requests_per_turn, 2)} "
            f"| {r.errors} |"
        )
    print()
    print("| ratio | value | target | verdict |")
    print("|---|---:|---|---|")
    for row in ratios:
        print(f"| {row['ratio']} | {_fmt(row['value'], 2)} | {row['target']} | {row['verdict']} |")
    notes = [(name, note) for name in shown for note in results[name].notes]
    samples = [(name, s) for name in shown for s in results[name].error_samples]
    if notes or samples:
        print()
        for name, note in notes:
            print(f"- {name}: {note}")
        for name, sample in samples:
            print(f"- {name} error: {sample}")


# -- command line ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scenario", choices=SCENARIOS, help="run one scenario (child mode)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SCENARIOS,
        help="parent: these scenarios (default: all but peer-unsandboxed)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--no-abba",
        action="store_true",
        help="run each scenario once (default: product and peer-embedded twice, mirrored)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 10 sequential, 32 total")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up turns (default 10)")
    parser.add_argument("--requests", type=int, default=None, help="sequential turns (100)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent clients (16)")
    parser.add_argument("--total", type=int, default=None, help="turns in the throughput run (240)")
    parser.add_argument(
        "--sequential-cap", type=float, default=60.0, help="seconds for warm-up + sequential"
    )
    parser.add_argument("--time-cap", type=float, default=45.0, help="seconds for throughput")
    parser.add_argument("--workdir", type=Path, default=None, help="child: where its files go")
    parser.add_argument("--model-port", type=int, default=None, help="child: the fake model's port")
    parser.add_argument("--fake-model-server", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def options_from(args: argparse.Namespace) -> Options:
    quick: bool = args.quick

    def pick(value: int | None, normal: int, small: int) -> int:
        return value if value is not None else (small if quick else normal)

    return Options(
        warmup=pick(args.warmup, 10, 3),
        requests=pick(args.requests, 100, 10),
        concurrency=max(1, int(args.concurrency)),
        total=pick(args.total, 240, 32),
        sequential_cap=float(args.sequential_cap),
        time_cap=float(args.time_cap),
    )


def _interrupt(signum: int, frame: object) -> None:
    # Once only: a second SIGTERM must not cut the cleanup short (SIGKILL still ends it all).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.fake_model_server is not None:
        anyio.run(serve_fake_model, args.fake_model_server)
        return 0
    options = options_from(args)
    if args.scenario is not None:
        with contextlib.ExitStack() as stack:
            workdir: Path | None = args.workdir
            if workdir is None:
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
            result = run_scenario(args.scenario, options, workdir, args.model_port)
        print(json.dumps(asdict(result)) if args.json else result, flush=True)
        return 0
    # A SIGTERM to the parent unwinds like Ctrl-C: the running child and the fake model are
    # stopped and reaped by the finally blocks below.
    signal.signal(signal.SIGTERM, _interrupt)
    chosen: Sequence[str] = args.only or DEFAULT_SCENARIOS
    results = {name: Result(name, notes=["not run"]) for name in SCENARIOS}
    middle = [name for name in MIRRORED if name in chosen]
    order = [name for name in chosen if name not in MIRRORED] + middle
    if len(middle) > 1 and not args.no_abba:
        order += middle[::-1]
    runs: dict[str, list[Result]] = {}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-peer-agent-") as root,
            fake_model_process(Path(root)) as fake,
        ):
            for index, name in enumerate(order):
                workdir = Path(root) / f"{index}-{name}"
                workdir.mkdir()
                runs.setdefault(name, []).append(run_child(name, options, workdir, fake.port))
    except KeyboardInterrupt:
        print("interrupted: every child and server was stopped", file=sys.stderr)
        return 130
    for name, done in runs.items():
        results[name] = done[0] if len(done) == 1 else mean_result(done)
    ratios = report(results)
    shown = [name for name in SCENARIOS if name in chosen]
    if args.json:
        print(json.dumps({"results": [asdict(results[n]) for n in shown], "ratios": ratios}))
    else:
        print_table(results, shown, ratios, options)
    return 1 if any(results[name].failed for name in chosen) else 0


if __name__ == "__main__":
    # Run as the module ``bench.peer_agent``, not ``__main__``: the product imports its tool by
    # that name, and the peer's workflow and agent must be the ones the sandbox passes through.
    _root = str(Path(__file__).resolve().parents[1])
    if _root not in sys.path:
        sys.path.insert(0, _root)
    sys.exit(importlib.import_module("bench.peer_agent").main())
