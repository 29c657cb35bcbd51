"""One started dev server process: its output, its readiness, its stop.

:func:`spawn` starts the process in its own session with a private umask. :class:`ServerRun`
keeps its output flowing into :mod:`logging` (so its pipes never fill and block it; a warning of
the server's is logged as a warning, its expected noise at debug level), waits until it announces
itself and its port answers, and stops it (SIGTERM, then SIGKILL), always reaping it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import subprocess
from collections import deque
from pathlib import Path

import anyio
from anyio.abc import ByteReceiveStream, Process, TaskGroup

from harness_core.embedded.command import LOOPBACK
from harness_core.errors import EmbeddedTemporalError

__all__ = ["ServerRun", "spawn"]

_log = logging.getLogger("harness.temporal")

# How long our own server gets between SIGTERM and SIGKILL; a clean stop takes about 1 s.
_STOP_GRACE_SECONDS = 10.0
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
_WARNING_LINE = re.compile(r"\blevel=(?:WARN|ERROR|DPANIC|PANIC|FATAL)\b|^Error:")
# The dev server's "Slow gRPC call" for calls that wait on purpose: an update waiting for its
# workflow (a blocking SendMessage waits for the turn), a poll for an update's outcome.
_LONG_POLL = re.compile(
    r"Slow gRPC call.*(UpdateWorkflowExecution|PollWorkflowExecutionUpdate|ExecuteMultiOperation)"
)


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


async def spawn(command: list[str], binary: Path) -> Process:
    # Shielded: a start cancelled half-way (asyncio kills the new process then, but cannot wait
    # for it while the cancellation repeats) would leave a process nobody reaps.
    process: Process | None = None
    with anyio.CancelScope(shield=True):
        process = await _open(command, binary)
    assert process is not None  # the shield lets nothing swallow an error
    return process


async def _open(command: list[str], binary: Path) -> Process:
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


class ServerRun:
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
                f"the Temporal dev server did not become ready on {LOOPBACK}:{self._port} "
                f"within {within:g} s (database {self._database}); "
                f"its last output:\n{self._tail_text()}"
            ) from None

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def port_taken(self) -> bool:
        """Whether the server's last words say its gRPC port was in use (not another of its
        ports, such as a Web UI port that was asked for)."""
        taken = f"{LOOPBACK}:{self._port}: bind: address already in use"
        return any(taken in line for line in self._tail)

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
                connection = await anyio.connect_tcp(LOOPBACK, self._port)
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
