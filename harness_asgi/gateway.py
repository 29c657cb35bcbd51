"""Gateway tokens: the bearer EdDSA JWTs a gateway mints for the agents it calls, and their check.

Issue "Gateway tokens" (``[auth]``): a gateway on an allow-listed origin signs a JWT whose ``jku``
header names its JWKS; the verified identity becomes the participant, and the tenant claim must equal
the tenant the request addressed. The checks follow loopingai-core's ``verifyGatewayToken``
(reference section 2) in its order, none optional:

1. the allow-list is normalized (:func:`normalize_origins`);
2. the ``jku`` header is present;
3. its origin is on the allow-list, BEFORE anything is fetched: an unlisted ``jku`` costs nothing;
4. the ``iss`` origin equals the ``jku`` origin, so one listed gateway cannot speak for another;
5. PyJWT checks the signature with the key the JWKS at ``jku`` holds for the token's ``kid``
   (EdDSA only), ``iss`` (exactly one of the origins), ``aud`` (exactly) and ``exp`` (required, no
   leeway).

PyJWT does the JOSE; httpx fetches the keys (PyJWT's own ``PyJWKClient`` blocks on urllib). The
:class:`JwksCache` keeps them per ``jku`` URL, bounded, and refetches for an unknown ``kid`` at most
once per cooldown.

Verification is a signature and origin question only: the tenant claim is returned, and
:func:`check_tenant` compares it with the addressed tenant (a missing claim matches nothing). Every
failure is a :class:`GatewayAuthError`, whose message is meant for the client (the reference answers
401 ``unauthorized: <message>`` with ``WWW-Authenticate: Bearer error="invalid_token"``): it never
holds the token or key material. Nothing here knows HTTP requests; the app decides when to ask.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, cast
from urllib.parse import urlsplit

import anyio
import attrs
import httpx
import jwt

from harness_asgi.guard import Refusal, load_json
from harness_asgi.signing import local_signer
from harness_core.config.values import gateway_origin, web_origin
from harness_core.errors import HarnessError
from harness_core.urls import http_client

__all__ = [
    "ALGORITHMS",
    "IDENTITY_CLAIM",
    "TENANT_CLAIM",
    "GatewayAuthError",
    "JwksCache",
    "VerifiedToken",
    "bearer_token",
    "check_tenant",
    "normalize_origins",
    "verify_gateway_token",
]

log = logging.getLogger("harness.http")

#: Where a token carries the caller: an object whose ``key`` names the calling agent instance.
IDENTITY_CLAIM = "https://loopingai.org/identity"
#: Where a token carries the one tenant (agent) it may address.
TENANT_CLAIM = "https://loopingai.org/tenant"
#: The only signature algorithm taken. Fixed here, never read from the token (RFC 8725 §2.1).
ALGORITHMS = ("EdDSA",)
#: Tokens longer than this are refused before they are parsed; real ones are well under 2 KiB.
MAX_TOKEN_CHARS = 16384
_BEARER = re.compile(r"Bearer\s+(.+)", re.IGNORECASE)
_SHOW_LIMIT = 80


class GatewayAuthError(HarnessError):
    """A gateway token is missing, forged, expired, not for this endpoint, or for another tenant."""


@attrs.frozen
class VerifiedToken:
    """What a verified gateway token says: its claims, the caller and the tenant it authorizes."""

    payload: dict[str, Any]
    identity: dict[str, Any]  # the identity claim when it is an object, else {} (never a default)
    identity_key: str  # identity["key"] when it is a string, else "" (the caller must refuse "")
    tenant: str  # the tenant claim when it is a string, else "" (which matches no tenant)


def normalize_origins(values: Iterable[str]) -> tuple[str, ...]:
    """The allow-list in its one form: each entry trimmed, its ``http://`` or ``https://`` replaced
    by ``https://``, cut to its origin. Matching against it is exact, never by suffix.

    Raises :class:`GatewayAuthError` for an empty entry or one that is not an origin.
    """
    origins: list[str] = []
    for value in values:
        if not value.strip():
            raise GatewayAuthError("allowed gateway origin cannot be empty")
        try:
            origins.append(gateway_origin(value))
        except ValueError as exc:
            raise GatewayAuthError(
                f"invalid allowed gateway origin {_show(value)}: {exc}"
            ) from None
    return tuple(origins)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme in any case), else
    None: no header, another scheme (Basic), or no token."""
    if authorization is None:
        return None
    match = _BEARER.fullmatch(authorization.strip())
    return None if match is None else match[1]


