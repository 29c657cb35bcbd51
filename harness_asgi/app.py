"""``HarnessApp``: one agent's ASGI app, which exists from construction and reads the agent's state.

What a request meets, in order (seed: mount-design, HarnessApp and build_routes):

1. The mount check. On the first request, the ``root_path`` the host mounted the app under must end with
   the agent's prefix; otherwise the card would name URLs nobody serves. A wrong mount answers 500, logs
   one ERROR, and every later request is refused the same way.
2. The 503 gate: while the agent is not ready, ``503 {"error": "agent <id> is not started"}``. One
   attribute read; the request reaches no route.
3. CORS (``[server] cors_origins``), then the limits (``max_request_bytes`` → 413,
   ``rate_limit_per_minute`` → 429), as ``RouteOptions`` allow.
4. The identity (``harness_asgi.identity``): the header, or the host's resolver.
5. The routes, in this order: the agent card, ``/_monitor``, ``/ui``, JSON-RPC at the root, then the SDK's
   HTTP+JSON routes. Those end with a catch-all ``/{tenant}`` mount that would swallow any route listed
   after it, so the harness's own routes come first.

Served on its own (``hypercorn module:app``), the app starts its agent on lifespan startup and stops it on
shutdown, unless something else (a group, a host lifespan) runs it. Under a ``Mount`` the host's lifespan
does (``harness.lifespan``, ``HarnessGroup.lifespan``, ``harnesses_lifespan``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import anyio
import attrs
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types import AgentCard
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from harness_asgi.card import build_agent_card
from harness_asgi.guard import Refusal, StreamGate, guard_routes, load_json, read_body
from harness_asgi.handler import HarnessRequestHandler
from harness_asgi.identity import PARTICIPANT_HEADER, HarnessContextBuilder, identify
from harness_asgi.limits import LimitsMiddleware, RateLimiter
from harness_asgi.signing import JWKS_PATH, CardSigner, create_jwks_routes, register_local
from harness_asgi.tenants import TenantEndpoint
from harness_core.harness import AgentState, Harness
from harness_core.logs import agent_context
from harness_core.telemetry import traced_app

if TYPE_CHECKING:
    from harness_core.group import HarnessGroup

__all__ = [
    "PARTICIPANT_HEADER",
    "HarnessApp",
    "HarnessRoutes",
    "MountCheck",
    "build_routes",
    "card_url",
    "group_app",
    "needs_identity",
    "route_path",
]

log = logging.getLogger("harness.http")

#: How long clients may keep the agent card: it changes only when the agent restarts with another
#: configuration; its ETag lets a client revalidate for the price of a 304.
CARD_CACHE_CONTROL = "public, max-age=300"

#: Request headers a browser client of an A2A agent sends.
_CORS_HEADERS = [
    "Authorization",
    "Content-Type",
    "A2A-Version",
    "A2A-Extensions",
    "Last-Event-ID",
    "X-Participant-Id",
]


@attrs.frozen
class HarnessRoutes:
    """One agent's routes, built against a handler that reads the agent's state per call, so they
    exist before the agent starts. ``HarnessApp`` and the FastAPI router arrange them."""

    card: list[BaseRoute]
    monitor: list[BaseRoute]
    #: ``POST /a2a/push/{standin}``: other agents' pushes for this agent's delegations.
    push: list[BaseRoute]
    ui: list[BaseRoute]
    jsonrpc: list[BaseRoute]
    rest: list[BaseRoute]

    def ordered(self) -> list[BaseRoute]:
        """The card, the harness's own routes, JSON-RPC; last, the SDK's REST routes, which
        capture every path under /{tenant}."""
        return [
            *self.card,
            *self.monitor,
            *self.push,
            *self.ui,
            *self.jsonrpc,
            Mount("", routes=self.rest),
        ]


def build_routes(harness: Harness) -> HarnessRoutes:
    card = build_agent_card(harness)
    handler = HarnessRequestHandler(harness)
    builder = HarnessContextBuilder()
    # [card] signing_key_env: a bad key fails here, before anything is served.
    signer = CardSigner.from_settings(harness.settings)
    if signer is not None:
        # The agent's own tokens (its calls to siblings) are checked with this key, in-process.
        register_local(harness, signer)
    signed: list[AgentCard] = []

    async def current_card(_: AgentCard) -> AgentCard:
        # The public URL can change once (a server bound to port 0 learns its port).
        nonlocal card
        if card.supported_interfaces[1].url != harness.public_url:
            card = build_agent_card(harness)
            signed.clear()
        if signer is None:
            return card
        if not signed:
            # The document served, signed once: its key set is beside it, under the prefix.
            signed.append(signer.sign(card, harness.public_url + JWKS_PATH))
        return signed[0]

    monitor: list[BaseRoute] = []
    if harness.routes.monitor:
        monitor.append(Route("/_monitor", _monitor_endpoint(harness), methods=["GET"]))
    ui: list[BaseRoute] = []
    ui_dir = harness.settings.ui_path
    if harness.routes.ui and ui_dir is not None:
        ui.append(Mount("/ui", app=StaticFiles(directory=ui_dir, html=True), name="ui"))
    jsonrpc, rest = guard_routes(
        [*create_jsonrpc_routes(handler, rpc_url="/", context_builder=builder)],
        [*create_rest_routes(handler, context_builder=builder)],
        StreamGate(harness.settings.retention.max_streams),
    )
    return HarnessRoutes(
        card=[
            *create_agent_card_routes(
                card, card_modifier=current_card, cache_control=CARD_CACHE_CONTROL
            ),
            *(create_jwks_routes(signer.jwks()) if signer is not None else ()),
        ],
        monitor=monitor,
        push=[Route("/a2a/push/{standin}", _push_endpoint(harness), methods=["POST"])],
        ui=ui,
        jsonrpc=jsonrpc,
        rest=rest,
    )


def _push_endpoint(harness: Harness) -> Any:
    async def push(request: Request) -> Response:
        """Another agent's push for one of this agent's delegations (A2A StreamResponse)."""
        token = request.headers.get("x-a2a-notification-token", "")
        raw = await read_body(request)
        if raw is None:
            return _error(400, "the body ended before its Content-Length")
        try:
            body = load_json(raw, 400)
        except Refusal as refusal:
            log.info("refused a push to %s: %s", request.url.path, refusal.message)
            return _error(400, refusal.message)
        if not isinstance(body, dict):
            return _error(400, "the body must be an A2A StreamResponse (a JSON object)")
        accepted = await harness.tasks.accept_push(
            str(request.path_params["standin"]), token, cast("dict[str, Any]", body)
        )
        if not accepted:
            log.info("refused a push to %s", request.url.path)
            return _error(401, "unknown delegation, or a wrong X-A2A-Notification-Token")
        return JSONResponse({})

    return push


#: Seconds the monitor's count of running tasks is kept: anonymous readers share one count
#: (a Temporal visibility query) instead of each making one.
MONITOR_COUNT_TTL = 1.0


def _monitor_endpoint(harness: Harness) -> Any:
    counted: list[tuple[float, int]] = []
    lock = anyio.Lock()

    async def running_count() -> int:
        async with lock:
            now = anyio.current_time()
            if not counted or now - counted[0][0] >= MONITOR_COUNT_TTL:
                counted[:] = [(now, await harness.tasks.running_count())]
            return counted[0][1]

    async def monitor(request: Request) -> Response:
        """The agent's state and how many tasks run (no task ids: they are the participants'),
        counted at most once in ``MONITOR_COUNT_TTL``."""
        return JSONResponse(
            {
                "agent": harness.agent_id,
                "state": harness.state.value,
                "taskQueue": harness.settings.effective_task_queue,
                "publicUrl": harness.public_url,
                "lastHeartbeat": await harness.tasks.last_heartbeat(),
                "runningTasks": await running_count(),
                "temporalUp": harness.temporal_up,
            }
        )

    return monitor


#: Routes anyone may read, without an identity: the resolver does not run for them.
_CARD_PATH = "/.well-known/agent-card.json"


def needs_identity(route_path: str) -> bool:
    """Whether a request to ``route_path`` (below the prefix) is an A2A call."""
    return not (
        route_path in (_CARD_PATH, JWKS_PATH, "/_monitor")
        or route_path.startswith("/a2a/push/")
        or route_path == "/ui"
        or route_path.startswith("/ui/")
    )


def _request_origin(scope: Scope) -> str | None:
    """``scheme://host[:port]`` as the client addressed the request (its Host header)."""
    for name, value in scope.get("headers", ()):
        if name == b"host":
            return f"{scope.get('scheme', 'http')}://{value.decode('latin-1')}"
    return None


