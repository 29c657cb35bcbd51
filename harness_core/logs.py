"""Logging for a process that hosts several agents: the agent on every line, text or JSON, no secrets.

Every record carries the agent it was written for (:data:`current_agent`, set by
:func:`agent_context` around a request and by :class:`AgentContextInterceptor` around an activity),
and both formatters pass their whole output through :data:`harness_core.secrets.SECRETS`, so a line
written for one agent masks every agent's secrets.

Workflows must not use this module: they run in Temporal's sandbox, log through
``temporalio.workflow.logger`` and must stay deterministic. Only activities and the host do.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import json
import logging
import sys
import threading
import traceback
from collections.abc import Callable, Generator
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from harness_core import telemetry
from harness_core.errors import ConfigError
from harness_core.secrets import SECRETS

__all__ = [
    "TEXT_FORMAT",
    "AgentContextInterceptor",
    "AgentFilter",
    "JsonFormatter",
    "RedactingFormatter",
    "agent_context",
    "configure_logging",
    "current_agent",
    "install_record_redaction",
    "quiet_client_errors",
]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(agent)s] %(message)s"
"""The line format of ``fmt="text"``; ``%(agent)s`` is ``-`` when a line belongs to no agent."""

current_agent: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "harness_current_agent", default=None
)
"""The id of the agent the running request or activity is for, or None outside any."""

# Third-party loggers that drown the harness's own lines at INFO; they stay at WARNING unless the
# harness itself logs at DEBUG.
_NOISY = ("temporalio", "httpx", "a2a.client")


@contextlib.contextmanager
def agent_context(agent_id: str) -> Generator[None, None, None]:
    """Make ``agent_id`` the :data:`current_agent` inside the block, and restore the previous one after.

    Enter and exit in the same task or thread (a ``ContextVar`` token cannot be reset elsewhere).
    """
    token = current_agent.set(agent_id)
    try:
        yield
    finally:
        current_agent.reset(token)


_factory_lock = threading.Lock()
_factory_installed = False


def install_record_redaction() -> None:
    """Mask every agent's secrets in every log record of the process, whatever its handlers.

    ``configure_logging`` is optional (a host app has its own logging), so the masking cannot live
    in a formatter only: this wraps the process's LogRecord factory, once. Each new record gets its
    ``agent`` (the :data:`current_agent`), and, while any secret is registered, a message or
    traceback that holds one is replaced by its masked text. Idempotent; the wrapper stays.
    """
    global _factory_installed
    with _factory_lock:
        if _factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            record.agent = current_agent.get()
            if SECRETS.values():
                _mask_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _factory_installed = True


#: The A2A SDK logs every client error it answers (a task not found, a bad parameter) at WARNING;
#: they are the client's mistakes, not the server's trouble.
_CLIENT_ERROR_LOGGERS = ("a2a.server.routes.jsonrpc_dispatcher", "a2a.utils.error_handlers")


class _ClientErrorsAtInfo(logging.Filter):
    """Lowers the SDK's WARNING about a client error to INFO (its internal errors stay ERROR)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING:
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def quiet_client_errors() -> None:
    """Log the SDK's client errors at INFO. Idempotent."""
    for name in _CLIENT_ERROR_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ClientErrorsAtInfo) for f in logger.filters):
            logger.addFilter(_ClientErrorsAtInfo())


def _mask_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a malformed call; logging reports it when the record is formatted
        return
    masked = SECRETS.redact(message)
    if masked != message:
        record.msg, record.args = masked, None
    if record.exc_info and record.exc_info[0] is not None:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        masked = SECRETS.redact(text)
        if masked != text:
            record.exc_text = masked  # formatters use it instead of formatting exc_info


