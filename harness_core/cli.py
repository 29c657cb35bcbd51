"""The ``harness`` command: ``serve`` a fleet of agents, or ``check`` their configuration.

Configuration errors print one line (no traceback) and exit 2; a failure to start prints one line and
exits 1; SIGINT or SIGTERM stop a running ``serve`` cleanly with exit code 0.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from harness_core.errors import ConfigError, HarnessConflictError, HarnessError

if TYPE_CHECKING:
    from harness_core.config import Settings

__all__ = ["main"]

log = logging.getLogger("harness")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness", description="Run durable A2A agents on Temporal."
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print the versions of harness and its core"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run agents and serve them over HTTP")
    serve.add_argument("configs", nargs="+", metavar="CONFIG", help="one TOML file per agent")
    serve.add_argument("--bind", metavar="HOST:PORT", help="override [server] bind")
    serve.add_argument(
        "--temporal-address",
        metavar="HOST:PORT",
        help="use this Temporal service (plain gRPC) instead of each agent's [temporal] section, "
        "e.g. a Temporal container",
    )
    serve.add_argument(
        "--public-url",
        metavar="URL",
        help="where clients reach this server (overrides [server] base_url; with several agents, "
        "each is at <URL>/agents/<id>)",
    )
    serve.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    serve.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    serve.add_argument(
        "--log-format",
        default="text",
        choices=("text", "json"),
        help="json: one object per line, with the agent each line is about",
    )
    check = commands.add_parser("check", help="validate configuration and print what would run")
    check.add_argument("configs", nargs="+", metavar="CONFIG")
    return parser


class _Version(argparse.Action):
    """``--version`` on one line (argparse's own action wraps it to the terminal's width)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_version())
        parser.exit()


