"""Gateway tokens: every forgery the reference pins is refused, before any fetch where it says so.

The gateways are real HTTP servers: one Starlette app on loopback serves each gateway's JWKS and
counts the fetches, and tokens are signed with Ed25519 keys made for the run (no private key is
committed). The allow-list takes https origins only, so the verifier's httpx client carries a
transport that sends ``https://<host>/<path>`` to the loopback server at ``/<host>/<path>``: that
is the network seam and nothing else changes (the verifier and its cache run as in production).
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jwt.algorithms import OKPAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from harness_asgi.gateway import (
    GatewayAuthError,
    JwksCache,
    VerifiedToken,
    bearer_token,
    check_tenant,
    normalize_origins,
    verify_gateway_token,
)
from tests.conftest import serving_app

pytestmark = pytest.mark.anyio

AUDIENCE = "https://agents.example.com/a2a"
GATEWAY = "https://gateway.test"
OTHER = "https://other-gateway.test"
JWKS_PATH = "/.well-known/jwks.json"
ALLOWED = ("gateway.test", "http://other-gateway.test/")
IDENTITY = "https://loopingai.org/identity"
TENANT = "https://loopingai.org/tenant"


class Clock:
    """Monotonic seconds the test moves by hand (the JWKS cache's max-age and cooldown)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Signer:
    """One gateway signing key: its public JWK and the tokens it signs."""

    def __init__(self, origin: str, kid: str = "k1") -> None:
        self.origin = origin
        self.kid = kid
        self.key = Ed25519PrivateKey.generate()

    def jwk(self) -> dict[str, Any]:
        public = OKPAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {**public, "kid": self.kid, "alg": "EdDSA", "use": "sig"}

    def public_bytes(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    def claims(self, **changes: Any) -> dict[str, Any]:
        """A valid gateway token's claims, with ``changes`` (a value of None drops the claim)."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.origin,
            "aud": AUDIENCE,
            "sub": "inst-7",
            "iat": now,
            "exp": now + 300,
            IDENTITY: {"key": "inst-7", "name": "Billing bot", "kind": "agent", "workspaceId": 4},
            TENANT: "a",
        }
        claims.update(changes)
        return {name: value for name, value in claims.items() if value is not None}

    def token(self, claims: dict[str, Any] | None = None, **header: Any) -> str:
        """A token signed with this key; ``header`` overrides jku and kid (None drops one)."""
        fields = {"jku": self.origin + JWKS_PATH, "kid": self.kid, **header}
        fields = {name: value for name, value in fields.items() if value is not None}
        return jwt.encode(
            self.claims() if claims is None else claims, self.key, algorithm="EdDSA", headers=fields
        )


class Gateways:
    """The loopback server: at ``/<host><path>`` the JWKS published for ``https://<host><path>``
    (404 when none is), counting every request by that https URL."""

    def __init__(self) -> None:
        self.published: dict[str, Any] = {}
        self.fetches: Counter[str] = Counter()
        self.release: anyio.Event | None = None  # set by the http fixture, on the event loop

    def publish(self, url: str, *signers: Signer) -> None:
        self.published[url] = {"keys": [signer.jwk() for signer in signers]}

    def total(self) -> int:
        return sum(self.fetches.values())

    def app(self) -> Starlette:
        async def jwks(request: Request) -> Response:
            url = "https://" + request.url.path.lstrip("/")
            self.fetches[url] += 1
            if url.endswith("/slow") and self.release is not None:
                await self.release.wait()
            if url.endswith("/moved"):
                return RedirectResponse(GATEWAY + JWKS_PATH, status_code=302)
            published = self.published.get(url)
            if published is None:
                return Response(status_code=404)
            if isinstance(published, bytes):
                return Response(published, media_type="application/json")
            return JSONResponse(published)

        return Starlette(routes=[Route("/{rest:path}", jwks)])


class LoopbackGateways(httpx.AsyncBaseTransport):
    """Sends ``https://<host>/<path>`` to the loopback server at ``/<host>/<path>``; refuses
    anything but https, as no gateway is reached otherwise."""

    def __init__(self, base: str) -> None:
        self._base = httpx.URL(base)
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert request.url.scheme == "https", request.url
        request.url = self._base.copy_with(path=f"/{request.url.host}{request.url.path}")
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.fixture
def gateways() -> Gateways:
    return Gateways()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def signer(gateways: Gateways) -> Signer:
    signer = Signer(GATEWAY)
    gateways.publish(GATEWAY + JWKS_PATH, signer)
    return signer


@pytest.fixture
async def http(gateways: Gateways) -> AsyncIterator[httpx.AsyncClient]:
    release = gateways.release = anyio.Event()
    async with serving_app(gateways.app()) as base:
        async with httpx.AsyncClient(transport=LoopbackGateways(base)) as client:
            yield client
        release.set()  # a handler still waiting (the slow JWKS) lets the server stop


@pytest.fixture
def jwks(http: httpx.AsyncClient, clock: Clock) -> JwksCache:
    return JwksCache(http, clock=clock)


async def verify(token: str, jwks: JwksCache, **options: Any) -> VerifiedToken:
    options.setdefault("allowed_origins", ALLOWED)
    options.setdefault("audience", AUDIENCE)
    return await verify_gateway_token(token, jwks=jwks, **options)


async def refusal(token: str, jwks: JwksCache, **options: Any) -> str:
    """The message a refused token gets, after checking that it does not quote the token."""
    with pytest.raises(GatewayAuthError) as caught:
        await verify(token, jwks, **options)
    message = str(caught.value)
    assert not any(part in message for part in token.split(".") if part)
    return message


def segment(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


async def test_a_valid_token_passes_and_names_the_caller_and_its_tenant(
    jwks: JwksCache, signer: Signer, gateways: Gateways
) -> None:
    verified = await verify(signer.token(), jwks)

    assert verified.identity_key == "inst-7"
    assert verified.identity["workspaceId"] == 4
    assert verified.tenant == "a"
    assert (verified.payload["iss"], verified.payload["aud"]) == (GATEWAY, AUDIENCE)
    await verify(signer.token(), jwks)
    assert gateways.fetches == {GATEWAY + JWKS_PATH: 1}


async def test_a_token_without_jku_is_refused(
    jwks: JwksCache, signer: Signer, gateways: Gateways
) -> None:
    message = await refusal(signer.token(jku=None), jwks)

    assert message == "gateway JWT missing jku header (RFC 7515 §4.1.2)"
    assert gateways.total() == 0


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil-gateway.test",
        "https://gateway.test.evil.test",
        "https://evil.gateway.test",
        "http://gateway.test",
        "https://gateway.test:8443",
    ],
)
async def test_an_unlisted_jku_is_refused_with_zero_fetches(
    jwks: JwksCache, gateways: Gateways, origin: str
) -> None:
    # The unlisted origin serves a perfectly good JWKS for the token: it must never be asked.
    evil = Signer(origin)
    gateways.publish(origin.replace("http://", "https://") + JWKS_PATH, evil)

    message = await refusal(evil.token(), jwks)

    assert message == f"jku origin '{origin}' is not in the allowed gateway origins"
    assert gateways.total() == 0


async def test_a_jku_with_user_information_is_refused_with_zero_fetches(
    jwks: JwksCache, signer: Signer, gateways: Gateways
) -> None:
    message = await refusal(signer.token(jku="https://evil@gateway.test" + JWKS_PATH), jwks)

    assert "user information" in message
    assert gateways.total() == 0


@pytest.mark.parametrize("signed_by", ["jku", "iss"])
async def test_a_listed_gateway_cannot_speak_for_another_listed_one(
    jwks: JwksCache, signer: Signer, gateways: Gateways, signed_by: str
) -> None:
    other = Signer(OTHER)
    gateways.publish(OTHER + JWKS_PATH, other)
    # Both origins are listed; the token names one in jku and the other in iss.
    if signed_by == "jku":
        token, jku, iss = other.token(other.claims(iss=GATEWAY)), OTHER, GATEWAY
    else:
        token, jku, iss = signer.token(signer.claims(iss=OTHER)), GATEWAY, OTHER

    message = await refusal(token, jwks)

    assert message == f"jku origin '{jku}' does not match iss origin '{iss}'"
    assert gateways.total() == 0


async def test_an_iss_with_a_path_is_not_an_allowed_origin(jwks: JwksCache, signer: Signer) -> None:
    message = await refusal(signer.token(signer.claims(iss=GATEWAY + "/tenants")), jwks)

    assert "is not exactly one of the allowed gateway origins" in message


async def test_a_token_without_iss_is_refused_before_any_fetch(
    jwks: JwksCache, signer: Signer, gateways: Gateways
) -> None:
    message = await refusal(signer.token(signer.claims(iss=None)), jwks)

    assert message == "gateway JWT iss is missing or not a string"
    assert gateways.total() == 0


@pytest.mark.parametrize("secret", ["raw public key", "jwk x"])
async def test_an_hs256_token_keyed_with_the_public_key_is_refused(
    jwks: JwksCache, signer: Signer, gateways: Gateways, secret: str
) -> None:
    # The classic confusion: a verifier that let the token pick the algorithm would check an
    # HMAC keyed with the public key, which anyone can compute.
    key = signer.public_bytes() if secret == "raw public key" else signer.jwk()["x"].encode()
    headers = {"jku": GATEWAY + JWKS_PATH, "kid": signer.kid}
    token = jwt.encode(signer.claims(), key, algorithm="HS256", headers=headers)

    message = await refusal(token, jwks)

    assert message == "gateway JWT alg 'HS256' is not allowed (EdDSA only)"
    assert gateways.total() == 0


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
async def test_an_unsigned_token_is_refused(jwks: JwksCache, signer: Signer, alg: str) -> None:
    header = {"alg": alg, "typ": "JWT", "jku": GATEWAY + JWKS_PATH, "kid": signer.kid}
    token = f"{segment(header)}.{segment(signer.claims())}."

    message = await refusal(token, jwks)

    assert message == f"gateway JWT alg '{alg}' is not allowed (EdDSA only)"


async def test_a_valid_signature_under_an_alg_none_header_is_refused(
    jwks: JwksCache, signer: Signer
) -> None:
    _, payload, signature = signer.token().split(".")
    header = {"alg": "none", "jku": GATEWAY + JWKS_PATH, "kid": signer.kid}

    message = await refusal(f"{segment(header)}.{payload}.{signature}", jwks)

    assert message == "gateway JWT alg 'none' is not allowed (EdDSA only)"


async def test_an_expired_token_is_refused(jwks: JwksCache, signer: Signer) -> None:
    now = int(time.time())

    message = await refusal(signer.token(signer.claims(iat=now - 600, exp=now - 1)), jwks)

    assert message == "gateway JWT has expired"


async def test_a_token_without_exp_is_refused(jwks: JwksCache, signer: Signer) -> None:
    message = await refusal(signer.token(signer.claims(exp=None)), jwks)

    assert message == "gateway JWT is missing the 'exp' claim"


@pytest.mark.parametrize(
    "aud",
    [
        "https://agents.example.com",  # the origin: a token for a sibling service on the host
        "https://agents.example.com/a2a/",
        "https://agents.example.com/other",
        ["https://agents.example.com/other"],
    ],
)
async def test_a_token_for_another_audience_is_refused(
    jwks: JwksCache, signer: Signer, aud: Any
) -> None:
    message = await refusal(signer.token(signer.claims(aud=aud)), jwks)

    assert message == f"gateway JWT is not for this endpoint (aud must be '{AUDIENCE}')"


async def test_a_configured_audience_replaces_the_endpoint(jwks: JwksCache, signer: Signer) -> None:
    token = signer.token(signer.claims(aud="urn:agents"))

    assert (await verify(token, jwks, audience="urn:agents")).identity_key == "inst-7"
    assert "aud must be" in await refusal(signer.token(), jwks, audience="urn:agents")


async def test_a_tampered_payload_is_refused(jwks: JwksCache, signer: Signer) -> None:
    header, _, signature = signer.token().split(".")
    forged = segment(signer.claims(**{TENANT: "b"}))

    message = await refusal(f"{header}.{forged}.{signature}", jwks)

    assert message == "gateway JWT signature does not verify"


async def test_a_token_signed_by_another_key_under_the_listed_kid_is_refused(
    jwks: JwksCache, signer: Signer
) -> None:
    impostor = Signer(GATEWAY, kid=signer.kid)

    message = await refusal(impostor.token(), jwks)

    assert message == "gateway JWT signature does not verify"


async def test_an_unknown_kid_refetches_once_per_cooldown(
    jwks: JwksCache, signer: Signer, gateways: Gateways, clock: Clock
) -> None:
    url = GATEWAY + JWKS_PATH
    await verify(signer.token(), jwks)
    rotated = Signer(GATEWAY, kid="k2")

    # Within the cooldown of the first fetch, an unknown kid fetches nothing.
    clock.now += 29
    assert "is not in the JWKS" in await refusal(rotated.token(), jwks)
    assert gateways.fetches[url] == 1

    # After it, an unknown kid fetches again (the gateway may have rotated); it has not yet.
    clock.now += 2
    message = await refusal(rotated.token(), jwks)
    assert message == f"gateway JWT kid 'k2' is not in the JWKS at '{url}'"
    assert gateways.fetches[url] == 2

    # Another unknown kid within the cooldown fetches nothing.
    clock.now += 20
    await refusal(Signer(GATEWAY, kid="k3").token(), jwks)
    assert gateways.fetches[url] == 2

    # After it, the rotated key is fetched and taken; the old one still works.
    gateways.publish(url, signer, rotated)
    clock.now += 11
    assert (await verify(rotated.token(), jwks)).identity_key == "inst-7"
    await verify(signer.token(), jwks)
    assert gateways.fetches[url] == 3


async def test_keys_are_fetched_again_after_their_max_age(
    jwks: JwksCache, signer: Signer, gateways: Gateways, clock: Clock
) -> None:
    await verify(signer.token(), jwks)
    clock.now += 599
    await verify(signer.token(), jwks)
    assert gateways.total() == 1

    # A key the gateway withdrew stops working once the keys are old.
    gateways.publish(GATEWAY + JWKS_PATH, Signer(GATEWAY, kid="k9"))
    clock.now += 2
    assert "is not in the JWKS" in await refusal(signer.token(), jwks)
    assert gateways.total() == 2


async def test_concurrent_requests_for_new_keys_share_one_fetch(
    jwks: JwksCache, signer: Signer, gateways: Gateways
) -> None:
    keys: list[str] = []

    async def one() -> None:
        keys.append((await verify(signer.token(), jwks)).identity_key)

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(one)

    assert keys == ["inst-7"] * 8
    assert gateways.total() == 1


async def test_the_cache_keeps_a_bounded_number_of_jwks_urls(
    http: httpx.AsyncClient, signer: Signer, gateways: Gateways, clock: Clock
) -> None:
    jwks = JwksCache(http, max_urls=2, clock=clock)
    urls = [f"{GATEWAY}/keys/{index}" for index in range(3)]
    for url in urls:
        gateways.publish(url, signer)
        await verify(signer.token(jku=url), jwks)

    # The first URL was forgotten when the third came: it is fetched again, the last one is not.
    await verify(signer.token(jku=urls[0]), jwks)
    await verify(signer.token(jku=urls[2]), jwks)
    assert [gateways.fetches[url] for url in urls] == [2, 1, 1]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/missing", "answered HTTP 404"),
        ("/moved", "answered HTTP 302"),
        ("/not-json", "is not JSON"),
        ("/no-keys", "holds no usable key"),
        ("/huge", "is larger than 65536 bytes"),
    ],
)
async def test_a_jwks_that_cannot_be_used_refuses_the_token_and_waits_out_the_cooldown(
    jwks: JwksCache, signer: Signer, gateways: Gateways, path: str, expected: str
) -> None:
    url = GATEWAY + path
    huge = {"keys": [signer.jwk()], "padding": "x" * 70000}
    gateways.published.update(
        {
            GATEWAY + "/not-json": b"{",
            GATEWAY + "/no-keys": {"keys": [{"kty": "RSA"}, "nonsense"]},
            GATEWAY + "/huge": huge,
        }
    )

    assert expected in await refusal(signer.token(jku=url), jwks)
    assert "unavailable" in await refusal(signer.token(jku=url), jwks)
    assert gateways.fetches[url] == 1
    # A redirect is not followed: the JWKS it points to is never asked.
    assert gateways.fetches[GATEWAY + JWKS_PATH] == 0


async def test_a_jwks_that_does_not_answer_in_time_refuses_the_token(
    http: httpx.AsyncClient, signer: Signer, clock: Clock
) -> None:
    jwks = JwksCache(http, timeout=0.2, clock=clock)

    message = await refusal(signer.token(jku=GATEWAY + "/slow"), jwks)

    assert message == f"the gateway JWKS at '{GATEWAY}/slow' did not answer within 0.2s"


async def test_a_siblings_token_is_refused_for_this_tenant(jwks: JwksCache, signer: Signer) -> None:
    verified = await verify(signer.token(signer.claims(**{TENANT: "b"})), jwks)

    with pytest.raises(GatewayAuthError) as caught:
        check_tenant(verified, "a")

    assert str(caught.value) == (
        "gateway token authorizes tenant 'b', but the request addressed 'a'"
    )
    check_tenant(verified, "b")


@pytest.mark.parametrize("addressed", ["a", ""])
async def test_a_token_without_a_tenant_claim_matches_no_tenant(
    jwks: JwksCache, signer: Signer, addressed: str
) -> None:
    verified = await verify(signer.token(signer.claims(**{TENANT: None})), jwks)
    assert verified.tenant == ""

    with pytest.raises(GatewayAuthError) as caught:
        check_tenant(verified, addressed)

    assert str(caught.value) == (
        f"gateway token authorizes tenant '<none>', but the request addressed '{addressed}'"
    )


@pytest.mark.parametrize("claim", ["*", ["a"], {"a": True}, 1])
async def test_a_tenant_claim_is_never_a_wildcard(
    jwks: JwksCache, signer: Signer, claim: Any
) -> None:
    verified = await verify(signer.token(signer.claims(**{TENANT: claim})), jwks)

    with pytest.raises(GatewayAuthError, match="but the request addressed 'a'"):
        check_tenant(verified, "a")


async def test_a_token_for_an_unknown_tenant_is_passed_on_for_routing_to_refuse(
    jwks: JwksCache, signer: Signer
) -> None:
    # Verification is a signature and origin question: the token names 'ghost', and whether an
    # agent 'ghost' exists is for the routing after check_tenant (reference step 7).
    verified = await verify(signer.token(signer.claims(**{TENANT: "ghost"})), jwks)

    check_tenant(verified, "ghost")
    with pytest.raises(GatewayAuthError, match="authorizes tenant 'ghost'"):
        check_tenant(verified, "a")


async def test_an_identity_claim_that_is_not_an_object_is_no_identity(
    jwks: JwksCache, signer: Signer
) -> None:
    for identity in (None, "inst-7", ["inst-7"], {"key": 7}):
        verified = await verify(signer.token(signer.claims(**{IDENTITY: identity})), jwks)
        assert verified.identity_key == ""


async def test_claim_names_can_be_moved_and_the_default_names_are_then_ignored(
    jwks: JwksCache, signer: Signer
) -> None:
    claims = signer.claims(**{"urn:who": {"key": "other-inst"}, "urn:tenant": "c"})

    verified = await verify(
        signer.token(claims), jwks, identity_claim="urn:who", tenant_claim="urn:tenant"
    )

    assert (verified.identity_key, verified.tenant) == ("other-inst", "c")
    with pytest.raises(GatewayAuthError):
        check_tenant(verified, "a")  # the default-named claim says "a"; it is not read


@pytest.mark.parametrize("token", ["", "garbage", "a.b.c", "x" * 20000])
async def test_a_malformed_token_is_refused(jwks: JwksCache, token: str) -> None:
    with pytest.raises(GatewayAuthError, match=r"gateway JWT is (malformed|longer than)"):
        await verify(token, jwks)


@pytest.mark.parametrize(
    "value",
    [
        "gateway.test",
        "http://gateway.test",
        "https://gateway.test/",
        "  HTTPS://Gateway.Test:443  ",
        "https://gateway.test/any/path",
    ],
)
def test_allowed_origins_are_normalized_to_one_https_origin(value: str) -> None:
    assert normalize_origins([value]) == ("https://gateway.test",)


def test_origins_match_exactly_never_by_suffix() -> None:
    origins = normalize_origins(["gateway.test", "evil-gateway.test", "gateway.test:8443"])

    assert origins == (
        "https://gateway.test",
        "https://evil-gateway.test",
        "https://gateway.test:8443",
    )


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_allowed_origin_is_an_error(value: str) -> None:
    with pytest.raises(GatewayAuthError, match=r"^allowed gateway origin cannot be empty$"):
        normalize_origins(["gateway.test", value])


@pytest.mark.parametrize("value", ["gateway.test:99999", "https://", "gate way.test"])
def test_an_allowed_origin_that_is_no_origin_is_an_error(value: str) -> None:
    with pytest.raises(GatewayAuthError, match=r"^invalid allowed gateway origin '"):
        normalize_origins([value])


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Bearer abc.def.ghi", "abc.def.ghi"),
        ("bearer abc", "abc"),
        ("  BEARER \t abc  ", "abc"),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("", None),
        (None, None),
    ],
)
def test_the_bearer_token_is_read_case_insensitively(
    header: str | None, expected: str | None
) -> None:
    assert bearer_token(header) == expected
