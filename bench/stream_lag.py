"""Stream lag: the time from an event's emission in a turn to its arrival at a streaming A2A client.

What is measured
----------------
One agent on the embedded default (dev server, worker, Hypercorn, asyncio) whose turn emits
``--events`` progress updates ``--spacing`` seconds apart (each carrying the ``time.perf_counter()``
of its emission), then completes. A client on loopback sends ``SendStreamingMessage`` over JSON-RPC
and reads the SSE stream with httpx; for every progress update it records ``arrival - emission``
(the same process and clock). ``--tasks`` streams in a row per scenario. The scenarios:

* ``live``: the product as shipped: the turn's events reach the stream through the in-process
  fan-out (``harness_core.live``) at once; their durable copy follows at the turn's end.
* ``polled``: the same agent with ``RouteOptions(live=False)``: streams follow the durable event
  log only, polled (20 ms, backing off to 500 ms), which is how the runtime streamed before, and how
  a stream served by another process still does. A progress update becomes durable when its turn
  ends, so it waits for the rest of the turn, then for a poll.
* ``poll-250ms`` (reference, not run): the issue's yardstick is "a 250 ms poll", whose mean wait is
  125 ms even for an event that is durable the moment it is emitted.

Scenarios run in mirrored order (live, polled, polled, live) and each reports the mean of its two
runs, so drift of a shared machine does not favour one. The exit code is 0 whatever the numbers.

Run from the repository root: ``PYTHONPATH=. python bench/stream_lag.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
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

from harness_core import Complete, Harness, HarnessGroup, RouteOptions, TurnContext
from harness_core.agents.turn import TurnResult
from harness_core.config import settings_from_mapping

POLL_REFERENCE = 0.250


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


def make_agent(events: int, spacing: float):
    async def agent(ctx: TurnContext) -> TurnResult:
        for n in range(events):
            await ctx.progress(f"tick:{n}", f"{time.perf_counter()!r}")
            await anyio.sleep(spacing)
        return Complete("done")

    return agent


async def one_stream(client: httpx.AsyncClient, url: str) -> list[float]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {
            "message": {
                "messageId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": "go"}],
            }
        },
    }
    lags: list[float] = []
    async with client.stream("POST", f"{url}/", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            now = time.perf_counter()
            result: dict[str, Any] = json.loads(line[5:]).get("result", {})
            status = result.get("statusUpdate", {}).get("status", {})
            message = status.get("message", {})
            if ":tick:" in message.get("messageId", ""):
                lags.append(now - float(message["parts"][0]["text"]))
    return lags


async def scenario(live: bool, options: argparse.Namespace, workdir: Path) -> list[float]:
    settings = settings_from_mapping(
        {
            "agent": {"id": f"lag-{'live' if live else 'polled'}"},
            "server": {"bind": "127.0.0.1:0"},
            "model": {"turn_timeout": "60s"},
        },
        base_dir=workdir,
    )
    harness = Harness(
        settings,
        agent=make_agent(options.events, options.spacing),
        routes=RouteOptions(live=live),
    )
    lags: list[float] = []
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(HarnessGroup(harness).serve)
        url = f"http://{host}:{port}"
        headers = {"A2A-Version": "1.0"}
        async with httpx.AsyncClient(timeout=60, headers=headers) as client:
            for _ in range(options.tasks):
                lags.extend(await one_stream(client, url))
        tg.cancel_scope.cancel()
    return lags


async def main_async(options: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, list[float]] = {"live": [], "polled": []}
    with tempfile.TemporaryDirectory(prefix="harness-lag-") as directory:
        workdir = Path(directory)
        for name in ("live", "polled", "polled", "live"):
            results[name].extend(await scenario(name == "live", options, workdir))
    report: dict[str, Any] = {}
    for name, lags in results.items():
        report[name] = {
            "events": len(lags),
            "p50_ms": 1000 * statistics.median(lags),
            "p95_ms": 1000 * percentile(lags, 0.95),
        }
    live_p50 = report["live"]["p50_ms"]
    report["ratios"] = {
        "live_p50 / polled_p50": live_p50 / report["polled"]["p50_ms"],
        "live_p50 / 250ms_poll": live_p50 / (1000 * POLL_REFERENCE),
    }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--events", type=int, default=10, help="progress updates per turn")
    parser.add_argument("--spacing", type=float, default=0.1, help="seconds between them")
    parser.add_argument("--tasks", type=int, default=10, help="streams per scenario run")
    parser.add_argument("--quick", action="store_true", help="3 streams of 5 events")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    options = parser.parse_args(argv)
    if options.quick:
        options.tasks, options.events = 3, 5
    report = anyio.run(main_async, options)
    if options.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'scenario':10} {'events':>7} {'p50 ms':>9} {'p95 ms':>9}")
    for name in ("live", "polled"):
        row = report[name]
        print(f"{name:10} {row['events']:7d} {row['p50_ms']:9.1f} {row['p95_ms']:9.1f}")
    for name, value in report["ratios"].items():
        print(f"{name}: {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
