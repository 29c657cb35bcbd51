"""Tenants on one endpoint: a group's root serves every agent of the group, each as a tenant.

A well-known URI is per origin (RFC 8615): a gateway that reads ``/.well-known/agent-card.json``
once per origin finds one card, so prefixes (``/agents/<id>``) alone hide all agents but one. The
group's root therefore is also an A2A endpoint whose tenants are its agents (A2A 1.0 §8.3.2):

- ``GET /.well-known/agent-card.json``: the **stub card**. It names the origin's agents in its
  description and skills (one skill per agent), has one JSON-RPC interface at the root with no
  tenant, and ``capabilities.extendedAgentCard`` on, so that a client asks for the agent it wants.
- ``POST /`` (JSON-RPC): routed by ``params.tenant`` to the agent with that id. ``GetExtendedAgentCard``
  with a tenant returns that agent's card, its interfaces at the root carrying the tenant, to a
  caller the agent admits (a2a-sdk does not check authentication on this method: it is checked
  here). Any other method is served by the agent itself, exactly as under its prefix.
- ``/{tenant}/...`` (HTTP+JSON): the agent's REST routes.
- ``GET /.well-known/jwks.json``: the public keys of every agent that signs its card
  (``[card] signing_key_env``); the stub card is signed with the first agent's key, each tenant's
  card with its own, their ``jku`` naming this key set.

No tenant, or one that is no agent's, is ``-32602`` in our words; the message names
``params.tenant`` and ``GetExtendedAgentCard``. A task started through a tenant and one started
through the agent's prefix are the same agent's tasks, in the same store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from google.protobuf.json_format import MessageToDict
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from harness_asgi.card import build_agent_card, card_version
from harness_asgi.guard import INVALID_PARAMS, Refusal, load_json
from harness_asgi.identity import IDENTITY_KEY, VIA_ROOT_KEY, Identity, identify
from harness_asgi.limits import LimitsMiddleware, json_error, replay_body
from harness_asgi.signing import JWKS_CACHE_CONTROL, JWKS_PATH, CardSigner, combined_jwks
from harness_core.harness import AgentState, Harness

__all__ = ["TenantEndpoint", "stub_card", "tenant_card"]

CARD_PATH = "/.well-known/agent-card.json"
_EXTENDED = "GetExtendedAgentCard"
_NO_TENANT = (
    "params.tenant is required: this endpoint serves several agents and none is the default. "
    "Use the tenant on the interface of the agent's card (A2A §8.3.2), or call "
    f"{_EXTENDED} with it to fetch that card"
)


def root_url(harness: Harness) -> str:
    """The group's root URL: the agent's public URL without its prefix."""
    url = harness.public_url
    return url[: -len(harness.prefix)] if harness.prefix and url.endswith(harness.prefix) else url


def stub_card(harnesses: Sequence[Harness]) -> AgentCard:
    """The card of the origin: its agents, one interface at the root, the extended card on."""
    root = root_url(harnesses[0])
    names = ", ".join(f"{h.agent_id} ({h.settings.agent_name})" for h in harnesses)
    return AgentCard(
        name="a2a-harness agents",
        description=(
            f"Agents served at {root}: {names}. Each is a tenant of this endpoint: call "
            f"{_EXTENDED} with its id as params.tenant for its card."
        ),
        version=card_version(),
        supported_interfaces=[
            AgentInterface(url=f"{root}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True, extended_agent_card=True),
        default_input_modes=sorted({m for h in harnesses for m in h.input_modes}),
        default_output_modes=sorted({m for h in harnesses for m in h.output_modes}),
        skills=[
            AgentSkill(
                id=h.agent_id,
                name=h.settings.agent_name,
                description=h.settings.agent.description or f"{h.settings.agent_name}: an agent",
                tags=["tenant"],
            )
            for h in harnesses
        ],
    )


def tenant_card(harness: Harness) -> AgentCard:
    """The agent's card as a tenant of the root: its interfaces at the root, with its id."""
    card = build_agent_card(harness)
    root = root_url(harness)
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(
        [
            AgentInterface(
                url=f"{root}/",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
                tenant=harness.agent_id,
            ),
            AgentInterface(
                url=root,
                protocol_binding="HTTP+JSON",
                protocol_version="1.0",
                tenant=harness.agent_id,
            ),
        ]
    )
    return card


def _rpc_error(request_id: Any, code: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    )


