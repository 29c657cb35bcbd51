"""The embedded server's lifetime: :func:`open_embedded_temporal` and :class:`EmbeddedServer`.

The context manager takes the database's lock, stops a server left running on it, starts the
dev server, watches it (starting it again on the same port and database, with backoff, when it
dies), and stops it on exit, on error and on cancellation.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskGroup

from harness_core.embedded.command import (
    LOOPBACK,
    find_temporal_binary,
    free_port,
    server_command,
)
from harness_core.embedded.database import (
    lock_database,
    prepare_database,
    remove_quietly,
    secure_database_files,
    sibling,
    write_state,
)
from harness_core.embedded.leftover import stop_leftover_server
from harness_core.embedded.process import ServerRun, spawn
from harness_core.errors import EmbeddedTemporalError

__all__ = ["EmbeddedServer", "open_embedded_temporal"]

_log = logging.getLogger("harness.temporal")


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


@contextlib.asynccontextmanager
async def open_embedded_temporal(
    database_path: Path,
    *,
    namespaces: Sequence[str] = ("default",),
    start_timeout: float = 30.0,
    ui_port: int = 0,
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

    ``ui_port``: serve Temporal's Web UI on that loopback port too (0: no UI).
    """
    binary = find_temporal_binary()
    database = prepare_database(database_path)
    lock_fd = lock_database(database)
    try:
        state_path = sibling(database, ".server.json")
        await stop_leftover_server(database, state_path)
        port = free_port()
        command = server_command(binary, database, port, namespaces, ui_port)
        _log.debug("starting %s", shlex.join(command))
        run = ServerRun(await spawn(command, binary), database, port)
        runs = [run]  # the current one last; a restart or a new port adds one
        closing = False
        # Exceptions leaving a task group arrive wrapped in an exception group. The only one
        # here is normally the caller's own (or ours from startup), so it is unwrapped below to
        # reach the caller exactly as it was raised.
        sole: BaseException | None = None
        try:
            async with anyio.create_task_group() as task_group:
                try:
                    tried = [port]
                    while True:
                        # Written before readiness so that a host killed during startup still
                        # leaves a trace of its server for the next start to find.
                        write_state(state_path, pid=run.pid, port=port, database=database)
                        try:
                            await run.wait_until_ready(task_group, start_timeout)
                            break
                        except EmbeddedTemporalError as error:
                            if not run.port_taken:
                                raise
                            if len(tried) == _PORT_ATTEMPTS:
                                ports = ", ".join(map(str, tried))
                                raise EmbeddedTemporalError(
                                    f"{error} (ports tried, each taken by another process "
                                    f"before the server bound it: {ports})"
                                ) from None
                        # Another process bound the port between our probe and the server.
                        _log.info(
                            "port %d was taken as the dev server started; trying another", port
                        )
                        await run.stop()
                        await anyio.lowlevel.checkpoint()  # closed meanwhile: start no other
                        port = free_port()
                        tried.append(port)
                        command = server_command(binary, database, port, namespaces, ui_port)
                        run = ServerRun(await spawn(command, binary), database, port)
                        runs.append(run)
                    secure_database_files(database)
                    address = f"{LOOPBACK}:{port}"
                    _log.info("embedded Temporal dev server on %s (database %s)", address, database)
                    if ui_port:
                        _log.info(
                            "Temporal Web UI on http://%s:%d (a task is the workflow whose id is "
                            "the task's id)",
                            LOOPBACK,
                            ui_port,
                        )
                    server = EmbeddedServer(address=address, database_path=database, pid=run.pid)

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
                            write_state(
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
            remove_quietly(state_path)
        if sole is not None:
            try:
                raise sole
            finally:
                del sole
    finally:
        # Last of all, so that no other host starts on the database while our server still runs.
        os.close(lock_fd)


#: Ports tried in all when the one probed free is taken before the server binds it.
_PORT_ATTEMPTS = 3

#: Waits between attempts to start a dead dev server again.
_RESTART_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


async def _restart(
    command: list[str],
    binary: Path,
    database: Path,
    port: int,
    task_group: TaskGroup,
    start_timeout: float,
) -> ServerRun:
    """Start the server again on the same port and database, until it is ready, with backoff."""
    attempt = 0
    while True:
        await anyio.sleep(_RESTART_DELAYS[min(attempt, len(_RESTART_DELAYS) - 1)])
        attempt += 1
        run = ServerRun(await spawn(command, binary), database, port)
        try:
            await run.wait_until_ready(task_group, start_timeout)
            return run
        except EmbeddedTemporalError as error:
            _log.error("starting the dev server again failed (attempt %d): %s", attempt, error)
            await run.stop()
        except BaseException:
            # Closed (cancelled) while the new process starts: it is ours to stop, and its
            # shielded output pumps end only once it is gone.
            await run.stop()
            raise
