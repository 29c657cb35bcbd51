"""Steady load on the embedded default, and the memory of its Temporal dev server over time.

A group of one agent (echo model) served by Hypercorn on the embedded default, and ``--clients``
workers sending blocking JSON-RPC ``SendMessage`` calls back to back (each a new task), for
``--minutes``. Every ``--every`` seconds it samples the resident memory (VmRSS) of the dev server
and of this process, and prints one line; at the end a summary: memory after the warm-up minute,
at the end, and the slope over the second half (MB a minute). Loopback only; the load stops by
itself at the time limit; the group (and so the dev server) is stopped at the end, also on Ctrl-C.

    PYTHONPATH=. python bench/soak.py --minutes 20
    PYTHONPATH=. python bench/soak.py --minutes 2 --every 10   # a short look
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import anyio
import httpx

LOOPBACK = "127.0.0.1"


def rss_mb(pid: int) -> float:
    """Resident memory of a process, in MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def dev_server_pid(database: Path) -> int | None:
    """The dev server serving ``database`` (found by its command line)."""
    wanted = str(database)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"start-dev" in argv and wanted.encode() in argv:
            return int(entry.name)
    return None


async def soak(minutes: float, clients: int, every: float, workdir: Path) -> dict[str, object]:
    from bench.durable_send import http_call
    from harness_core import Harness, HarnessGroup, settings_from_mapping

    settings = settings_from_mapping(
        {"agent": {"id": "soak"}, "server": {"bind": f"{LOOPBACK}:0"}}, base_dir=workdir
    )
    group = HarnessGroup(Harness(settings))
    samples: list[tuple[float, float, float, int]] = []  # (minute, server MB, own MB, calls)
    calls = 0
    errors = 0
    async with anyio.create_task_group() as tg:
        try:
            with anyio.fail_after(60):
                host, port = await tg.start(group.serve)
            url = f"http://{host}:{port}/"
            pid = dev_server_pid(settings.database_path)
            if pid is None:
                raise RuntimeError("the embedded dev server was not found")
            began = time.monotonic()
            deadline = began + minutes * 60

            async def worker() -> None:
                nonlocal calls, errors
                async with httpx.AsyncClient(timeout=30) as http:
                    call = http_call(http, url)
                    while time.monotonic() < deadline:
                        try:
                            await call()
                            ok = True
                        except (httpx.HTTPError, RuntimeError):
                            ok = False
                        calls += ok
                        errors += not ok

            async def sampler() -> None:
                while time.monotonic() < deadline:
                    minute = (time.monotonic() - began) / 60
                    sample = (minute, rss_mb(pid), rss_mb(os.getpid()), calls)
                    samples.append(sample)
                    print(
                        f"{sample[0]:6.2f} min  server {sample[1]:7.1f} MB  "
                        f"harness {sample[2]:7.1f} MB  calls {sample[3]}",
                        flush=True,
                    )
                    await anyio.sleep(every)

            async with anyio.create_task_group() as load:
                for _ in range(clients):
                    load.start_soon(worker)
                load.start_soon(sampler)
            samples.append(
                ((time.monotonic() - began) / 60, rss_mb(pid), rss_mb(os.getpid()), calls)
            )
        finally:
            tg.cancel_scope.cancel()
    warm = next((s for s in samples if s[0] >= 1.0), samples[0])
    half = [s for s in samples if s[0] >= minutes / 2]
    slope = (half[-1][1] - half[0][1]) / max(half[-1][0] - half[0][0], 1e-9) if len(half) > 1 else 0
    return {
        "minutes": minutes,
        "clients": clients,
        "calls": calls,
        "errors": errors,
        "server_mb_after_warmup": round(warm[1], 1),
        "server_mb_end": round(samples[-1][1], 1),
        "server_mb_max": round(max(s[1] for s in samples), 1),
        "server_slope_mb_per_min_second_half": round(slope, 2),
        "harness_mb_end": round(samples[-1][2], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="steady load, and the dev server's memory")
    parser.add_argument("--minutes", type=float, default=20.0, help="how long the load runs (20)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent senders (8)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples (30)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-soak-") as workdir:
        summary = anyio.run(soak, options.minutes, options.clients, options.every, Path(workdir))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