def route_path(scope: Scope) -> str:
    """The request's path below the app's ``root_path``."""
    path, root = str(scope.get("path", "")), str(scope.get("root_path", ""))
    return path[len(root) :] if root and path.startswith(root) else path


class MountCheck:
    """Fail closed when the agent is served under a path that does not give its public URL.

    The path the agent is served under must end with its prefix, and its public URL's path must end
    with that path (a proxy may add more in front). The first request decides: a wrong mount is
    logged once at ERROR, and every request answers 500 from then on (the card would send clients
    and remote agents to URLs nobody serves).
    """

    def __init__(self, harness: Harness, *, fix: str = "mount it at its prefix") -> None:
        self._harness = harness
        self._fix = fix
        self._verdict: str | None = None  # None until the first request; "" when fine
        self._warned_not_started = False

    def problem(
        self, served_at: str, misrouted: str | None = None, origin: str | None = None
    ) -> str:
        """'' when the agent, served under ``served_at``, is where its public URL says;
        otherwise what is wrong. ``misrouted`` is a finding of the caller's own; ``origin`` the
        request's own (``scheme://host``): a guessed public URL it confirms is not warned about."""
        if self._verdict is None:
            wrong = misrouted
            if wrong is None:
                guessed = urlsplit(self._harness.public_url)
                if self._harness.public_url_is_a_guess and origin != (
                    f"{guessed.scheme}://{guessed.netloc}"
                ):
                    log.warning(
                        "agent %s has no [server] base_url: its card advertises %s, which is only "
                        "right if clients reach the app at http://<bind>; set base_url",
                        self._harness.agent_id,
                        self._harness.public_url,
                    )
                served = served_at.rstrip("/")
                public = urlsplit(self._harness.public_url).path.rstrip("/")
                if not served.endswith(self._harness.prefix) or not public.endswith(served):
                    wrong = f"served at {served_at or '/'!r}"
            self._decide(wrong)
        return self._verdict or ""

    def _decide(self, wrong: str | None) -> None:
        if wrong is None:
            self._verdict = ""
            return
        h = self._harness
        self._verdict = (
            f"agent {h.agent_id} is {wrong} but configured for prefix {h.prefix or '/'!r} "
            f"(public URL {h.public_url}): {self._fix}, and set [server] base_url to where "
            "clients reach the app"
        )
        log.error("%s; refusing every request until that is fixed", self._verdict)

    def not_started(self, path: str) -> None:
        """Log a 503: at DEBUG (expected while the host starts), and once, loudly, when nothing
        has started the agent at all (the host app runs no lifespan that starts it)."""
        h = self._harness
        log.debug("agent %s: 503 for %s (not started)", h.agent_id, path)
        if h.state is AgentState.STOPPED and not self._warned_not_started:
            self._warned_not_started = True
            log.warning(
                "agent %s gets requests but was never started: give the host app "
                "lifespan=harnesses_lifespan(...) (or harness.lifespan, or run a HarnessGroup); "
                "until then every request is 503",
                h.agent_id,
            )


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