class AgentFilter(logging.Filter):
    """Sets ``record.agent`` to the :data:`current_agent` (or None); lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        # The record factory (install_record_redaction) may have set it where the record was made.
        if getattr(record, "agent", None) is None:
            record.agent = current_agent.get()
        return True


def _agent_of(record: logging.LogRecord) -> str | None:
    # A record that did not pass through AgentFilter (another handler's formatter) has no attribute.
    agent: object = getattr(record, "agent", None)
    return agent if isinstance(agent, str) and agent else None


class RedactingFormatter(logging.Formatter):
    """Formats as :class:`logging.Formatter` does, then masks every registered secret in the result.

    The whole output is masked (message, arguments, exception and stack text), because a secret can
    reach a log line through any of them.
    """

    def __init__(self, fmt: str = TEXT_FORMAT, datefmt: str | None = None) -> None:
        super().__init__(fmt, datefmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        # A copy with the agent's display value, so the shared record keeps agent=None for the
        # handlers after this one (and for JsonFormatter, which omits the key instead).
        view = logging.makeLogRecord({**record.__dict__, "agent": _agent_of(record) or "-"})
        return super().formatMessage(view)

    def format(self, record: logging.LogRecord) -> str:
        return SECRETS.redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, and when present
    ``agent``, ``trace_id`` and ``span_id`` (the current span's, while tracing is on), ``exc``
    (the formatted traceback) and ``stack`` (``stack_info``); secrets masked.

    Field values are masked before serializing, because a secret holding a character that JSON
    escapes (a quote, a backslash, a control character) no longer appears verbatim in the line; the
    serialized line is masked again as a backstop.
    """

    def format(self, record: logging.LogRecord) -> str:
        created = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, str] = {
            "time": created.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        agent = _agent_of(record)
        if agent is not None:
            entry["agent"] = agent
        ids = telemetry.trace_ids()
        if ids is not None:
            entry["trace_id"], entry["span_id"] = ids
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        masked = {key: SECRETS.redact(value) for key, value in entry.items()}
        return SECRETS.redact(json.dumps(masked, ensure_ascii=False))


class _HarnessHandler(logging.StreamHandler[TextIO]):
    """The handler :func:`configure_logging` installs; its type tells it apart from other handlers."""


def configure_logging(
    level: str = "INFO",
    *,
    fmt: Literal["text", "json"] = "text",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Install the harness's handler on the root logger and return it.

    The handler writes to ``stream`` (standard error by default), tags records with their agent and
    masks secrets. Calling this again replaces the handler an earlier call installed; handlers
    installed by anything else (pytest, the embedding application) are left alone.

    Raises :class:`ConfigError` if ``level`` is not a logging level name.
    """
    levels = logging.getLevelNamesMapping()
    numeric = levels.get(level.upper())
    if numeric is None:
        allowed = ", ".join(sorted(levels, key=lambda name: levels[name]))
        raise ConfigError(f"log level {level!r} is not a level name (use one of {allowed})")
    handler = _HarnessHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(AgentFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else RedactingFormatter())
    root = logging.getLogger()
    for previous in [h for h in root.handlers if isinstance(h, _HarnessHandler)]:
        root.removeHandler(previous)
        previous.close()
    root.addHandler(handler)
    root.setLevel(numeric)
    # Not just WARNING: a logger's own level decides what it emits, whatever the root's level is,
    # so at ERROR the quieted loggers must not let warnings through.
    quiet = numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
    for name in _NOISY:
        logging.getLogger(name).setLevel(quiet)
    return handler


class AgentContextInterceptor(Interceptor):
    """A worker interceptor that runs every activity of the worker as :data:`current_agent`.

    Pass one to the ``interceptors`` of an agent's worker; the worker serves only that agent's task
    queue, so every activity it runs is that agent's.
    """

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _AgentActivityInbound(next, self.agent_id)


def _call_as_agent(agent_id: str, fn: Callable[..., Any], *args: Any) -> Any:
    # Module level, and bound with functools.partial, so it pickles for a process-pool executor.
    with agent_context(agent_id):
        return fn(*args)


class _AgentActivityInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, agent_id: str) -> None:
        super().__init__(next)
        self.agent_id = agent_id

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if not _is_async(input.fn):
            # A sync activity runs in the worker's executor. temporalio 1.35 copies the caller's
            # contextvars into a ThreadPoolExecutor thread, so the agent_context below would reach
            # it, but that is an implementation detail (its comment: "by default Python does not
            # propagate contextvars into executor futures so we don't either") and it does not hold
            # for other executors. Setting the agent in the activity's own thread does not depend on
            # it. The wrapper is sync, so temporalio still sends it to the executor.
            input = dataclasses.replace(
                input, fn=functools.partial(_call_as_agent, self.agent_id, input.fn)
            )
        with agent_context(self.agent_id):
            return await self.next.execute_activity(input)


def _is_async(fn: Callable[..., Any]) -> bool:
    # The same test temporalio's own inbound implementation applies to choose the executor.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's __call__ may be async
    )
