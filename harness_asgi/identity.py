"""Who is calling: the participant a request speaks for, and whether that is trusted.

Two modes (seed: mount-design, HarnessContextBuilder and strict ``sender_of``):

* Header mode (no resolver): ``X-Participant-Id`` names the participant, as a gateway in front of the
  agent asserts it. No header means an anonymous caller.
* Strict mode (``Harness(participant=resolver)``): the host's resolver names the participant from its own
  authentication; the header is never read. A resolver that raises answers 500 and never falls back to the
  header. A caller the resolver does not name may send no message and reads no task.
* Gateway mode (``[auth] gateway_origins``): a bearer JWT of a listed gateway (``harness_asgi.gateway``)
  names the participant (its identity claim's ``key``) and the tenant (the agent) it is for; the header
  is never read. A missing, forged or foreign token is a 401 with ``WWW-Authenticate``, before any route.

The identity is decided once per request, before any route runs (by ``HarnessApp`` or the FastAPI
router's dependency), and kept in the ASGI scope, where the context builder finds it.
"""

from __future__ import annotations

import logging
import uuid
from weakref import WeakKeyDictionary

import attrs
from a2a.server.context import ServerCallContext
from a2a.server.routes import DefaultServerCallContextBuilder
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from harness_asgi.gateway import (
    GatewayAuthError,
    JwksCache,
    bearer_token,
    check_tenant,
    verify_gateway_token,
    verify_local_agent_token,
)
from harness_asgi.limits import json_error
from harness_core.harness import Harness

__all__ = [
    "IDENTITY_KEY",
    "IDENTITY_STATE_KEY",
    "NOBODY",
    "PARTICIPANT_HEADER",
    "VIA_ROOT_KEY",
    "HarnessContextBuilder",
    "Identity",
    "Refused",
    "identify",
    "identity_of",
    "resolve_identity",
]

log = logging.getLogger("harness.http")

PARTICIPANT_HEADER = "x-participant-id"
#: Where a request's identity waits in the ASGI scope.
IDENTITY_KEY = "harness.identity"
#: Where it waits in the A2A ``ServerCallContext.state``.
IDENTITY_STATE_KEY = "harness.identity"


@attrs.frozen
class Identity:
    """The participant a request speaks for (None: nobody), and whether a resolver named it."""

    participant: str | None
    strict: bool

    @property
    def admitted(self) -> bool:
        """A strict caller must be named to send a message; an anonymous header caller may."""
        return self.participant is not None or not self.strict


#: A request that reached the routes without an identity (not through the app or the router)
#: is nobody, in strict mode: it may send nothing and read nothing.
NOBODY = Identity(participant=None, strict=True)


#: The longest participant id taken, in characters.
MAX_PARTICIPANT = 256


class ParticipantRefused(ValueError):
    """A participant id that is not one: too long, or with control characters."""