def _version() -> str:
    """``harness <version> (temporalio <v>, a2a-sdk <v>, Python <v>)``: what a bug report needs."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    python = ".".join(str(n) for n in sys.version_info[:3])
    return (
        f"harness {of('a2a-harness')} (temporalio {of('temporalio')}, a2a-sdk {of('a2a-sdk')}, "
        f"hypercorn {of('hypercorn')}, Python {python})"
    )


def _load(paths: Sequence[str]) -> list[Settings]:
    from harness_core.claims import claims
    from harness_core.config import load_settings

    # Your own modules (a factory, tools) import from the directory `harness` runs in, as with
    # `python -m` or uvicorn; the `harness` script alone would only see installed packages.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())

    settings = [load_settings(p) for p in paths]
    # The same clashes the group refuses at start, found without starting anything.
    with contextlib.ExitStack() as held:
        for s, path in zip(settings, paths, strict=True):
            held.enter_context(claims.hold(s, f"{path}"))
    namespaces: dict[object, tuple[str, str]] = {}
    for s, path in zip(settings, paths, strict=True):
        if s.temporal.mode != "embedded":
            continue
        first = namespaces.setdefault(s.database_path, (s.temporal.namespace, path))
        if first[0] != s.temporal.namespace:
            raise ConfigError(
                f"{path}: agents that share the embedded database {s.database_path} must use one "
                f"namespace ({first[1]} uses {first[0]!r}, this file {s.temporal.namespace!r})"
            )
    return settings


def describe(settings: Settings, *, bind: str | None = None, path: str = "") -> str:
    """What ``serve`` would run for one agent, in a few lines (no secrets).

    ``bind`` and ``path`` say where the group's HTTP server serves the agent when it serves
    several.
    """
    from harness_core.urls import public_url

    bind = bind or settings.server.bind
    base = settings.base_url if settings.server.base_url else f"http://{bind}"
    public = public_url(base, path)  # the disagreement serve would refuse, found here
    t = settings.temporal
    if t.mode == "embedded":
        temporal = f"embedded dev server, database {settings.database_path}"
    else:
        key = f", API key from ${t.api_key_env}" if t.api_key_env else ""
        temporal = f"remote {t.address}{key}"
    lines = [
        f"agent {settings.agent_id} ({settings.agent_name})",
        f"  temporal: {temporal}, namespace {t.namespace}, task queue "
        f"{settings.effective_task_queue}",
        f"  store:    {_store_line(settings)}",
        *([f"  payloads: object store {settings.store.blobs}"] if settings.store.blobs else []),
        f"  http:     {bind}, public URL {public}",
        f"  model:    {settings.model.kind}",
    ]
    if settings.agent.plugins:
        lines.append(f"  plugins:  {', '.join(settings.agent.plugins)}")
    if settings.mcp:
        servers = ", ".join(f"{m.id} ({m.command or m.url})" for m in settings.mcp)
        lines.append(f"  mcp:      {servers} (reached when serve starts)")
    return "\n".join(lines)


def _shared_server_notes(settings: Sequence[Settings], bind: str | None) -> list[str]:
    """Several agents share one HTTP server: say where, and which ``bind`` values go unused."""
    if len(settings) < 2:
        return []
    used = bind or settings[0].server.bind
    notes = [f"one HTTP server on {used}; each agent under /agents/<id>"]
    notes.extend(
        f"agent {s.agent_id}: [server] bind {s.server.bind} is not used (the agents share {used})"
        for s in (settings if bind else settings[1:])
        if s.server.bind != used
    )
    return notes


def _check(paths: Sequence[str]) -> int:
    from harness_core.group import HarnessGroup
    from harness_core.harness import Harness

    settings = _load(paths)
    # What serve builds before it starts anything: the factory or the model loop with its tools
    # and the models extra. Nothing is started, connected or written.
    # The group too: it checks what one agent names of the others ([model] agents).
    HarnessGroup(*(Harness(s) for s in settings))
    several = len(settings) > 1
    for s in settings:
        if several:
            print(describe(s, bind=settings[0].server.bind, path=f"/agents/{s.agent_id}"))
        else:
            print(describe(s))
    for note in _shared_server_notes(settings, None):
        print(f"note: {note}")
    print(
        f"ok: {len(paths)} agent(s): configuration, factories, tools and extras checked; "
        "not checked: reaching Temporal, a PostgreSQL or object store, the model server or "
        "other agents (serve does)"
    )
    return 0


def _overridden(
    settings: list[Settings], temporal: str | None, public: str | None
) -> list[Settings]:
    """The settings with ``--temporal-address`` and ``--public-url`` applied (a container's
    configuration, without editing the files)."""
    import attrs

    from harness_core.config import split_host_port
    from harness_core.config.values import url_problem

    if temporal is not None:
        try:
            split_host_port(temporal)
        except ValueError as exc:
            raise ConfigError(f"--temporal-address {temporal!r}: {exc}") from None
        settings = [
            attrs.evolve(
                s,
                temporal=attrs.evolve(
                    s.temporal, mode="remote", address=temporal, api_key_env=None, tls=None
                ),
            )
            for s in settings
        ]
    if public is not None:
        problem = url_problem(public.rstrip("/"))
        if problem is not None:
            raise ConfigError(f"--public-url {public!r}: {problem}")
        several = len(settings) > 1
        settings = [
            attrs.evolve(
                s,
                server=attrs.evolve(
                    s.server,
                    base_url=public.rstrip("/") + (f"/agents/{s.agent_id}" if several else ""),
                ),
            )
            for s in settings
        ]
    return settings


def _serve(args: argparse.Namespace) -> int:
    from harness_core.logs import configure_logging

    configure_logging(args.log_level, fmt=args.log_format)
    import anyio

    from harness_core.group import HarnessGroup
    from harness_core.harness import Harness

    settings = _overridden(_load(args.configs), args.temporal_address, args.public_url)
    notes = _shared_server_notes(settings, args.bind)
    for note in notes[:1]:
        log.info(note)
    for note in notes[1:]:
        log.warning(note)
    from harness_core import telemetry

    group = HarnessGroup(*(Harness(s) for s in settings), bind=args.bind)
    telemetry.configure_from_env()
    try:
        anyio.run(group.serve, backend=args.backend)
    finally:
        telemetry.shutdown()  # the spans still batched go out before the process ends
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    finally:
        _let_native_threads_leave_python()


def _main(argv: Sequence[str] | None) -> int:
    # The heavy imports happen in here, inside the try: a Ctrl-C while they run exits quietly.
    # Signals are handled by `serve` from its first step, before anything has started; until then
    # SIGTERM's default (exit at once) loses nothing.
    try:
        args = _parser().parse_args(argv)
        if args.command == "check":
            return _check(args.configs)
        return _serve(args)
    except (ConfigError, HarnessConflictError) as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 2
    except HarnessError as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BaseExceptionGroup as group:  # a start failure inside the group's task group
        first = _first_leaf(group)
        if isinstance(first, KeyboardInterrupt):
            return 130
        if isinstance(first, HarnessError):
            log.debug("the failure in full", exc_info=first)
            print(f"harness: {first}", file=sys.stderr)
            return 2 if isinstance(first, ConfigError | HarnessConflictError) else 1
        return _failed(first)
    except Exception as exc:
        return _failed(exc)


def _failed(exc: BaseException) -> int:
    """One line for a failure the runtime did not foresee; the traceback only with
    --log-level DEBUG."""
    from harness_core.secrets import SECRETS

    log.debug("the failure in full", exc_info=exc)
    print(SECRETS.redact(f"harness: failed: {type(exc).__name__}: {exc}"), file=sys.stderr)
    return 1


# How long the exit waits for native threads to finish the Python call they are in.
_NATIVE_THREADS_GRACE = 2.0


def _let_native_threads_leave_python() -> None:
    """Before the interpreter finalizes, wait (bounded) until no native thread is inside Python.

    The Temporal client's Rust runtime hands each result to the event loop from a thread of its
    own: the thread takes the GIL and calls ``loop.call_soon_threadsafe``, which lets the GIL go
    while it writes the loop's wake-up byte. The main thread can take the result, fail and start
    finalizing before that thread has the GIL back; given the GIL during finalization, the thread
    is made to exit, and on its way out it releases a thread state that is no longer current:
    ``Fatal Python error: PyGILState_Release``, exit 134 (after a failed ``Client.connect``, about
    one run in twenty). Sleeping lets such a thread take the GIL and finish its call.
    """
    deadline = time.monotonic() + _NATIVE_THREADS_GRACE
    while _native_threads_in_python() and time.monotonic() < deadline:
        time.sleep(0.001)


def _native_threads_in_python() -> list[int]:
    """The ids of threads not started by Python that are running Python code (or waiting for the
    GIL in the middle of it)."""
    started = {
        t.ident
        for t in threading.enumerate()
        if not isinstance(t, threading._DummyThread)  # pyright: ignore[reportPrivateUsage]
    }
    return [ident for ident in sys._current_frames() if ident not in started]  # pyright: ignore[reportPrivateUsage]


def _first_leaf(exc: BaseException) -> BaseException:
    leaf: BaseException = exc
    while isinstance(leaf, BaseExceptionGroup):
        inner = cast("tuple[BaseException, ...]", leaf.exceptions)  # pyright: ignore[reportUnknownMemberType]
        if not inner:
            break
        leaf = inner[0]
    return cast("BaseException", leaf)


def _store_line(settings: Settings) -> str:
    """The store as ``harness check`` names it (a PostgreSQL URL never holds its password)."""
    store = settings.store
    if store.url is None:
        return str(settings.store_path)
    password = f", password from ${store.password_env}" if store.password_env else ""
    return f"PostgreSQL {store.url}, schema {settings.store_schema}{password}"


if __name__ == "__main__":
    sys.exit(main())
