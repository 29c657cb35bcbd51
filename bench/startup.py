"""Startup: how long a group of 1, 5 and 20 agents takes to become ready on the embedded default.

What is measured
----------------
``HarnessGroup(*agents).run`` (no HTTP) on one embedded dev server shared by every agent (each with
its own task queue and store), from the call until every agent is ready: the dev server's start,
then each agent's connection lease, store, worker and heartbeat schedule. The agents of a group
start at once; the time for N agents over the time for one is the figure to watch (a group that
started its agents one after another grew about linearly). Each size runs ``--runs`` times (3),
each in a fresh directory; the table shows the median. The exit code is 0 whatever the numbers.

Run from the repository root: ``PYTHONPATH=. python bench/startup.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from harness_core import Harness, HarnessGroup
from harness_core.config import settings_from_mapping


async def once(count: int) -> float:
    with tempfile.TemporaryDirectory(prefix="harness-startup-") as directory:
        base = Path(directory)
        agents = [
            Harness(settings_from_mapping({"agent": {"id": f"agent-{n}"}}, base_dir=base))
            for n in range(count)
        ]
        started = time.perf_counter()
        ready = 0.0
        async with anyio.create_task_group() as tg:
            await tg.start(HarnessGroup(*agents).run)
            ready = time.perf_counter() - started
            tg.cancel_scope.cancel()
        return ready


async def main_async(options: argparse.Namespace) -> dict[str, float]:
    results: dict[str, float] = {}
    for count in options.sizes:
        times = [await once(count) for _ in range(options.runs)]
        results[str(count)] = statistics.median(times)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    results = anyio.run(main_async, options)
    if options.json:
        print(json.dumps(results, indent=2))
        return 0
    one = results.get("1")
    print(f"{'agents':>6} {'ready s':>8} {'vs 1':>6}")
    for count, seconds in results.items():
        ratio = f"{seconds / one:6.2f}" if one else "     -"
        print(f"{count:>6} {seconds:8.2f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
