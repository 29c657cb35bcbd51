"""Serve an ASGI app with Hypercorn on the running backend: the one place that picks the runner.

The listening socket is bound here, before Hypercorn starts, so ``task_status.started`` reports the
real address (also for port 0) once connections can queue, on both backends (Hypercorn's asyncio
runner has no ``task_status``).
"""

# Hypercorn types its app parameter with partially unknown protocol types.
# pyright: reportUnknownVariableType=false

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import sniffio
from anyio.abc import TaskStatus
from hypercorn.config import Config

from harness_core.config import split_host_port
from harness_core.errors import HarnessError

__all__ = ["listen", "serve_http"]


def listen(bind: str) -> socket.socket:
    """A listening socket on ``bind``; a ``HarnessError`` naming the address when it is taken or
    not ours to bind."""
    host, port = split_host_port(bind)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=1024)
    except OSError as error:
        reason = os.strerror(error.errno) if error.errno else "cannot bind"
        raise HarnessError(
            f"cannot listen on {bind}: {reason} (is another server using the port? set "
            "[server] bind, or --bind)"
        ) from None


async def serve_http(
    app: Any,
    bind: str,
    graceful_timeout: float,
    shutdown_trigger: Callable[[], Awaitable[Any]],
    *,
    on_stop: Callable[[], None] | None = None,
    sock: socket.socket | None = None,
    task_status: TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``bind`` until ``shutdown_trigger`` returns or the caller is cancelled.

    Either way ``on_stop`` is called (the apps start draining), then Hypercorn stops accepting and
    gives in-flight requests ``graceful_timeout`` seconds before it closes them; this returns (or
    re-raises the cancellation) after that.
    """
    if sock is None:
        sock = listen(bind)
    try:
        config = Config()
        # Hypercorn wraps the descriptor in its own socket object and closes it; give it a copy.
        config.bind = [f"fd://{os.dup(sock.fileno())}"]
        config.graceful_timeout = graceful_timeout
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        actual = sock.getsockname()
        serve: Callable[..., Awaitable[None]]
        if sniffio.current_async_library() == "trio":
            from hypercorn.trio import serve as trio_serve

            serve = trio_serve
        else:
            from hypercorn.asyncio import serve as asyncio_serve

            serve = asyncio_serve
        stop = anyio.Event()

        async def run_server() -> None:
            # Hypercorn must not be cancelled mid-request (hypercorn#184: InvalidStateError); it is
            # stopped through its shutdown trigger, which drains within graceful_timeout.
            with anyio.CancelScope(shield=True):
                await serve(app, config, shutdown_trigger=stop.wait)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_server)
            task_status.started((actual[0], int(actual[1])))
            try:
                await shutdown_trigger()
            finally:
                if on_stop is not None:
                    on_stop()
                stop.set()
    finally:
        sock.close()