def _checked(value: str) -> str:
    if len(value) > MAX_PARTICIPANT:
        raise ParticipantRefused(f"a participant id is at most {MAX_PARTICIPANT} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ParticipantRefused("a participant id may not hold control characters")
    return value


def resolve_identity(harness: Harness, scope: Scope) -> Identity:
    """Decide the request's identity and keep it in ``scope``. Raises ``ParticipantRefused`` for
    an id that cannot be one; other exceptions of the resolver propagate."""
    resolver = harness.participant_resolver
    if resolver is None:
        value = _checked((Request(scope).headers.get(PARTICIPANT_HEADER) or "").strip())
        identity = Identity(participant=value or None, strict=False)
    else:
        value = resolver(Request(scope))
        identity = Identity(participant=_checked(value) if value else None, strict=True)
    scope[IDENTITY_KEY] = identity
    return identity


@attrs.frozen
class Refused:
    """Why a request has no identity: its HTTP status, our words, and headers to answer with."""

    status: int
    message: str
    headers: dict[str, str] = attrs.field(factory=dict[str, str])

    def response(self) -> Response:
        return json_error(self.status, self.message, self.headers)


#: Where the tenant root marks a request it hands on to an agent (the token's audience is then
#: the root's URL, not the agent's own).
VIA_ROOT_KEY = "harness.via_root"
_GATEWAY_CHALLENGE = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
_JWKS: WeakKeyDictionary[Harness, JwksCache] = WeakKeyDictionary()


def _audience(harness: Harness, scope: Scope) -> str:
    """The ``aud`` a token for this request must carry: ``[auth] audience``, else the endpoint
    the request came through (the group's root for a tenant, the agent's own URL otherwise)."""
    via_root = scope.get(VIA_ROOT_KEY)
    default = via_root if isinstance(via_root, str) else harness.public_url
    return harness.settings.auth.audience or default


async def _gateway_identity(harness: Harness, scope: Scope) -> Identity | Refused:
    """The participant a gateway's bearer token names for this agent, or why there is none."""
    auth = harness.settings.auth
    token = bearer_token(Request(scope).headers.get("authorization"))
    if token is None:
        return Refused(401, "unauthorized: missing gateway bearer token", _GATEWAY_CHALLENGE)
    audience = _audience(harness, scope)
    jwks = _JWKS.get(harness)
    if jwks is None:
        jwks = _JWKS[harness] = JwksCache()
    try:
        verified = await verify_gateway_token(
            token,
            allowed_origins=auth.gateway_origins,
            audience=audience,
            jwks=jwks,
            identity_claim=auth.identity_claim,
            tenant_claim=auth.tenant_claim,
        )
        check_tenant(verified, harness.agent_id)
    except GatewayAuthError as refused:
        log.info("agent %s: refused a gateway token: %s", harness.agent_id, refused)
        return Refused(401, f"unauthorized: {refused}", _GATEWAY_CHALLENGE)
    except Exception:
        log.exception("agent %s: verifying a gateway token failed", harness.agent_id)
        return Refused(401, "unauthorized: verification failed", _GATEWAY_CHALLENGE)
    if not verified.identity_key:
        return Refused(400, "bad request: gateway identity missing key")
    return Identity(participant=_checked(verified.identity_key), strict=True)


def _agent_identity(harness: Harness, scope: Scope) -> Identity | Refused | None:
    """The participant another agent of this process calls for, from its signed token (in any
    mode), or None when the request carries no such token."""
    token = bearer_token(Request(scope).headers.get("authorization"))
    if token is None:
        return None
    auth = harness.settings.auth
    audience = _audience(harness, scope)
    try:
        verified = verify_local_agent_token(
            token,
            audience=audience,
            identity_claim=auth.identity_claim,
            tenant_claim=auth.tenant_claim,
        )
        if verified is None:
            return None
        check_tenant(verified, harness.agent_id)
    except GatewayAuthError as refused:
        log.info("agent %s: refused an agent token: %s", harness.agent_id, refused)
        return Refused(401, f"unauthorized: {refused}", _GATEWAY_CHALLENGE)
    if not verified.identity_key:
        return Refused(400, "bad request: agent token identity missing key")
    return Identity(participant=_checked(verified.identity_key), strict=True)


async def identify(harness: Harness, scope: Scope) -> Refused | None:
    """Decide the request's identity (``resolve_identity``, or a gateway's token) and keep it in
    the scope, for the app and the router alike: None when it worked, else why not (a refused id
    or token says why; a failing resolver gives a request id only, and its exception is logged
    with it)."""
    try:
        agent = _agent_identity(harness, scope)
        if agent is not None:
            if isinstance(agent, Refused):
                return agent
            scope[IDENTITY_KEY] = agent
            return None
        if harness.settings.auth.gateway_origins:
            found = await _gateway_identity(harness, scope)
            if isinstance(found, Refused):
                return found
            scope[IDENTITY_KEY] = found
            return None
        resolve_identity(harness, scope)
    except ParticipantRefused as refused:
        log.info("agent %s: refused a participant id: %s", harness.agent_id, refused)
        return Refused(400, f"participant: {refused}")
    except Exception:
        request_id = uuid.uuid4().hex[:12]
        log.exception(
            "agent %s: the participant resolver failed (request %s)", harness.agent_id, request_id
        )
        return Refused(500, f"internal error (request {request_id})")
    return None


class HarnessContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context (it keeps the headers the version check reads) plus the identity."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        identity = request.scope.get(IDENTITY_KEY)
        context.state[IDENTITY_STATE_KEY] = identity if isinstance(identity, Identity) else NOBODY
        return context


def identity_of(context: ServerCallContext) -> Identity:
    """The identity the builder put on the context (nobody, when there is none)."""
    identity = context.state.get(IDENTITY_STATE_KEY)
    return identity if isinstance(identity, Identity) else NOBODY
