"""Serve an ASGI app with Hypercorn on the running backend: the one place that picks the runner.

The listening socket is bound here, before Hypercorn starts, so ``task_status.started`` reports the
real address (also for port 0) once connections can queue, on both backends (Hypercorn's asyncio
runner has no ``task_status``).
"""

# Hypercorn types its app parameter with partially unknown protocol types.
# pyright: reportUnknownVariableType=false

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import sniffio
from anyio.abc import TaskStatus
from hypercorn.config import Config

from harness_asgi.app import card_url
from harness_core.config import split_host_port
from harness_core.errors import HarnessError

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from harness_core.group import HarnessGroup

__all__ = ["listen", "serve_group", "serve_http", "stop_reserve"]

log = logging.getLogger("harness")


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


class AccessLog:
    """One INFO line per HTTP request on ``harness.access``, when its response has been sent:
    client address, method, path (without the query string, which may carry a token), status,
    body bytes and the time taken. Hypercorn's own access log also logs a response whose client
    closed the connection at the last moment as a second line without a status."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status: list[int] = []
        sent = 0

        async def counting(message: Any) -> None:
            nonlocal sent
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            client = scope.get("client")
            where = f"{client[0]}:{client[1]}" if client else "-"
            _access.info(
                '%s "%s %s HTTP/%s" %s %d %dus',
                where,
                scope.get("method", "-"),
                scope.get("path", "-"),
                scope.get("http_version", "1.1"),
                status[0] if status else "-",
                sent,
                int((time.perf_counter() - began) * 1_000_000),
            )


_access = logging.getLogger("harness.access")


async def serve_http(
    app: Any,
    bind: str,
    graceful_timeout: float,
    shutdown_trigger: Callable[[], Awaitable[Any]],
    *,
    on_stop: Callable[[], None] | None = None,
    sock: socket.socket | None = None,
    access_log: bool = False,
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
        config.accesslog = None  # ours (AccessLog) says once what each request got
        if access_log:
            app = AccessLog(app)
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


async def serve_group(
    group: HarnessGroup, *, task_status: TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED
) -> None:
    """``HarnessGroup.serve``: start the agents, then serve HTTP with Hypercorn on the group's bind
    until cancelled or signalled (see there)."""
    app = group.asgi_app()
    for h in group.harnesses:
        h.asgi_app().drain.reset()
    # The port first: a taken port is found before Temporal and the agents start.
    sock = listen(group.bind)
    try:
        await _serve(group, app, sock, task_status)
    finally:
        sock.close()  # serve_http closes it too; this covers a failure before it ran


async def _serve(
    group: HarnessGroup,
    app: ASGIApp,
    sock: socket.socket,
    task_status: TaskStatus[tuple[str, int]],
) -> None:
    graceful = max(h.settings.server.graceful_timeout for h in group.harnesses)
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        serving = False

        def on_signal() -> None:
            stop.set()
            if not serving:  # still starting: there are no requests to drain
                tg.cancel_scope.cancel()

        if threading.current_thread() is threading.main_thread():
            await tg.start(_watch_signals, on_signal)
        await tg.start(group.run)

        def drain() -> None:
            # Requests get the grace period less what stopping the agents takes after them.
            for h in group.harnesses:
                h.asgi_app().drain.begin(max(0.0, graceful - stop_reserve(graceful)))

        async with anyio.create_task_group() as http:
            address = await http.start(
                partial(
                    serve_http,
                    on_stop=drain,
                    sock=sock,
                    access_log=any(h.settings.server.access_log for h in group.harnesses),
                ),
                app,
                group.bind,
                graceful,
                stop.wait,
            )
            serving = True
            freeze_startup_heap()
            for h in group.harnesses:
                h.bound(*address)
            log.info("serving %d agent(s) on http://%s:%d", len(group.harnesses), *address)
            for h in group.harnesses:
                log.info("agent %s: card at %s", h.agent_id, card_url(h))
            task_status.started(address)
        # Hypercorn has shut down gracefully (after a signal): now stop the agents.
        tg.cancel_scope.cancel()


_heap_frozen = False


def freeze_startup_heap() -> None:
    """Once per process, when its first group serves: collect, then move every object alive (the
    imported modules, pydantic's and Temporal's schemas, the agents' setup) to the collector's
    permanent generation (``gc.freeze``), so that full collections stop scanning them.

    A serving agent's process holds ~400,000 such objects, and each full collection walked them
    all (~150 ms of CPU on a shared core, several a minute under load). The process is the owner
    here: ``serve`` is how a process runs a fleet, while a group mounted into another app (its
    lifespan) leaves the host app's collector alone. What was alive then and becomes cyclic
    garbage later is not collected; at startup that is the long-lived part of the heap.
    """
    global _heap_frozen
    if _heap_frozen:
        return
    _heap_frozen = True
    gc.collect()
    gc.freeze()


def stop_reserve(graceful: float) -> float:
    """What of the grace period stopping the agents gets, after the HTTP requests: their workers
    (a turn still running is handed back to Temporal) and the embedded dev server (~1 s)."""
    return min(2.5, graceful / 2)


async def _watch_signals(
    on_signal: Callable[[], None], *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            log.info("received %s, shutting down", signal.Signals(signum).name)
            on_signal()
