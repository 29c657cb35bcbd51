"""``harness_router``: one agent's routes as a FastAPI ``APIRouter`` that shows in ``/docs``.

Seed: mount-design, "FastAPI". A router cannot carry ASGI middleware, so what ``HarnessApp`` does around
its routes happens here in router-level dependencies, in this order:

* the mount check: the request must have reached the route under the harness's own prefix (an include
  prefix other than the harness's is refused on the first request: 500, one ERROR, then every request);
* the 503 gate while the agent is not ready;
* the identity (the header, or the resolver: an exception is a 500, never a fallback);
* the limits: ``rate_limit_per_minute`` (429) and ``max_request_bytes`` (413) for a declared length, or
  for a body without one, read here through a bound and handed to the endpoint.

What a router cannot carry: CORS is application-wide in Starlette, and ``include_router`` drops mounts,
so ``[server] cors_origins`` and ``ui_dir`` only get a warning at startup, naming what to add. The REST
routes under ``/{tenant}`` are a mount too, and are left out in router mode.

The router's lifespan runs the agent; ``app.include_router(router)`` merges it into the app's lifespan.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

try:
    from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
    from fastapi.routing import APIRoute
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise ImportError(
        "harness_asgi.fastapi needs FastAPI: install the a2a-harness 'fastapi' extra (in a checkout: pip install -e '.[fastapi]')"
    ) from exc

from a2a.server.routes import add_a2a_routes_to_fastapi
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from harness_asgi.app import MountCheck, build_routes, needs_identity
from harness_asgi.identity import identify
from harness_asgi.limits import RateLimiter, declared_length, discard_body, json_error
from harness_asgi.tenants import TenantEndpoint
from harness_core.harness import AgentState, Harness
from harness_core.logs import current_agent

__all__ = ["harness_router", "tenant_router"]

log = logging.getLogger("harness.http")


def harness_router(harness: Harness, *, tags: Sequence[str] | None = None) -> APIRouter:
    """The harness's routes as an ``APIRouter`` under ``harness.prefix``, with its lifespan.

    Include it with ``app.include_router(router)`` and no prefix of your own: the prefix is the
    harness's (it must be known before any request, for the card). ``tags`` default to
    ``["A2A: <agent id>"]``, so each agent is one group in ``/docs``.
    """
    routes = build_routes(harness)
    scratch = FastAPI()
    # The SDK's helper turns Starlette routes into documented APIRoutes; they are then re-added
    # to the router with add_api_route, which is what applies the router's prefix.
    add_a2a_routes_to_fastapi(
        scratch,
        agent_card_routes=routes.card,
        jsonrpc_routes=routes.jsonrpc,
        rest_routes=[r for r in routes.rest if isinstance(r, Route)],
    )
    components = scratch.openapi().get("components", {}).get("schemas", {})
    guard = _Guard(harness)
    router = APIRouter(
        prefix=harness.prefix,
        dependencies=[Depends(guard)],
        lifespan=_lifespan(harness, components),
    )
    route_tags: list[str | Any] = list(tags) if tags is not None else [f"A2A: {harness.agent_id}"]
    for route in scratch.routes:
        if isinstance(route, APIRoute):
            methods = sorted(route.methods or ())
            router.add_api_route(
                route.path,
                route.endpoint,
                methods=methods,
                tags=route_tags,
                openapi_extra=_with_parameters(route.path, methods, route.openapi_extra),
                summary=route.summary,
                description=route.description,
            )
    own = [
        (routes.monitor, "GET", "The agent's state and its running tasks"),
        (routes.push, "POST", "Another agent's push for a delegation"),
    ]
    for group, method, summary in own:
        for route in group:
            if isinstance(route, Route):
                router.add_api_route(
                    route.path,
                    route.endpoint,
                    methods=[method],
                    tags=route_tags,
                    summary=summary,
                    openapi_extra=_with_parameters(route.path, [method], None),
                )
    return router


def tenant_router(harnesses: Sequence[Harness]) -> APIRouter:
    """The root of an app whose agents are included with ``harness_router``, as a tenant endpoint
    (``harness_asgi.tenants``): the stub card at ``/.well-known/agent-card.json``, JSON-RPC by
    ``params.tenant`` at ``POST /`` and HTTP+JSON under ``/{tenant}/``.

    Include it after the agents' routers and your own routes: ``/{tenant}/...`` matches any path
    whose first segment is an agent's id. A request for a tenant goes on to that agent's own
    routes (and their guard), under its prefix.
    """
    agents = list(harnesses)
    if not agents:
        raise ValueError("tenant_router needs at least one harness")
    endpoints: dict[int, TenantEndpoint] = {}

    class _Tenant(Response):
        """Hands the request, body unread, to the tenant endpoint over the whole app."""

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            app = scope["app"]
            endpoint = endpoints.get(id(app))
            if endpoint is None:
                endpoint = endpoints[id(app)] = TenantEndpoint(app, agents)
            if not endpoint.handles(scope):
                # No tenant of these agents (handing it to the app would come back here).
                await json_error(404, "not found")(scope, receive, send)
                return
            await endpoint(scope, receive, send)

    async def tenant(request: Request) -> Response:
        return _Tenant()

    router = APIRouter()
    tags: list[str | Any] = ["A2A: tenants"]
    router.add_api_route(
        "/.well-known/agent-card.json",
        tenant,
        methods=["GET"],
        tags=tags,
        summary="The origin's stub card: its agents, each a tenant of this endpoint",
    )
    router.add_api_route(
        "/", tenant, methods=["POST"], tags=tags, summary="JSON-RPC, routed by params.tenant"
    )
    router.add_api_route(
        "/{tenant}/{path:path}",
        tenant,
        methods=["GET", "POST", "DELETE"],
        tags=tags,
        summary="HTTP+JSON of the agent whose id is the tenant",
    )
    return router


#: The query parameters of the HTTP+JSON reads (A2A 1.0 11.5), by route path.
_QUERY: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "/tasks": (
        ("contextId", {"type": "string"}),
        ("status", {"type": "string"}),
        ("pageSize", {"type": "integer", "minimum": 1, "maximum": 100}),
        ("pageToken", {"type": "string"}),
        ("historyLength", {"type": "integer", "minimum": 0}),
        ("statusTimestampAfter", {"type": "string", "format": "date-time"}),
        ("includeArtifacts", {"type": "boolean"}),
    ),
    "/tasks/{id}": (("historyLength", {"type": "integer", "minimum": 0}),),
}


def _with_parameters(
    path: str, methods: list[str], extra: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The route's OpenAPI extra with its path parameters (and a read's query parameters): the
    SDK's endpoints take the request whole, so FastAPI cannot see them."""
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", path)
    ]
    if "GET" in methods:
        parameters += [
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in _QUERY.get(path, ())
        ]
    if not parameters:
        return extra
    return {**(extra or {}), "parameters": parameters}