class _Identify:
    """Decide who is calling (``harness_asgi.identity``) for A2A calls, inside CORS and the limits,
    so a preflight or a refused request never reaches the host's resolver."""

    def __init__(self, app: ASGIApp, harness: Harness) -> None:
        self._app = app
        self._harness = harness

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and needs_identity(route_path(scope)):
            refused = await identify(self._harness, scope)
            if refused is not None:
                await refused.response()(scope, receive, send)
                return
        await self._app(scope, receive, send)


class _InFlight:
    """One request the drain may cut: whether its response started, and ended."""

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.scope = scope
        self.started = False
        self.ended = False


class Drain:
    """The app's part in a graceful stop (``HarnessGroup.serve``): once ``begin`` is called, new
    requests get ``503 {"error": "agent <id> is shutting down; retry"}`` with ``Retry-After``,
    open streams end at once (a client resumes with ``Last-Event-ID``), and a request still
    waiting at the deadline (a blocking send whose turn outlasts the grace period) gets the same
    503; its task goes on in Temporal, and a retry of its message finds it. So the server stops
    within its grace period, and nobody is answered with an internal error."""

    def __init__(self, app: ASGIApp, agent_id: str) -> None:
        self._app = app
        self._agent_id = agent_id
        self._deadline: float | None = None
        self._in_flight: set[_InFlight] = set()

    @property
    def draining(self) -> bool:
        return self._deadline is not None

    def reset(self) -> None:
        """Serve again (a harness served anew after a stop)."""
        self._deadline = None

    def begin(self, seconds: float) -> None:
        """Start draining: every request still waiting ``seconds`` from now is cut. Call it on the
        event loop that serves the app."""
        if self._deadline is not None:
            return
        self._deadline = anyio.current_time() + seconds
        for flight in list(self._in_flight):
            if flight.started:
                flight.scope.cancel()
            else:
                flight.scope.deadline = self._deadline

    def _refusal(self) -> Response:
        return JSONResponse(
            {"error": f"agent {self._agent_id} is shutting down; retry"},
            status_code=503,
            headers={"Retry-After": "1"},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._deadline is not None:
            await self._refusal()(scope, receive, send)
            return
        cancel = anyio.CancelScope()
        flight = _InFlight(cancel)
        with cancel:

            async def tracked(message: Message) -> None:
                if message["type"] == "http.response.start":
                    flight.started = True
                elif message["type"] == "http.response.body" and not message.get("more_body"):
                    flight.ended = True
                await send(message)

            self._in_flight.add(flight)
            try:
                await self._app(scope, receive, tracked)
            finally:
                self._in_flight.discard(flight)
        if not cancel.cancelled_caught:
            return
        if not flight.started:
            log.info("%s %s cut off by the shutdown (503)", scope.get("method"), scope.get("path"))
            await self._refusal()(scope, receive, send)
        elif not flight.ended:
            # A stream cut off: end its body cleanly rather than leave the connection hanging.
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class HarnessApp:
    """The ASGI app of one agent. Construction does no I/O."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.mount_check = MountCheck(harness)
        app: ASGIApp = _Identify(Starlette(routes=build_routes(harness).ordered()), harness)
        server = harness.settings.server
        if harness.routes.limits:
            limiter = (
                RateLimiter(server.rate_limit_per_minute) if server.rate_limit_per_minute else None
            )
            app = LimitsMiddleware(app, max_request_bytes=server.max_request_bytes, limiter=limiter)
        else:
            log.info(
                "agent %s: request limits are off; the host must limit request size and rate",
                harness.agent_id,
            )
        if harness.routes.cors and server.cors_origins:
            app = CORSMiddleware(
                app,
                allow_origins=list(server.cors_origins),
                allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
                allow_headers=_CORS_HEADERS,
            )
        self.drain = Drain(app, harness.agent_id)
        # A server span per request while tracing is on, its parent the caller's traceparent.
        self._app: ASGIApp = traced_app(self.drain)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            # No A2A route speaks WebSocket; refuse rather than route it past the checks.
            await send({"type": "websocket.close", "code": 1008})
            return
        problem = self.mount_check.problem(
            str(scope.get("root_path", "")), origin=_request_origin(scope)
        )
        if problem:
            await _error(500, problem)(scope, receive, send)
            return
        if self.harness.state is not AgentState.READY:
            self.mount_check.not_started(str(scope["path"]))
            await _error(503, f"agent {self.harness.agent_id} is not started")(scope, receive, send)
            return
        if not self.harness.temporal_up and needs_identity(route_path(scope)):
            response = JSONResponse(
                {
                    "error": f"agent {self.harness.agent_id}: its Temporal server is being "
                    "started again; retry"
                },
                status_code=503,
                headers={"Retry-After": "2"},
            )
            await response(scope, receive, send)
            return
        with agent_context(self.harness.agent_id):
            await self._app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        started_here = False
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.harness.state in (AgentState.STOPPED, AgentState.FAILED):
                    try:
                        await self.harness.__aenter__()
                        started_here = True
                    except Exception:
                        log.exception("agent %s failed to start", self.harness.agent_id)
                        await send(
                            {
                                "type": "lifespan.startup.failed",
                                "message": f"agent {self.harness.agent_id} failed to start",
                            }
                        )
                        return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if started_here:
                    await self.harness.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return


def group_app(group: HarnessGroup) -> ASGIApp:
    """Every agent of a group under its prefix (an agent built without one under ``/agents/<id>``),
    and each as a tenant of the root (``harness_asgi.tenants``).

    Raises ``ConfigError`` when two agents would share a prefix, or an agent's base_url disagrees
    with the prefix it gets.
    """
    from harness_core.errors import ConfigError

    routes: list[BaseRoute] = []
    seen: dict[str, str] = {}
    for h in group.harnesses:
        if not h.prefix:
            h.serve_under(f"/agents/{h.agent_id}")
        if h.prefix in seen:
            raise ConfigError(
                f"agents {seen[h.prefix]} and {h.agent_id} have the same prefix {h.prefix!r}"
            )
        seen[h.prefix] = h.agent_id
        routes.append(Mount(h.prefix, app=h.asgi_app()))
    harnesses = group.harnesses

    async def index(request: Request) -> Response:
        """What is served here: each agent's id, name, URL and card (several agents share the
        host, so ``/`` is no agent's)."""
        return JSONResponse(
            {
                "agents": [
                    {
                        "id": h.agent_id,
                        "name": h.settings.agent_name,
                        "url": h.public_url,
                        "card": card_url(h),
                        "state": h.state.value,
                    }
                    for h in harnesses
                ]
            }
        )

    app = Starlette(routes=[Route("/", index, methods=["GET"]), *routes])
    # The root is also a tenant endpoint: one card per origin, every agent a tenant of it. Its
    # own routes read a body whole before they answer, as every agent's do.
    return LimitsMiddleware(
        TenantEndpoint(app, harnesses),
        max_request_bytes=max(h.settings.server.max_request_bytes for h in harnesses),
        limiter=None,
    )


def card_url(harness: Harness) -> str:
    """Where the agent's card is."""
    return harness.public_url.rstrip("/") + _CARD_PATH
