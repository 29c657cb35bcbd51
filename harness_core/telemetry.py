"""Traces: OpenTelemetry spans from the A2A request to the workflow, its turns, model requests,
tool calls, delegations and pushes, with W3C ``traceparent`` carried on every A2A call and webhook
the agents make and taken from every request they get, so one trace spans agents and hosts.

The runtime speaks only the OpenTelemetry API; an SDK's tracer provider turns it on:

- ``harness serve`` configures one from the standard environment variables (:func:`configure_from_env`):
  ``OTEL_TRACES_EXPORTER`` (``otlp``, the default once an endpoint is set, or ``console``),
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (OTLP over HTTP),
  ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``;
- an application that embeds the agents sets its own global provider before they start, and the
  agents use it;
- :func:`use` hands one to the runtime alone (tests, or a process with several providers).

Off (no provider, the default), nothing is added: Temporal clients get no interceptor, the ASGI
face no middleware, outgoing calls no header, and :func:`span` is an empty context.

Temporal's spans come from ``temporalio.contrib.opentelemetry.TracingInterceptor`` on the clients
(``StartWorkflow:``, ``RunWorkflow:``, ``StartActivity:``, ``RunActivity:run_turn`` ...); request
spans from ``opentelemetry-instrumentation-asgi``; model requests are spans of their own. The SDK,
the exporter and the ASGI instrumentation come with ``pip install 'a2a-harness[telemetry]'``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Generator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

from harness_core.errors import ConfigError

if TYPE_CHECKING:
    import httpx
    from temporalio.client import Interceptor

__all__ = [
    "client_interceptors",
    "configure_from_env",
    "enabled",
    "inject",
    "provider",
    "request_hooks",
    "shutdown",
    "span",
    "trace_ids",
    "traced_app",
    "use",
]

log = logging.getLogger("harness.telemetry")

_INSTALL = "pip install 'a2a-harness[telemetry]'"
_provider: trace.TracerProvider | None = None


def provider() -> trace.TracerProvider | None:
    """The tracer provider the runtime uses: the one :func:`use` gave, else the global one when an
    SDK set it; None when tracing is off."""
    if _provider is not None:
        return None if isinstance(_provider, NoOpTracerProvider) else _provider
    current = trace.get_tracer_provider()
    if isinstance(current, ProxyTracerProvider | NoOpTracerProvider):
        return None
    return current


def enabled() -> bool:
    """Whether tracing is on."""
    return provider() is not None


def _tracer() -> trace.Tracer | None:
    current = provider()
    return None if current is None else current.get_tracer("harness")


@contextlib.contextmanager
def use(tracer_provider: trace.TracerProvider | None) -> Generator[None, None, None]:
    """Trace with ``tracer_provider`` (None: off, whatever the global provider) in this block."""
    global _provider
    before = _provider
    _provider = tracer_provider if tracer_provider is not None else NoOpTracerProvider()
    try:
        yield
    finally:
        _provider = before


@contextlib.contextmanager
def span(
    name: str, attributes: Mapping[str, str | int] | None = None
) -> Generator[None, None, None]:
    """A span around the block, a child of the current one; nothing when tracing is off."""
    tracer = _tracer()
    if tracer is None:
        yield
        return
    with tracer.start_as_current_span(name, attributes=dict(attributes or {})):
        yield


def inject(headers: MutableMapping[str, str]) -> None:
    """Put the current trace context (``traceparent``, ``tracestate``) into outgoing headers."""
    if enabled():
        propagate.inject(headers)


async def _inject_request(request: httpx.Request) -> None:
    carrier: dict[str, str] = {}
    inject(carrier)
    for key, value in carrier.items():
        request.headers[key] = value


def request_hooks() -> dict[str, list[Callable[[httpx.Request], Any]]]:
    """httpx event hooks that carry the trace on every request of a client (none when off)."""
    return {"request": [_inject_request]} if enabled() else {}


def client_interceptors() -> list[Interceptor]:
    """The interceptors for a new Temporal client: Temporal's tracing one when tracing is on (its
    workers take it from the client), none otherwise."""
    tracer = _tracer()
    if tracer is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(tracer)]


def traced_app(app: Callable[..., Any]) -> Callable[..., Any]:
    """The ASGI app with a server span per HTTP request (the caller's ``traceparent`` is its
    parent) while tracing is on; tracing off, each request goes straight through."""
    traced: list[Callable[..., Any]] = []

    async def asgi(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        current = provider()
        if current is None or scope["type"] not in ("http", "websocket"):
            await app(scope, receive, send)
            return
        if not traced:
            try:
                from opentelemetry.instrumentation.asgi import (  # pyright: ignore[reportMissingTypeStubs]
                    OpenTelemetryMiddleware,
                )
            except ImportError:
                # Tracing goes on without request spans (Temporal's and the model's still come),
                # said once; a request is never refused for it.
                log.error(
                    "tracing is on, but its ASGI instrumentation is not installed: %s", _INSTALL
                )
                traced.append(app)
            else:
                # One span per request: not one more per chunk of its body.
                traced.append(
                    OpenTelemetryMiddleware(
                        app, tracer_provider=current, exclude_spans=["receive", "send"]
                    )
                )
        await traced[0](scope, receive, send)

    return asgi


def trace_ids() -> tuple[str, str] | None:
    """The current trace and span ids (hex), for a log line; None outside a span or when off."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def configure_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Set the global tracer provider from the standard ``OTEL_*`` variables, for ``harness
    serve``. Returns whether tracing is on. Raises :class:`ConfigError` for an exporter it does not
    know or an SDK that is not installed."""
    env = os.environ if environ is None else environ
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter_name == "none" or (exporter_name == "" and not endpoint):
        return False
    if exporter_name not in ("", "otlp", "console"):
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER is {exporter_name!r}: harness serve knows otlp and console "
            "(or none)"
        )
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        raise ConfigError(
            f"OTEL_* variables ask for traces, but the SDK is not installed: {_INSTALL}"
        ) from None
    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                f"OTEL_* variables ask for OTLP traces, but the exporter is not installed: {_INSTALL}"
            ) from None
        exporter = OTLPSpanExporter()
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "harness"}
    tracer_provider = TracerProvider(resource=Resource.create(attributes))
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    log.info("traces go to %s", "the console" if exporter_name == "console" else endpoint or "OTLP")
    return True


def shutdown() -> None:
    """Flush and stop the global SDK provider (``harness serve``'s, at exit); nothing otherwise."""
    current = trace.get_tracer_provider()
    stop = getattr(current, "shutdown", None)
    if callable(stop):
        stop()
