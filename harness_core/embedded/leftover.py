"""A dev server that a killed host left running on the database: found, identified, stopped.

When the host is SIGKILLed its server child survives as an orphan that still writes to the
database. The next start finds it through the state file (``<database>.server.json``), checks in
``/proc/<pid>/cmdline`` that it really is a dev server on this database (so a reused pid is never
signalled), and stops it (SIGTERM, then SIGKILL) before starting a fresh server on the same,
intact, database. It needs Linux's ``/proc``.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import anyio

from harness_core.embedded.database import read_state_pid, remove_quietly
from harness_core.errors import EmbeddedTemporalError

__all__ = ["stop_leftover_server"]

_log = logging.getLogger("harness.temporal")

# A leftover server is not our child, so we can only poll for it; give it more room than our own
# server gets between SIGTERM and SIGKILL (10 s, in ``process``).
_LEFTOVER_GRACE_SECONDS = 15.0
_KILL_WAIT_SECONDS = 5.0
_POLL_SECONDS = 0.05


async def stop_leftover_server(database: Path, state_path: Path) -> None:
    """Stop a dev server that a killed host left running on this database, if there is one."""
    pid = read_state_pid(state_path)
    if pid is None or pid == os.getpid() or not _is_dev_server_on(pid, database):
        # No state file, or the recorded server is gone, or its pid now belongs to an unrelated
        # process: nothing to stop.
        if remove_quietly(state_path):
            _log.debug("removed the stale state file %s", state_path)
        return
    _log.warning(
        "stopping the Temporal dev server (pid %d) left running on the database %s by a host "
        "that was killed; the database is kept",
        pid,
        database,
    )
    _signal_leftover(pid, signal.SIGTERM, database)
    if not await _wait_until_gone(pid, _LEFTOVER_GRACE_SECONDS):
        _log.warning(
            "the leftover Temporal dev server (pid %d) did not stop within %g s; killing it",
            pid,
            _LEFTOVER_GRACE_SECONDS,
        )
        _signal_leftover(pid, signal.SIGKILL, database)
        if not await _wait_until_gone(pid, _KILL_WAIT_SECONDS):
            raise EmbeddedTemporalError(
                f"the leftover Temporal dev server (pid {pid}) on the database {database} "
                "survived SIGKILL; stop it by hand"
            )
    remove_quietly(state_path)


def _signal_leftover(pid: int, signum: signal.Signals, database: Path) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # it ended on its own meanwhile
    except PermissionError as error:
        raise EmbeddedTemporalError(
            f"the Temporal dev server (pid {pid}) left running on the database {database} "
            "belongs to another user and cannot be stopped from here"
        ) from error


async def _wait_until_gone(pid: int, within: float) -> bool:
    # Not our child, so there is nothing to wait() on: poll. Its new parent reaps it.
    with anyio.move_on_after(within):
        while True:
            if not _is_alive(pid):
                return True
            await anyio.sleep(_POLL_SECONDS)
    return False


def _is_dev_server_on(pid: int, database: Path) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False  # gone, or no /proc: never signal what we cannot identify
    arguments = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    return (
        "server" in arguments
        and "start-dev" in arguments
        and str(database) in arguments
        and _is_alive(pid)
    )


def _is_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # The state follows the parenthesized command name, which may itself contain ")".
    # A zombie has exited; it only waits for a parent that may never reap it.
    state = stat.rpartition(")")[2].split()
    return not state or state[0] not in ("Z", "X")