class TenantEndpoint:
    """The root of a group: the stub card, JSON-RPC by ``params.tenant``, REST under
    ``/{tenant}``; anything else goes on to ``app`` (the group's own routes)."""

    def __init__(self, app: ASGIApp, harnesses: Sequence[Harness]) -> None:
        self._app = app
        self._harnesses = list(harnesses)
        self._by_id: Mapping[str, Harness] = {h.agent_id: h for h in harnesses}
        # Each agent's card key; the root's key set holds them all, and the stub card is signed
        # with the first agent's key there is.
        self._signers = {h.agent_id: CardSigner.from_settings(h.settings) for h in harnesses}
        present = [signer for signer in self._signers.values() if signer is not None]
        self._jwks = combined_jwks(present) if present else None
        self._stub_signer = present[0] if present else None
        # The root reads a JSON-RPC body to route it: as much as the most generous agent takes.
        self._rpc = LimitsMiddleware(
            self._route_rpc,
            max_request_bytes=max(h.settings.server.max_request_bytes for h in harnesses),
            limiter=None,
        )

    def handles(self, scope: Scope) -> bool:
        """Whether the request is the tenant endpoint's (else it goes on to the app)."""
        if scope["type"] != "http":
            return False
        path: str = scope["path"]
        method: str = scope["method"]
        if path == CARD_PATH:
            return method in ("GET", "HEAD")
        if path == JWKS_PATH:
            return method in ("GET", "HEAD") and self._jwks is not None
        if path == "/":
            return method == "POST"
        tenant, _, rest = path[1:].partition("/")
        return tenant in self._by_id and bool(rest) and not _served_by_group(path, self._harnesses)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.handles(scope):
            await self._app(scope, receive, send)
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if path == CARD_PATH:
            stub = self._signed(stub_card(self._harnesses), self._stub_signer)
            await JSONResponse(
                MessageToDict(stub), headers={"Cache-Control": "public, max-age=300"}
            )(scope, receive, send)
            return
        if path == JWKS_PATH:
            await JSONResponse(self._jwks, headers={"Cache-Control": JWKS_CACHE_CONTROL})(
                scope, receive, send
            )
            return
        if path == "/":
            await self._rpc(scope, receive, send)
            return
        tenant, _, rest = path[1:].partition("/")
        harness = self._by_id[tenant]
        if rest == "extendedAgentCard" and method == "GET":
            await self._extended_card(harness, None, scope, receive, send)
            return
        # HTTP+JSON of a tenant: the agent's own route, under its prefix.
        await self._app(_at(scope, f"{harness.prefix}/{rest}", root_url(harness)), receive, send)

    async def _route_rpc(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await request.body()
        try:
            data = load_json(body, 200)
        except Refusal as refusal:
            await _rpc_error(None, refusal.code, refusal.message)(scope, receive, send)
            return
        envelope: dict[str, Any] = data if isinstance(data, dict) else {}  # pyright: ignore[reportUnknownVariableType]
        request_id = envelope.get("id")
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            request_id = None
        params = envelope.get("params")
        tenant: object = (
            cast("dict[str, object]", params).get("tenant") if isinstance(params, dict) else None
        )
        if not isinstance(tenant, str) or not tenant:
            await _rpc_error(request_id, INVALID_PARAMS, _NO_TENANT)(scope, receive, send)
            return
        harness = self._by_id.get(tenant)
        if harness is None:
            shown = tenant if len(tenant) <= 64 else tenant[:64] + "..."
            message = f"unknown tenant {shown!r}: {_NO_TENANT}"
            await _rpc_error(request_id, INVALID_PARAMS, message)(scope, receive, send)
            return
        if envelope.get("method") == _EXTENDED:
            await self._extended_card(harness, request_id, scope, receive, send)
            return
        await self._app(
            _at(scope, f"{harness.prefix}/", root_url(harness)), replay_body(body, receive), send
        )

    async def _extended_card(
        self, harness: Harness, request_id: Any, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """The tenant's card, to a caller the agent admits (its identity, as for any method): the
        JSON-RPC result for ``POST /``, the card itself for ``GET /{tenant}/extendedAgentCard``."""
        if harness.state is not AgentState.READY:
            await json_error(503, f"agent {harness.agent_id} is not ready")(scope, receive, send)
            return
        scope[VIA_ROOT_KEY] = root_url(harness)
        refused = await identify(harness, scope)
        if refused is not None:
            await refused.response()(scope, receive, send)
            return
        identity = scope.get(IDENTITY_KEY)
        if not isinstance(identity, Identity) or not identity.admitted:
            message = f"tenant {harness.agent_id!r} admits no anonymous caller"
            await json_error(401, message)(scope, receive, send)
            return
        card = MessageToDict(self._signed(tenant_card(harness), self._signers[harness.agent_id]))
        rpc = scope["method"] == "POST"
        answer = {"jsonrpc": "2.0", "id": request_id, "result": card} if rpc else card
        await JSONResponse(answer)(scope, receive, send)

    def _signed(self, card: AgentCard, signer: CardSigner | None) -> AgentCard:
        """``card`` signed with ``signer`` (as it is served), its key set at the root."""
        if signer is None:
            return card
        return signer.sign(card, root_url(self._harnesses[0]) + JWKS_PATH)


def _served_by_group(path: str, harnesses: Sequence[Harness]) -> bool:
    """A path under an agent's prefix: the prefix wins over a tenant of the same name."""
    return any(
        h.prefix and (path == h.prefix or path.startswith(h.prefix + "/")) for h in harnesses
    )


def _at(scope: Scope, path: str, root: str) -> Scope:
    """``scope`` for ``path`` instead (the agent's own route under its prefix), marked as come
    through the root at ``root`` (a gateway token's audience is then the root's URL)."""
    return {**scope, "path": path, "raw_path": path.encode(), VIA_ROOT_KEY: root}
