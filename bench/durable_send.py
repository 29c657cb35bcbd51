"""Latency and throughput of a blocking A2A ``SendMessage`` on a2a-harness, against baselines.

What is measured
----------------
Every scenario answers one unit of work ("echo the user's text") and is timed from the caller's
side on loopback: 20 warm-up calls, then ``--requests`` sequential calls (p50 and p95 latency),
then ``--total`` calls issued by ``--concurrency`` workers back to back (requests per second),
each phase bounded by a count and a time cap. Around each timed phase it reads the CPU (user +
system) of the scenario's process tree: this process (all threads: the system under test, the
Temporal SDK core and the load generator) from ``getrusage``, plus its live descendants (a dev
server) from ``/proc/<pid>/stat``; divided by the phase's successful calls, that is the CPU per
request, shown for the throughput phase (with the dev server's share) and the sequential one.
The scenarios:

* ``product-asyncio``: the product as shipped (``HarnessGroup.serve``: embedded Temporal dev
  server, worker, Hypercorn), echo model, ``POST /`` JSON-RPC ``SendMessage`` over HTTP.
* ``product-trio``: the same under Trio (Temporal then runs on the product's bridge thread).
* ``raw-stock`` (a): the naive Temporal floor. A stock ``temporal server start-dev`` (in memory,
  default dynamic config) and a plain temporalio client and worker in this process running
  ``start_workflow`` + ``result`` of a workflow that executes ONE regular activity. This is what
  "an agent on Temporal" costs when nothing is tuned, and what the product must beat.
* ``raw-embedded`` (b): the same raw workflow on the dev server exactly as the product starts it
  (``harness_core.embedded.open_embedded_temporal``: SQLite file with WAL,
  ``history.transferProcessorMaxPollRPS=1000``). It isolates the server tuning from the product's
  own design (update-with-start, local activity, HTTP, A2A): the product should be no slower.
* ``a2a-inmemory`` (c): a2a-sdk's own ``DefaultRequestHandler`` with an in-memory echo executor
  on Hypercorn (asyncio), the same HTTP request. No durability: it shows what durability costs.

The raw workflows run with ``UnsandboxedWorkflowRunner``: the workflow lives in this module,
which imports httpx, Hypercorn and the product, and the sandbox would re-import it per run. The
product's own worker is sandboxed (with pass-through modules); the reference measurements found
the sandbox makes no difference to latency.

Why: the product's claim is that a durable agent on its embedded default answers in a few tens of
milliseconds, well under a naive Temporal setup, on both AnyIO backends. Absolute numbers on a
shared 2-core machine are noisy, so the ratios from ONE run (every scenario measured back to
back) are what matter.

Each scenario runs in a fresh child interpreter (``--scenario X --json``); the parent starts
them one after the other, bounds each with a timeout, and prints the table and the ratios. The
exit code is 0 whatever the ratios; it is 1 only if a scenario failed entirely.

Run from the repository root: ``PYTHONPATH=. python bench/durable_send.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
from anyio.abc import ByteReceiveStream, Process
from temporalio import activity, workflow

SCENARIOS = ("raw-stock", "raw-embedded", "a2a-inmemory", "product-asyncio", "product-trio")
LOOPBACK = "127.0.0.1"
CALL_TIMEOUT = 30.0  # seconds, every single call
STARTUP_CAP = 60.0  # seconds to bring a scenario's servers up
SHUTDOWN_CAP = 60.0  # slack for a child to stop its servers after the measurement
KILL_GRACE = 20.0  # seconds between SIGTERM and SIGKILL when a child has to be stopped
MAX_ERROR_SAMPLES = 3
# A phase stops after this many failures in a row: its server is gone, retrying is only noise.
MAX_CONSECUTIVE_ERRORS = 25

Call = Callable[[], Awaitable[None]]
"""One unit of work; raises on any failure (wrong answer included)."""


# -- measurement ----------------------------------------------------------------------------------


@dataclass
class Options:
    warmup: int
    requests: int
    concurrency: int
    total: int
    sequential_cap: float
    time_cap: float


@dataclass
class Result:
    scenario: str
    p50_ms: float | None = None
    p95_ms: float | None = None
    rps: float | None = None
    cpu_ms_per_request: float | None = None  # throughput phase: this process + its dev server
    server_cpu_ms_per_request: float | None = None  # throughput phase: the dev server alone
    sequential_cpu_ms_per_request: float | None = None  # sequential phase, both
    errors: int = 0
    sequential_ok: int = 0
    concurrent_ok: int = 0
    concurrent_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """No call succeeded at all (or the child produced no result)."""
        return self.sequential_ok == 0 and self.concurrent_ok == 0


def mean(values: Sequence[float | None]) -> float | None:
    """The mean of the known values; None if none is known."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def mean_result(runs: Sequence[Result]) -> Result:
    """Several runs of one scenario as one: the mean of each figure, the sum of the counts."""
    first = runs[0]
    p50s = ", ".join(_fmt(r.p50_ms) for r in runs)
    return Result(
        first.scenario,
        p50_ms=mean([r.p50_ms for r in runs]),
        p95_ms=mean([r.p95_ms for r in runs]),
        rps=mean([r.rps for r in runs]),
        cpu_ms_per_request=mean([r.cpu_ms_per_request for r in runs]),
        server_cpu_ms_per_request=mean([r.server_cpu_ms_per_request for r in runs]),
        sequential_cpu_ms_per_request=mean([r.sequential_cpu_ms_per_request for r in runs]),
        errors=sum(r.errors for r in runs),
        sequential_ok=sum(r.sequential_ok for r in runs),
        concurrent_ok=sum(r.concurrent_ok for r in runs),
        concurrent_seconds=sum(r.concurrent_seconds for r in runs),
        notes=[f"mean of {len(runs)} runs in mirrored order (p50s {p50s} ms)"]
        + [n for r in runs for n in r.notes],
        error_samples=[s for r in runs for s in r.error_samples],
    )


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (non-empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


class Recorder:
    """Counts errors, keeps a few of their descriptions, and gives up on a dead server."""

    def __init__(self, result: Result, phase: str) -> None:
        self.result = result
        self.phase = phase
        self.in_a_row = 0

    @property
    def aborted(self) -> bool:
        return self.in_a_row >= MAX_CONSECUTIVE_ERRORS

    async def attempt(self, call: Call) -> bool:
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                await call()
        except Exception as error:
            self.result.errors += 1
            if len(self.result.error_samples) < MAX_ERROR_SAMPLES:
                self.result.error_samples.append(f"{type(error).__name__}: {error}"[:300])
            self.in_a_row += 1
            if self.in_a_row == MAX_CONSECUTIVE_ERRORS:
                self.result.notes.append(
                    f"{self.phase} phase aborted after {MAX_CONSECUTIVE_ERRORS} errors in a row"
                )
            return False
        self.in_a_row = 0
        return True


# -- CPU of the process tree ----------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name; None if the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ")".
    return text.rpartition(")")[2].split()


def tree_cpu(exclude: frozenset[int] = frozenset()) -> tuple[float, float]:
    """CPU seconds (user + system) of this process (all threads) and of its live descendants.

    The descendants are found by parent pid in ``/proc`` (a dev server is a child of the
    scenario's process, in a session of its own); pids in ``exclude`` (and theirs) are skipped.
    A descendant that ended is not counted (none ends during a phase here).
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    own = usage.ru_utime + usage.ru_stime
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or len(fields) < 13:
            continue
        pid = int(entry.name)
        # After the name: state(0) ppid(1) ... utime(11) stime(12), in clock ticks.
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICKS
    total = 0.0
    pending = list(children.get(os.getpid(), []))
    while pending:
        pid = pending.pop()
        if pid in exclude:
            continue
        total += cpu.get(pid, 0.0)
        pending.extend(children.get(pid, []))
    return own, total


class CpuWindow:
    """CPU of the process tree between ``start`` and ``stop``, per successful call."""

    def __init__(self, exclude: frozenset[int] = frozenset()) -> None:
        self.exclude = exclude
        self.began: tuple[float, float] | None = None
        self.own = 0.0
        self.servers = 0.0

    def start(self) -> None:
        self.began = tree_cpu(self.exclude)

    def stop(self) -> None:
        if self.began is None:
            return  # never started (a cap hit before the timed calls): nothing to count
        own, servers = tree_cpu(self.exclude)
        self.own, self.servers = own - self.began[0], servers - self.began[1]

    def per_call_ms(self, calls: int) -> tuple[float, float] | None:
        """(all, servers) in ms per call; None without calls or without a window."""
        if calls <= 0 or self.began is None:
            return None
        return (self.own + self.servers) * 1000.0 / calls, self.servers * 1000.0 / calls


# -- phases ---------------------------------------------------------------------------------------


async def sequential(
    call: Call, options: Options, result: Result, exclude: frozenset[int] = frozenset()
) -> None:
    """Warm-up calls, then ``requests`` sequential timed calls; all within ``sequential_cap``.

    The CPU of the process tree (pids in ``exclude`` left out) is read around the timed calls.
    """
    recorder = Recorder(result, "sequential")
    cpu = CpuWindow(exclude)
    latencies: list[float] = []
    with anyio.move_on_after(options.sequential_cap) as scope:
        for _ in range(options.warmup):
            if recorder.aborted:
                break
            await recorder.attempt(call)
        cpu.start()
        for _ in range(options.requests):
            if recorder.aborted:
                break
            began = time.perf_counter()
            if await recorder.attempt(call):
                latencies.append((time.perf_counter() - began) * 1000.0)
    cpu.stop()
    if scope.cancelled_caught:
        result.notes.append(f"sequential phase hit its {options.sequential_cap:g} s cap")
    result.sequential_ok = len(latencies)
    if latencies:
        result.p50_ms = percentile(latencies, 0.50)
        result.p95_ms = percentile(latencies, 0.95)
    per_call = cpu.per_call_ms(len(latencies))
    if per_call is not None:
        result.sequential_cpu_ms_per_request = per_call[0]


async def concurrent(
    call: Call, options: Options, result: Result, exclude: frozenset[int] = frozenset()
) -> None:
    """``concurrency`` workers share ``total`` calls, back to back, within ``time_cap``.

    The CPU of the process tree (pids in ``exclude`` left out) is read around the phase.
    """
    recorder = Recorder(result, "throughput")
    cpu = CpuWindow(exclude)
    remaining = options.total
    ok = 0
    cpu.start()
    began = time.perf_counter()
    finished = began

    async def worker() -> None:
        nonlocal remaining, ok, finished
        while remaining > 0 and not recorder.aborted:
            remaining -= 1
            if await recorder.attempt(call):
                ok += 1
            finished = time.perf_counter()

    with anyio.move_on_after(options.time_cap) as scope:
        async with anyio.create_task_group() as tg:
            for _ in range(options.concurrency):
                tg.start_soon(worker)
    if scope.cancelled_caught:
        finished = time.perf_counter()
        result.notes.append(f"throughput phase hit its {options.time_cap:g} s cap")
    cpu.stop()
    elapsed = finished - began
    result.concurrent_ok = ok
    result.concurrent_seconds = elapsed
    if ok and elapsed > 0:
        result.rps = ok / elapsed
    per_call = cpu.per_call_ms(ok)
    if per_call is not None:
        result.cpu_ms_per_request, result.server_cpu_ms_per_request = per_call


# -- HTTP scenarios (product, a2a-sdk baseline) ---------------------------------------------------


def _dig(value: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = cast("dict[str, object]", value).get(key)
    return value


def http_call(client: httpx.AsyncClient, url: str) -> Call:
    """A blocking JSON-RPC ``SendMessage`` with a fresh message id; checks the task completed."""

    async def call() -> None:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": uuid.uuid4().hex,
                    "role": "ROLE_USER",
                    "parts": [{"text": "hi"}],
                }
            },
        }
        response = await client.post(url, json=body, headers={"A2A-Version": "1.0"})
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        answer: object = response.json()
        state = _dig(answer, "result", "task", "status", "state")
        if state != "TASK_STATE_COMPLETED":
            raise RuntimeError(f"not completed: {response.text[:200]}")

    return call


def _http_client(options: Options) -> httpx.AsyncClient:
    connections = options.concurrency + 4
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(limits=limits, timeout=CALL_TIMEOUT)


async def measure_http(url: str, options: Options, result: Result) -> None:
    async with _http_client(options) as client:
        await sequential(http_call(client, url), options, result)
    async with _http_client(options) as client:
        await concurrent(http_call(client, url), options, result)


async def run_product(options: Options, result: Result, workdir: Path) -> None:
    from harness_core import Harness, HarnessGroup, settings_from_mapping

    # The embedded default: the dev server's database goes to <workdir>/.harness/.
    settings = settings_from_mapping(
        {"agent": {"id": "bench"}, "server": {"bind": f"{LOOPBACK}:0"}}, base_dir=workdir
    )
    group = HarnessGroup(Harness(settings))
    async with anyio.create_task_group() as tg:
        try:
            with anyio.fail_after(STARTUP_CAP):
                host, port = await tg.start(group.serve)
            await measure_http(f"http://{host}:{port}/", options, result)
        finally:
            tg.cancel_scope.cancel()


def _echo_agent_app() -> Any:
    """a2a-sdk's DefaultRequestHandler with an in-memory echo executor, as a Starlette app."""
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        Part,
        Task,
        TaskState,
        TaskStatus,
    )
    from a2a.utils.errors import UnsupportedOperationError
    from starlette.applications import Starlette

    class EchoExecutor(AgentExecutor):
        """Creates the task, adds the user's text as an artifact and completes the task."""

        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            task_id = context.task_id or uuid.uuid4().hex
            context_id = context.context_id or uuid.uuid4().hex
            if context.current_task is None:
                task = Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                )
                if context.message is not None:
                    task.history.append(context.message)
                await event_queue.enqueue_event(task)
            updater = TaskUpdater(event_queue, task_id, context_id)
            text = context.get_user_input()
            await updater.add_artifact([Part(text=text)], name="result")
            await updater.complete(updater.new_agent_message([Part(text=text)]))

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise UnsupportedOperationError()

    card = AgentCard(
        name="echo",
        description="a2a-sdk in-memory echo agent (benchmark baseline)",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url="http://127.0.0.1/", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["bench"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")]
    return Starlette(routes=routes)


async def run_a2a_inmemory(options: Options, result: Result, workdir: Path) -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    # Bound and listening before Hypercorn starts: connections queue from here on, so the
    # address is known and usable at once (Hypercorn's asyncio runner reports no readiness).
    sock = socket.create_server((LOOPBACK, 0), backlog=1024)
    try:
        config = Config()
        config.bind = [f"fd://{os.dup(sock.fileno())}"]  # Hypercorn closes its own copy
        config.accesslog = None
        config.graceful_timeout = 5.0
        port: int = sock.getsockname()[1]
        stop = anyio.Event()
        app = _echo_agent_app()

        async def run_server() -> None:
            # Stopped through its shutdown trigger, never by cancellation (hypercorn#184).
            with anyio.CancelScope(shield=True):
                await serve(app, config, shutdown_trigger=stop.wait)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_server)
            try:
                await measure_http(f"http://{LOOPBACK}:{port}/", options, result)
            finally:
                stop.set()
    finally:
        sock.close()


# -- raw Temporal scenarios -----------------------------------------------------------------------


@activity.defn(name="bench_echo")
async def echo(text: str) -> str:
    return text


@workflow.defn(name="BenchEchoWorkflow")
class EchoWorkflow:
    """The smallest agent-like workflow: one regular activity, its result is the answer."""

    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(
            echo, text, start_to_close_timeout=timedelta(seconds=30)
        )


async def measure_temporal(address: str, options: Options, result: Result) -> None:
    from temporalio.client import Client
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    client: Client | None = None
    with anyio.fail_after(STARTUP_CAP):
        while client is None:
            try:
                client = await Client.connect(address)
            except RuntimeError:
                await anyio.sleep(0.1)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    connected = client

    async def call() -> None:
        answer = await connected.execute_workflow(
            EchoWorkflow.run, "hi", id=f"bench-{uuid.uuid4().hex}", task_queue=queue
        )
        if answer != "hi":
            raise RuntimeError(f"wrong answer {answer!r}")

    worker = Worker(
        client,
        task_queue=queue,
        workflows=[EchoWorkflow],
        activities=[echo],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    async with worker:
        await sequential(call, options, result)
        await concurrent(call, options, result)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def stock_dev_server() -> AsyncIterator[str]:
    """``temporal server start-dev`` with its defaults (in memory); yields its address."""
    from anyio.streams.buffered import BufferedByteReceiveStream

    binary = Path(sysconfig.get_path("scripts")) / "temporal"
    port = _free_port()
    command = [str(binary), "server", "start-dev", "--headless", "--ip", LOOPBACK]
    command += ["--port", str(port), "--log-level", "warn"]
    tail: list[str] = []

    async def drain(stream: ByteReceiveStream) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
            while True:
                await stream.receive()

    process = await anyio.open_process(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        stdout = BufferedByteReceiveStream(process.stdout)
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, process.stderr)
            try:
                with anyio.fail_after(STARTUP_CAP):
                    while True:
                        try:
                            raw = await stdout.receive_until(b"\n", 65536)
                        except (anyio.IncompleteRead, anyio.EndOfStream):
                            raise RuntimeError(
                                f"temporal exited before it was ready: {' | '.join(tail[-5:])}"
                            ) from None
                        line = raw.decode(errors="replace").strip()
                        tail.append(line)
                        if line.startswith("Temporal Server:"):
                            break
                tg.start_soon(drain, stdout)
                yield f"{LOOPBACK}:{port}"
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop_process(process)
    finally:
        with anyio.CancelScope(shield=True):
            await _stop_process(process)
            await process.aclose()


async def _stop_process(process: Process) -> None:
    """SIGTERM, up to 10 s, SIGKILL; always reaped."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        with anyio.move_on_after(10.0):
            await process.wait()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    await process.wait()


async def run_raw_stock(options: Options, result: Result, workdir: Path) -> None:
    async with stock_dev_server() as address:
        await measure_temporal(address, options, result)


async def run_raw_embedded(options: Options, result: Result, workdir: Path) -> None:
    from harness_core.embedded import open_embedded_temporal

    # open_embedded_temporal bounds its own start (start_timeout, 30 s by default).
    async with open_embedded_temporal(workdir / "temporal.sqlite3") as server:
        await measure_temporal(server.address, options, result)


# -- child: one scenario --------------------------------------------------------------------------

Runner = Callable[[Options, Result, Path], Awaitable[None]]
RUNNERS: dict[str, tuple[Runner, str]] = {
    "raw-stock": (run_raw_stock, "asyncio"),
    "raw-embedded": (run_raw_embedded, "asyncio"),
    "a2a-inmemory": (run_a2a_inmemory, "asyncio"),
    "product-asyncio": (run_product, "asyncio"),
    "product-trio": (run_product, "trio"),
}


def run_scenario(scenario: str, options: Options, workdir: Path) -> Result:
    """Run one scenario in this process; SIGINT or SIGTERM cancels it (and its cleanup runs)."""
    runner, backend = RUNNERS[scenario]
    result = Result(scenario)

    async def main() -> None:
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                # A plain SIGINT can be swallowed by AnyIO cancel scopes under asyncio. The
                # product's serve() installs its own handlers (a graceful stop); the measurement
                # then ends through MAX_CONSECUTIVE_ERRORS.
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        result.notes.append(f"interrupted by {signal.Signals(signum).name}")
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(stop_on_signal)
            await runner(options, result, workdir)
            tg.cancel_scope.cancel()

    anyio.run(main, backend=backend)
    return result


# -- parent: every scenario in its own child ------------------------------------------------------


def child_command(scenario: str, options: Options, workdir: Path) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--scenario",
        scenario,
        "--json",
        "--workdir",
        str(workdir),
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


def run_child(scenario: str, options: Options, workdir: Path) -> Result:
    """Run one scenario in a fresh interpreter, bounded; always stop and reap it."""
    cap = STARTUP_CAP + options.sequential_cap + options.time_cap + SHUTDOWN_CAP
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    # The workflow sandbox imports the workflow module anew for every workflow run; without
    # bytecode caches (PYTHONDONTWRITEBYTECODE, set on some machines) each run compiles it from
    # source, ~4 ms of CPU a task that an installed product does not pay.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    print(f"-- {scenario} ...", file=sys.stderr, flush=True)
    began = time.perf_counter()
    notes: list[str] = []
    stdout = ""
    # Its own session: a Ctrl-C on the terminal reaches only this parent, which then stops the
    # child in order; and a last-resort SIGKILL of its group reaches the child's own children.
    process = subprocess.Popen(
        child_command(scenario, options, workdir),
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
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
        f"-- {scenario} done in {time.perf_counter() - began:.1f} s (exit {process.returncode})",
        file=sys.stderr,
        flush=True,
    )
    result = Result(scenario)
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


def _stop_child(process: subprocess.Popen[str], workdir: Path) -> str:
    """SIGTERM (the child then stops its servers), SIGKILL after a grace period; reap it."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        stdout, _ = process.communicate(timeout=KILL_GRACE)
        return stdout or ""
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    stdout, _ = process.communicate()
    # An embedded dev server runs in a session of its own: find it by its state file.
    _kill_leftover_servers(workdir)
    return stdout or ""


def _kill_leftover_servers(workdir: Path) -> None:
    for state in workdir.rglob("*.server.json"):
        try:
            pid = int(json.loads(state.read_text())["pid"])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if b"start-dev" not in cmdline or str(workdir).encode() not in cmdline or pid <= 1:
            continue  # not a dev server on our files (a reused pid): leave it alone
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] not in ("Z", "X")


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def report(results: dict[str, Result]) -> list[dict[str, Any]]:
    """The ratios the product is judged by, each with its target and verdict."""
    product, trio = results["product-asyncio"], results["product-trio"]
    stock, embedded, inmemory = (
        results["raw-stock"],
        results["raw-embedded"],
        results["a2a-inmemory"],
    )
    # (name, value, target text, lower bound, upper bound); no bounds: informational.
    rows: list[tuple[str, float | None, str, float | None, float | None]] = [
        (
            "product p50 / (a) raw-stock p50",
            ratio(product.p50_ms, stock.p50_ms),
            "<= 0.5 (stretch 0.3)",
            None,
            0.5,
        ),
        (
            "product p50 / (b) raw-embedded p50",
            ratio(product.p50_ms, embedded.p50_ms),
            "<= 1.0",
            None,
            1.0,
        ),
        (
            "product req/s / (a) raw-stock req/s",
            ratio(product.rps, stock.rps),
            ">= 1.0",
            1.0,
            None,
        ),
        (
            "product-trio p50 / product-asyncio p50",
            ratio(trio.p50_ms, product.p50_ms),
            "<= 1.1",
            None,
            1.1,
        ),
        (
            "product p50 / (c) a2a-inmemory p50",
            ratio(product.p50_ms, inmemory.p50_ms),
            "informational",
            None,
            None,
        ),
        (
            "product CPU/request / (b) raw-embedded CPU/request",
            ratio(product.cpu_ms_per_request, embedded.cpu_ms_per_request),
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
            if name.endswith("raw-stock p50") and value <= 0.3:
                verdict = "met (stretch met)"
        else:
            verdict = "not met"
        out.append({"ratio": name, "value": value, "target": target, "verdict": verdict})
    return out


def print_table(results: dict[str, Result], ratios: list[dict[str, Any]], options: Options) -> None:
    print(
        f"blocking SendMessage / start+result: {options.warmup} warm-up, {options.requests} "
        f"sequential, {options.total} at concurrency {options.concurrency} "
        f"(cap {options.time_cap:g} s)"
    )
    print()
    print(
        "| scenario | p50 ms | p95 ms | req/s | CPU ms/request | of which dev server "
        "| CPU ms/request sequential | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in SCENARIOS:
        r = results[name]
        print(
            f"| {name} | {_fmt(r.p50_ms)} | {_fmt(r.p95_ms)} | {_fmt(r.rps)} "
            f"| {_fmt(r.cpu_ms_per_request)} | {_fmt(r.server_cpu_ms_per_request)} "
            f"| {_fmt(r.sequential_cpu_ms_per_request)} | {r.errors} |"
        )
    print()
    print("| ratio | value | target | verdict |")
    print("|---|---:|---|---|")
    for row in ratios:
        print(f"| {row['ratio']} | {_fmt(row['value'], 2)} | {row['target']} | {row['verdict']} |")
    notes = [(name, note) for name in SCENARIOS for note in results[name].notes]
    samples = [(name, s) for name in SCENARIOS for s in results[name].error_samples]
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
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, help="parent: run a subset")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--no-abba",
        action="store_true",
        help="run each scenario once (default: the compared ones twice, in mirrored order)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 sequential, 64 total")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up calls (default 20)")
    parser.add_argument("--requests", type=int, default=None, help="sequential calls (200)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent workers (16)")
    parser.add_argument("--total", type=int, default=None, help="calls in the throughput run (400)")
    parser.add_argument(
        "--sequential-cap", type=float, default=120.0, help="seconds for warm-up + sequential"
    )
    parser.add_argument("--time-cap", type=float, default=30.0, help="seconds for throughput")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="child: where its databases go (default: temp)"
    )
    return parser.parse_args(argv)


def options_from(args: argparse.Namespace) -> Options:
    quick: bool = args.quick

    def pick(value: int | None, normal: int, small: int) -> int:
        return value if value is not None else (small if quick else normal)

    return Options(
        warmup=pick(args.warmup, 20, 5),
        requests=pick(args.requests, 200, 20),
        concurrency=max(1, int(args.concurrency)),
        total=pick(args.total, 400, 64),
        sequential_cap=float(args.sequential_cap),
        time_cap=float(args.time_cap),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    options = options_from(args)
    if args.scenario is not None:
        with contextlib.ExitStack() as stack:
            workdir: Path | None = args.workdir
            if workdir is None:
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
            result = run_scenario(args.scenario, options, workdir)
        if args.json:
            print(json.dumps(asdict(result)), flush=True)
        else:
            print(result)
        return 0
    chosen: Sequence[str] = args.only or SCENARIOS
    results = {name: Result(name, notes=["not run"]) for name in SCENARIOS}
    # The scenarios the targets compare closely (raw-embedded, and the product on both backends)
    # run twice, in mirrored order (A B C C B A), and each is the mean of its two runs: a scenario
    # that ran later in a run measured consistently slower, whatever it was.
    mirrored = ("raw-embedded", "product-asyncio", "product-trio")
    middle = [name for name in mirrored if name in chosen]
    order = [name for name in chosen if name not in mirrored] + middle
    if len(middle) > 1 and not args.no_abba:
        order += middle[::-1]
    runs: dict[str, list[Result]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-durable-send-") as root:
        for index, name in enumerate(order):
            workdir = Path(root) / f"{index}-{name}"
            workdir.mkdir()
            runs.setdefault(name, []).append(run_child(name, options, workdir))
    for name, done in runs.items():
        results[name] = done[0] if len(done) == 1 else mean_result(done)
    ratios = report(results)
    if args.json:
        print(json.dumps({"results": [asdict(r) for r in results.values()], "ratios": ratios}))
    else:
        print_table(results, ratios, options)
    return 1 if any(results[name].failed for name in chosen) else 0


if __name__ == "__main__":
    sys.exit(main())