class _Guard:
    """What ``HarnessApp`` does before its routes, as one router dependency."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness
        self._check = MountCheck(
            harness,
            fix="include the router with no prefix of its own (the prefix is the harness's)",
        )
        server = harness.settings.server
        self._limits = harness.routes.limits
        self._max_bytes = server.max_request_bytes
        self._limiter = (
            RateLimiter(server.rate_limit_per_minute)
            if self._limits and server.rate_limit_per_minute
            else None
        )
        if not self._limits:
            log.info(
                "agent %s: request limits are off; the host must limit request size and rate",
                harness.agent_id,
            )

    async def __call__(self, request: Request) -> None:
        harness = self._harness
        served_at = str(request.scope.get("root_path", "")) + harness.prefix
        problem = self._check.problem(
            served_at, _misrouted(request), origin=f"{request.url.scheme}://{request.url.netloc}"
        )
        if problem:
            raise HTTPException(status_code=500, detail=problem)
        if harness.state is not AgentState.READY:
            self._check.not_started(request.url.path)
            raise HTTPException(status_code=503, detail=f"agent {harness.agent_id} is not started")
        # Each request runs in its own task (and context), so the agent stays on this request.
        current_agent.set(harness.agent_id)
        if self._limits:
            await self._limit(request)
        route = request.scope.get("route")
        own_path = str(getattr(route, "path", ""))[len(harness.prefix) :]
        if not needs_identity(own_path):
            return
        refused = await identify(harness, request.scope)
        if refused is not None:
            raise HTTPException(
                status_code=refused.status, detail=refused.message, headers=refused.headers
            )

    async def _limit(self, request: Request) -> None:
        if self._limiter is not None:
            peer = request.client.host if request.client is not None else ""
            if not self._limiter.allow(peer):
                raise HTTPException(
                    status_code=429,
                    detail="too many requests",
                    headers={"Retry-After": str(self._limiter.retry_after(peer))},
                )
        too_big = HTTPException(
            status_code=413, detail=f"request body over {self._max_bytes} bytes"
        )
        try:
            declared = declared_length(request.scope)
        except ValueError:
            raise HTTPException(status_code=400, detail="malformed Content-Length") from None
        if declared is not None:
            if declared > self._max_bytes:
                # As the app's middleware does: over twice the limit is too much to read.
                if declared <= 2 * self._max_bytes:
                    await discard_body(request.receive, declared)
                raise too_big
            return
        if request.method in ("GET", "HEAD", "DELETE"):
            return
        # No declared length: read the body here, through the bound, and hand it on (the SDK's
        # endpoint reads request.body(), which returns what was read).
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self._max_bytes:
                await discard_body(request.receive, self._max_bytes)
                raise too_big
            chunks.append(chunk)
        setattr(request, "_body", b"".join(chunks))  # noqa: B010 - Starlette's body cache


def _misrouted(request: Request) -> str | None:
    """Where the request reached the route, when that is not under the harness's prefix."""
    scope = request.scope
    route = scope.get("route")
    regex = getattr(route, "path_regex", None)
    if regex is None:
        return None
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", ""))
    routed = path[len(root) :] if root and path.startswith(root) else path
    if regex.match(routed):
        return None
    return f"served at {routed!r} (was the router included under a prefix of its own?)"


def _lifespan(
    harness: Harness, components: dict[str, Any]
) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncGenerator[None, None]:
        server = harness.settings.server
        if server.cors_origins and harness.routes.cors:
            log.warning(
                "agent %s: [server] cors_origins is set, but a router cannot carry CORS: add "
                "starlette.middleware.cors.CORSMiddleware to your app (allow_origins=%s)",
                harness.agent_id,
                list(server.cors_origins),
            )
        if harness.settings.ui_path is not None and harness.routes.ui:
            log.warning(
                "agent %s: [server] ui_dir is set, but include_router drops mounts: mount "
                "StaticFiles(directory=%r) on your app yourself",
                harness.agent_id,
                str(harness.settings.ui_path),
            )
        if isinstance(app, FastAPI):
            _merge_schemas(app, components)
        async with harness.lifespan(app):
            yield

    return lifespan


def _merge_schemas(app: FastAPI, components: dict[str, Any]) -> None:
    """Add the A2A request schemas the routes' documentation refers to to the app's OpenAPI."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = original()
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, value in components.items():
            schemas.setdefault(name, value)
        return schema

    app.openapi = openapi  # pyright: ignore[reportAttributeAccessIssue]
