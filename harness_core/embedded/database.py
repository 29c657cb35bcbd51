"""The files of the embedded server's database: the SQLite file, its lock and the state file.

* ``<database>.lock`` carries an exclusive ``flock`` for as long as our server runs on the
  database, so two live hosts never run two servers on one SQLite file. The kernel drops the
  lock when its owner dies, even by SIGKILL.
* ``<database>.server.json`` records the server's pid and port, written atomically, so that the
  next start finds a server that a killed host left running (``leftover``).
* The database, its WAL and its shared-memory file hold workflow payloads: owner only.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path
from typing import cast

from harness_core.errors import EmbeddedServerInUse, EmbeddedTemporalError

__all__ = [
    "lock_database",
    "prepare_database",
    "read_state_pid",
    "read_state_port",
    "remove_quietly",
    "secure_database_files",
    "sibling",
    "write_state",
]

_log = logging.getLogger("harness.temporal")

# The server makes the database, its WAL and its shared-memory file with these names.
_DATABASE_SUFFIXES = ("", "-wal", "-shm")


def prepare_database(database_path: Path) -> Path:
    path = database_path.expanduser()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise EmbeddedTemporalError(
            f"cannot create the directory {path.parent} of the Temporal database {path}: "
            f"{error.strerror or error}"
        ) from error
    # Resolved, so that two spellings of one file share one lock, and the path we look for in
    # a leftover server's command line is the one we passed to it.
    path = path.resolve()
    if path.is_dir():
        raise EmbeddedTemporalError(
            f"the Temporal database {path} is a directory; pass the path of a file"
        )
    # Not created here: the dev server initializes only a missing file, and an empty one makes
    # it fail with "no such table: namespaces".
    return path


def sibling(database: Path, suffix: str) -> Path:
    return database.with_name(database.name + suffix)


def lock_database(database: Path) -> int:
    """Take the exclusive, non-blocking flock of the database and return its descriptor."""
    lock_path = sibling(database, ".lock")
    try:
        # O_CLOEXEC: the server must not inherit the lock, or it would outlive a killed host.
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise EmbeddedTemporalError(
            f"cannot open the lock file {lock_path} of the Temporal database {database}: "
            f"{error.strerror or error}"
        ) from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = _read_lock_owner(fd)
        os.close(fd)
        if owner == os.getpid():
            where = f"this process (pid {owner})"
        else:
            where = f"another process (pid {owner if owner is not None else 'unknown'})"
        raise EmbeddedServerInUse(
            f"the database {database} is in use by {where}; "
            "stop it or give this server another database",
            database=str(database),
            owner=owner,
        ) from None
    except OSError as error:
        os.close(fd)
        raise EmbeddedTemporalError(
            f"cannot lock {lock_path} for the Temporal database {database}: "
            f"{error.strerror or error}"
        ) from error
    # The file is left in place on exit: deleting a lock file races with its next taker.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _read_lock_owner(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None  # the owner took the lock and has not written its pid yet


def secure_database_files(database: Path) -> None:
    # The umask covers files the server creates; this also covers a database created before.
    for suffix in _DATABASE_SUFFIXES:
        path = sibling(database, suffix)
        try:
            path.chmod(0o600)
        except FileNotFoundError:
            pass  # the WAL and shm files exist only while the database is open in WAL mode
        except OSError as error:
            # The server runs fine; refusing to serve over file modes would help no one.
            _log.warning("cannot make %s private (mode 0o600): %s", path, error.strerror or error)


def write_state(state_path: Path, *, pid: int, port: int, database: Path) -> None:
    text = json.dumps({"pid": pid, "port": port, "database": str(database)})
    temporary = sibling(state_path, ".tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        # Atomic, so that a host killed mid-write never leaves half a file for the next start.
        temporary.replace(state_path)
    except OSError as error:
        raise EmbeddedTemporalError(
            f"cannot write the state file {state_path} of the Temporal database {database}: "
            f"{error.strerror or error}"
        ) from error


def read_state_port(state_path: Path) -> int | None:
    """The port in the state file, or None."""
    try:
        state: object = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    port = cast("dict[object, object]", state).get("port") if isinstance(state, dict) else None
    if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
        return port
    return None


def read_state_pid(state_path: Path) -> int | None:
    try:
        state: object = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    pid = cast("dict[object, object]", state).get("pid")
    # pid 0 and negative pids address whole process groups in kill(2): never signal those.
    if isinstance(pid, int) and not isinstance(pid, bool) and pid > 1:
        return pid
    return None


def remove_quietly(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
