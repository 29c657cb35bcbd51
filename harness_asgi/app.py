"""``HarnessApp``: one agent's ASGI app, which exists from construction and reads the agent's state.

* The 503 gate: while the agent is not ready, every HTTP request gets
  ``503 {"error": "agent <id> is not started"}`` and reaches no route (one attribute read).
* Lifespan when top-level: served on its own (``hypercorn module:app``), the app starts its agent on
  lifespan startup and stops it on shutdown, unless something else (a group, a host lifespan) runs it.
* Routes, in this order: the agent card, JSON-RPC at the root, then the SDK's HTTP+JSON routes. The REST
  routes end with a catch-all ``/{tenant}`` mount that would swallow any route listed after it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from a2a.server.context import ServerCallContext
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types import AgentCard
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount
from starlette.types import Receive, Scope, Send

from harness_asgi.card import build_agent_card
from harness_asgi.handler import PARTICIPANT_STATE_KEY, HarnessRequestHandler
from harness_core.harness import AgentState, Harness

if TYPE_CHECKING:
    from harness_core.group import HarnessGroup

__all__ = ["PARTICIPANT_HEADER", "HarnessApp", "group_app"]

log = logging.getLogger("harness.http")

PARTICIPANT_HEADER = "x-participant-id"


class HarnessContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context (it keeps the headers the version check reads) plus the participant."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        participant = request.headers.get(PARTICIPANT_HEADER)
        if participant:
            context.state[PARTICIPANT_STATE_KEY] = participant
        return context


def build_routes(harness: Harness) -> list[BaseRoute]:
    card = build_agent_card(harness)
    handler = HarnessRequestHandler(harness)
    builder = HarnessContextBuilder()

    async def current_card(_: AgentCard) -> AgentCard:
        # The public URL can change once (a server bound to port 0 learns its port).
        nonlocal card
        if card.supported_interfaces[1].url != harness.public_url:
            card = build_agent_card(harness)
        return card

    return [
        *create_agent_card_routes(card, card_modifier=current_card),
        *create_jsonrpc_routes(handler, rpc_url="/", context_builder=builder),
        # Last: the SDK's REST routes capture every path under /{tenant}.
        Mount("", routes=create_rest_routes(handler, context_builder=builder)),
    ]


class HarnessApp:
    """The ASGI app of one agent. Construction does no I/O."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self._app = Starlette(routes=build_routes(harness))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "http" and self.harness.state is not AgentState.READY:
            response = JSONResponse(
                {"error": f"agent {self.harness.agent_id} is not started"}, status_code=503
            )
            await response(scope, receive, send)
            return
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


def group_app(group: HarnessGroup) -> Starlette:
    """Every agent of a group under ``/agents/<id>``, the first also at the root.

    Per-agent prefixes (``Harness(prefix=...)``) and tenants on one endpoint come in a later release;
    this gives each agent of ``harness serve a.toml b.toml`` a reachable address today.
    """
    routes: list[BaseRoute] = []
    for h in group.harnesses:
        h.mounted_at(f"/agents/{h.agent_id}")
        routes.append(Mount(f"/agents/{h.agent_id}", app=h.asgi_app()))
    routes.append(Mount("", app=group.harnesses[0].asgi_app()))
    return Starlette(routes=routes)