@attrs.define
class _Keys:
    """One ``jku`` URL's keys, when they were fetched, and when a fetch was last tried."""

    keys: jwt.PyJWKSet | None = None
    fetched_at: float = -math.inf
    tried_at: float = -math.inf
    lock: anyio.Lock = attrs.field(factory=anyio.Lock)


class JwksCache:
    """The keys of the gateways' JWKS, by ``jku`` URL, fetched when first needed.

    Bounded: at most ``max_urls`` URLs (the least recently used one is forgotten first), since any
    path on a listed origin can be a ``jku``. A URL's keys are used for ``max_age`` seconds. A
    ``kid`` they do not hold refetches them, but a URL is fetched at most once per ``cooldown``
    seconds (failed fetches count too, so a gateway that is down is not hammered; keys past
    ``max_age`` are not used meanwhile). Concurrent requests for one URL share one fetch.

    Each fetch is one GET on ``client`` (which the caller owns, and closes after the cache's last
    use), redirects not followed, ``timeout`` seconds for the whole answer, at most ``max_bytes``
    of it. ``clock`` (monotonic seconds) is for tests.
    """

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        max_urls: int = 32,
        max_age: float = 600.0,
        cooldown: float = 30.0,
        timeout: float = 5.0,
        max_bytes: int = 65536,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._max_urls = max_urls
        self._max_age = max_age
        self._cooldown = cooldown
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._clock = clock
        self._urls: OrderedDict[str, _Keys] = OrderedDict()

    async def key_for(self, jku: str, kid: str | None) -> jwt.PyJWK:
        """The EdDSA key ``kid`` names in the JWKS at ``jku`` (without a ``kid``: its only one),
        fetching the JWKS if it is not known, too old, or lacks ``kid`` and the cooldown allows.

        The caller must have checked ``jku`` against the allow-list. Raises
        :class:`GatewayAuthError` when the fetch fails or no such key is there. If cancelled
        during a fetch, nothing is recorded: the next request fetches again.
        """
        entry = self._urls.get(jku)
        if entry is None:
            entry = self._urls[jku] = _Keys()
            while len(self._urls) > self._max_urls:
                self._urls.popitem(last=False)
        self._urls.move_to_end(jku)
        key = self._find(entry, kid)
        if key is not None:
            return key
        async with entry.lock:
            # Another request may have fetched while this one waited for the lock.
            key = self._find(entry, kid)
            if key is not None:
                return key
            if self._clock() - entry.tried_at < self._cooldown:
                if not self._fresh(entry):
                    raise GatewayAuthError(
                        f"the gateway JWKS at {_show(jku)} is unavailable (its last fetch failed "
                        f"less than {self._cooldown:g}s ago)"
                    )
            else:
                try:
                    keys = await self._fetch(jku)
                except GatewayAuthError as exc:
                    entry.tried_at = self._clock()
                    log.info("%s", exc)  # the gateway's trouble, not only this caller's
                    raise
                entry.keys, entry.fetched_at = keys, self._clock()
                entry.tried_at = entry.fetched_at
                key = self._find(entry, kid)
                if key is not None:
                    return key
        if kid is None:
            raise GatewayAuthError(
                f"gateway JWT has no kid, and the JWKS at {_show(jku)} does not hold exactly one "
                "EdDSA key"
            )
        raise GatewayAuthError(f"gateway JWT kid {_show(kid)} is not in the JWKS at {_show(jku)}")

    def _fresh(self, entry: _Keys) -> bool:
        return entry.keys is not None and self._clock() - entry.fetched_at < self._max_age

    def _find(self, entry: _Keys, kid: str | None) -> jwt.PyJWK | None:
        if not self._fresh(entry) or entry.keys is None:
            return None
        # Only signing keys for EdDSA: a key of another type with the same kid is not this one.
        matches = [
            key
            for key in entry.keys
            if key.algorithm_name in ALGORITHMS
            and key.public_key_use in (None, "sig")
            and (kid is None or key.key_id == kid)
        ]
        if kid is None and len(matches) != 1:
            return None
        return matches[0] if matches else None

    async def _fetch(self, jku: str) -> jwt.PyJWKSet:
        where = f"the gateway JWKS at {_show(jku)}"
        body = bytearray()
        try:
            # The whole answer, however slowly its bytes come, gets the one timeout.
            with anyio.fail_after(self._timeout):
                async with contextlib.AsyncExitStack() as stack:
                    # Without a client of the caller's, one for this fetch (fetches are rare).
                    client = self._client or await stack.enter_async_context(http_client())
                    response = await stack.enter_async_context(
                        client.stream(
                            "GET",
                            jku,
                            headers={"accept": "application/jwk-set+json, application/json"},
                            # A redirect could leave the allow-listed origin.
                            follow_redirects=False,
                        )
                    )
                    if response.status_code != 200:
                        raise GatewayAuthError(f"{where} answered HTTP {response.status_code}")
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > self._max_bytes:
                            raise GatewayAuthError(
                                f"{where} is larger than {self._max_bytes} bytes"
                            )
        except TimeoutError:
            raise GatewayAuthError(f"{where} did not answer within {self._timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise GatewayAuthError(f"cannot fetch {where} ({type(exc).__name__})") from None
        try:
            document: object = load_json(bytes(body), 0)
        except Refusal:
            raise GatewayAuthError(f"{where} is not JSON") from None
        keys = cast(dict[str, object], document).get("keys") if isinstance(document, dict) else None
        try:
            # PyJWKSet skips members it cannot use (other key types, bad values); none left: error.
            return jwt.PyJWKSet(cast(list[dict[str, Any]], keys) if isinstance(keys, list) else [])
        except jwt.PyJWTError:
            raise GatewayAuthError(f"{where} holds no usable key") from None


async def verify_gateway_token(
    token: str,
    *,
    allowed_origins: Iterable[str],
    audience: str,
    jwks: JwksCache,
    identity_claim: str = IDENTITY_CLAIM,
    tenant_claim: str = TENANT_CLAIM,
) -> VerifiedToken:
    """Verify a gateway token in the reference's order (see the module docstring) and return what
    it says. The tenant claim is returned, not enforced: :func:`check_tenant` does that.

    Raises :class:`GatewayAuthError` at the first check that fails; only step 5 fetches, through
    ``jwks``. If cancelled during that fetch, the cache records nothing.
    """
    origins = normalize_origins(allowed_origins)
    if len(token) > MAX_TOKEN_CHARS:
        raise GatewayAuthError(f"gateway JWT is longer than {MAX_TOKEN_CHARS} characters")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise GatewayAuthError("gateway JWT is malformed") from None

    jku = header.get("jku")
    if not isinstance(jku, str) or not jku:
        raise GatewayAuthError("gateway JWT missing jku header (RFC 7515 §4.1.2)")
    jku_origin = _origin_of(jku, "jku")
    if "@" in urlsplit(jku).netloc:
        # The origin ignores user information, but the fetch would send it to the gateway.
        raise GatewayAuthError("gateway JWT jku must not carry user information")
    if jku_origin not in origins:
        raise GatewayAuthError(f"jku origin '{jku_origin}' is not in the allowed gateway origins")

    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise GatewayAuthError("gateway JWT is malformed") from None
    iss = claims.get("iss")
    if not isinstance(iss, str):
        raise GatewayAuthError("gateway JWT iss is missing or not a string")
    iss_origin = _origin_of(iss, "iss")
    if iss_origin != jku_origin:
        raise GatewayAuthError(
            f"jku origin '{jku_origin}' does not match iss origin '{iss_origin}'"
        )

    # PyJWT refuses any other alg too; asking first spares a fetch for a token that cannot pass.
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise GatewayAuthError(f"gateway JWT alg {_show(alg)} is not allowed (EdDSA only)")
    kid = header.get("kid")  # PyJWT has checked that a kid is a string
    key = await jwks.key_for(jku, kid)
    # A tuple: `iss in issuer` is then exact membership, never a substring test.
    return _decoded(token, key, audience, origins, iss, identity_claim, tenant_claim)


def _decoded(
    token: str,
    key: jwt.PyJWK,
    audience: str,
    issuer: str | tuple[str, ...],
    iss: str,
    identity_claim: str,
    tenant_claim: str,
) -> VerifiedToken:
    """The token's claims once its signature (EdDSA), ``iss``, ``aud`` and ``exp`` are checked
    (all three required, no leeway); else :class:`GatewayAuthError` in our words."""
    try:
        payload = jwt.decode(
            token,
            key,
            algorithms=list(ALGORITHMS),
            audience=audience,
            issuer=issuer,
            leeway=0,
            options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.PyJWTError as exc:
        raise GatewayAuthError(_refusal(exc, audience=audience, iss=iss)) from None
    return _verified(payload, identity_claim, tenant_claim)


def _verified(payload: dict[str, Any], identity_claim: str, tenant_claim: str) -> VerifiedToken:
    identity_value = payload.get(identity_claim)
    identity: dict[str, Any] = (
        dict(identity_value)  # pyright: ignore[reportUnknownArgumentType]
        if isinstance(identity_value, dict)
        else {}
    )
    identity_key = identity.get("key")
    tenant = payload.get(tenant_claim)
    return VerifiedToken(
        payload=payload,
        identity=identity,
        identity_key=identity_key if isinstance(identity_key, str) else "",
        tenant=tenant if isinstance(tenant, str) else "",
    )


def verify_local_agent_token(
    token: str,
    *,
    audience: str,
    identity_claim: str = IDENTITY_CLAIM,
    tenant_claim: str = TENANT_CLAIM,
) -> VerifiedToken | None:
    """An agent token signed by an agent of this process (``harness_core.agent_tokens``): its
    claims, once checked with that agent's key (no fetch: the process holds it), or None when the
    token names no key set of this process. Signature, ``iss`` (the ``jku``'s origin), ``aud`` and
    ``exp`` are checked as for a gateway's token; raises :class:`GatewayAuthError`."""
    if len(token) > MAX_TOKEN_CHARS:
        return None
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        return None
    jku = header.get("jku")
    signer = local_signer(jku) if isinstance(jku, str) else None
    if signer is None or not isinstance(jku, str):
        return None
    if header.get("alg") not in ALGORITHMS or header.get("kid") != signer.kid:
        raise GatewayAuthError("agent token is not signed with its agent's card key")
    issuer = web_origin(jku)
    key = jwt.PyJWK(dict(signer.public_jwk))
    return _decoded(token, key, audience, issuer, issuer, identity_claim, tenant_claim)


def check_tenant(verified: VerifiedToken, addressed_tenant: str) -> None:
    """Refuse a token for another tenant than the one the request addressed.

    All tenants share one endpoint and so one ``aud``: only this claim stops a token minted for
    one agent from being replayed against a sibling. Equality is strict, and a token without the
    claim matches nothing (never a wildcard). Raises :class:`GatewayAuthError`.
    """
    if not verified.tenant or verified.tenant != addressed_tenant:
        authorized = _clip(verified.tenant) if verified.tenant else "<none>"
        raise GatewayAuthError(
            f"gateway token authorizes tenant '{authorized}', but the request addressed "
            f"'{_clip(addressed_tenant)}'"
        )


def _origin_of(url: str, name: str) -> str:
    try:
        return web_origin(url)
    except ValueError as exc:
        raise GatewayAuthError(f"gateway JWT {name} {_show(url)} is not usable: {exc}") from None


def _refusal(exc: jwt.PyJWTError, *, audience: str, iss: str) -> str:
    """Our words for PyJWT's refusal (its own text may quote the token's parts)."""
    if isinstance(exc, jwt.InvalidSignatureError):
        return "gateway JWT signature does not verify"
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "gateway JWT has expired"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "gateway JWT is not valid yet (nbf or iat is in the future)"
    if isinstance(exc, jwt.InvalidAudienceError):
        return f"gateway JWT is not for this endpoint (aud must be {_show(audience)})"
    if isinstance(exc, jwt.InvalidIssuerError):
        return f"gateway JWT iss {_show(iss)} is not exactly one of the allowed gateway origins"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"gateway JWT is missing the {_show(exc.claim)} claim"
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return "gateway JWT alg is not allowed (EdDSA only)"
    return f"gateway JWT is invalid ({type(exc).__name__})"


def _clip(text: str) -> str:
    """A value from a request, safe to quote in one line: control characters replaced, cut short."""
    text = "".join("?" if ord(char) < 32 or ord(char) == 127 else char for char in text)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


def _show(value: object) -> str:
    return f"'{_clip(value)}'" if isinstance(value, str) else _clip(repr(value))
