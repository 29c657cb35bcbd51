"""Delegation: the latency a local delegation adds over calling the target directly.

What is measured
----------------
Two agents in one group on the embedded default (asyncio, Hypercorn, loopback): ``b`` answers at
once; ``a``'s first turn delegates the message to ``b`` and its second turn answers with what ``b``
said. A client sends blocking JSON-RPC ``SendMessage`` calls, ``--requests`` (50) of each, in
interleaved order:

* ``direct``: to ``b``: the baseline, one durable task and one turn.
* ``start``: to ``b`` with ``returnImmediately``: what starting one durable task costs. Its turn
  runs on after the answer: the next call waits (untimed) until that task completed, so the turn
  runs into no measured call (``--no-settle``: it does not wait, as before 2026-12-04).
* ``delegated``: to ``a``: a's task, a's turn, a blocking send to ``b`` over A2A within a's
  workflow task (``b``'s task and turn; ``[delegation] block_for``), then a's second turn.

Each is run twice: with pushes from ``b`` to ``a`` (``[push] allow_hosts`` names loopback), and
following ``b``'s task (``RouteOptions(push=False)``).

The target: delegated p50 at most 1.5x (direct p50 + start p50). The exit code is 0 whatever the
numbers.

Run from the repository root: ``PYTHONPATH=. python bench/delegation.py`` (``--quick``: 10 of each).
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

from harness_core import (
    Complete,
    Delegate,
    Delegation,
    Harness,
    HarnessGroup,
    RouteOptions,
    TurnContext,
)
from harness_core.agents.turn import TurnResult
from harness_core.config import settings_from_mapping


async def agent_b(ctx: TurnContext) -> TurnResult:
    return Complete(f"b: {ctx.new_messages[-1].text}")


async def agent_a(ctx: TurnContext) -> TurnResult:
    if ctx.number == 1:
        return Delegate(Delegation("b", ctx.new_messages[-1].text))
    return Complete(f"a heard {ctx.new_messages[-1].text}")


def body(text: str, *, immediately: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {
        "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    }
    if immediately:
        params["configuration"] = {"returnImmediately": True}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}


async def timed(http: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> float:
    return (await call(http, url, payload))[0]


async def call(
    http: httpx.AsyncClient, url: str, payload: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    answer = await http.post(url, json=payload)
    elapsed = time.perf_counter() - started
    result = answer.json().get("result")
    if answer.status_code != 200 or result is None:
        raise RuntimeError(f"{url}: {answer.status_code} {answer.text[:200]}")
    return elapsed, result


async def settled(http: httpx.AsyncClient, url: str, task_id: str) -> None:
    """Wait (untimed, at most 10 s) until a task started with ``returnImmediately`` completed:
    its turn then runs into no measured call."""
    payload = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
    with anyio.move_on_after(10):
        while True:
            answer = (await http.post(url, json=payload)).json().get("result") or {}
            if answer.get("status", {}).get("state") == "TASK_STATE_COMPLETED":
                return
            await anyio.sleep(0.005)


async def scenario(push: bool, options: argparse.Namespace) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="harness-delegation-") as directory:
        base = Path(directory)
        harnesses = [
            Harness(
                settings_from_mapping(
                    {
                        "agent": {"id": name},
                        "server": {"bind": "127.0.0.1:0"},
                        "push": {"agent_hosts": ["127.0.0.1"]},
                    },
                    base_dir=base,
                ),
                agent=agent,
                prefix=f"/agents/{name}",
                routes=RouteOptions(push=push),
            )
            for name, agent in (("a", agent_a), ("b", agent_b))
        ]
        times: dict[str, list[float]] = {"direct": [], "start": [], "delegated": []}
        async with anyio.create_task_group() as tg:
            host, port = await tg.start(HarnessGroup(*harnesses).serve)
            root = f"http://{host}:{port}/agents"
            headers = {"A2A-Version": "1.0"}
            async with httpx.AsyncClient(timeout=60, headers=headers) as http:
                for _ in range(3):  # warm-up
                    await timed(http, f"{root}/a/", body("warm"))
                    await timed(http, f"{root}/b/", body("warm"))
                for _ in range(options.requests):
                    times["direct"].append(await timed(http, f"{root}/b/", body("hi")))
                    elapsed, started = await call(http, f"{root}/b/", body("hi", immediately=True))
                    times["start"].append(elapsed)
                    if options.settle:
                        await settled(http, f"{root}/b/", started["task"]["id"])
                    times["delegated"].append(await timed(http, f"{root}/a/", body("hi")))
            tg.cancel_scope.cancel()
        return times


async def main_async(options: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for push in (True, False):
        times = await scenario(push, options)
        p50 = {name: 1000 * statistics.median(values) for name, values in times.items()}
        report["push" if push else "follow"] = {
            "p50_ms": p50,
            "delegated / (direct + start)": p50["delegated"] / (p50["direct"] + p50["start"]),
            "delegated / direct": p50["delegated"] / p50["direct"],
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="10 of each")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--no-settle",
        dest="settle",
        action="store_false",
        help="do not wait for a started task's turn before the next call (as before 2026-12-04)",
    )
    options = parser.parse_args(argv)
    if options.quick:
        options.requests = 10
    report = anyio.run(main_async, options)
    if options.json:
        print(json.dumps(report, indent=2))
        return 0
    for mode, row in report.items():
        p50 = row["p50_ms"]
        print(
            f"{mode:7} direct {p50['direct']:.1f} ms, start {p50['start']:.1f} ms, "
            f"delegated {p50['delegated']:.1f} ms; delegated / (direct + start) = "
            f"{row['delegated / (direct + start)']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
