"""Signed cards: a card signed with the agent's Ed25519 key, served by a2a-sdk's card route over
real loopback HTTP, verifies with a2a-sdk's own verifier against the JWKS served beside it, and with
a verifier that canonicalizes the served JSON itself; the key's mistakes are one clear line each.

The keys are generated here; no private key is ever committed.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import rfc8785
from a2a.client import A2ACardResolver
from a2a.server.routes import create_agent_card_routes
from a2a.types import (
    AgentCard,
    AgentInterface,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from jwt.algorithms import ECAlgorithm
from jwt.utils import base64url_decode
from starlette.applications import Starlette

from harness_asgi.card import build_agent_card
from harness_asgi.signing import (
    JWKS_CACHE_CONTROL,
    JWKS_PATH,
    CardSigner,
    combined_jwks,
    create_jwks_routes,
)
from harness_core import Harness, Settings, load_settings, settings_from_mapping
from harness_core.errors import CardSigningError, ConfigError, SigningKeyError
from tests.conftest import free_port, serving_app

KEY_VARIABLE = "HARNESS_TEST_CARD_KEY"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def private_jwk(kid: str = "card-key-1") -> dict[str, str]:
    """A fresh private Ed25519 JWK."""
    key = Ed25519PrivateKey.generate()
    d = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    x = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64url(x), "d": b64url(d)}


@pytest.fixture
def card(tmp_path: Path) -> AgentCard:
    """The project's own card, with a gateway's bearer scheme advertised (its oneof is what the
    double-encoding trap collapses) and a description that is not ASCII."""
    settings = settings_from_mapping(
        {"agent": {"id": "billing", "description": "Rechnungen prüfen — billing"}},
        base_dir=tmp_path,
    )
    card = build_agent_card(Harness(settings))
    card.security_schemes["gatewayJwt"].CopyFrom(
        SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer", bearer_format="JWT")
        )
    )
    card.security_requirements.append(
        SecurityRequirement(schemes={"gatewayJwt": StringList(list=[])})
    )
    return card


@contextlib.asynccontextmanager
async def serving_signed(
    card: AgentCard, signer: CardSigner, after_signing: Callable[[AgentCard], None] | None = None
) -> AsyncIterator[tuple[str, str]]:
    """Serve ``card`` through a2a-sdk's card route, signed per request (then changed by
    ``after_signing``), with the JWKS beside it; yield the base URL and the JWKS URL (jku)."""
    port = free_port()
    jku = f"http://127.0.0.1:{port}{JWKS_PATH}"

    async def sign(served: AgentCard) -> AgentCard:
        signed = signer.sign(served, jku)
        if after_signing is not None:
            after_signing(signed)
        return signed

    routes = [
        *create_agent_card_routes(card, card_modifier=sign),
        *create_jwks_routes(signer.jwks()),
    ]
    async with serving_app(Starlette(routes=routes), port) as base:
        yield base, jku


async def jwks_verifier(http: httpx.AsyncClient, jku: str) -> Callable[[AgentCard], None]:
    """a2a-sdk's verifier with the keys fetched from ``jku``; a signature naming another JWKS
    URL finds no key."""
    response = await http.get(jku)
    response.raise_for_status()
    keys = jwt.PyJWKSet.from_dict(response.json())

    def key_for(kid: str | None, signed_jku: str | None) -> jwt.PyJWK:
        if signed_jku != jku or kid is None:
            raise jwt.PyJWTError(f"no key for kid {kid!r} at {signed_jku!r}")
        return keys[kid]

    return create_signature_verifier(key_for, algorithms=["EdDSA"])


def protected_header(signed: AgentCard) -> dict[str, Any]:
    (signature,) = signed.signatures
    return json.loads(base64url_decode(signature.protected))


@pytest.mark.anyio
async def test_a_served_signed_card_verifies_with_a2a_sdks_verifier_and_the_served_jwks(
    card: AgentCard,
) -> None:
    signer = CardSigner(private_jwk())

    async with serving_signed(card, signer) as (base, jku), httpx.AsyncClient() as http:
        verifier = await jwks_verifier(http, jku)
        fetched = await A2ACardResolver(http, base).get_agent_card(signature_verifier=verifier)

    assert fetched.security_schemes["gatewayJwt"].http_auth_security_scheme.scheme == "bearer"
    assert fetched.description == "Rechnungen prüfen — billing"
    assert protected_header(fetched) == {
        "alg": "EdDSA",
        "kid": "card-key-1",
        "typ": "JOSE",
        "jku": jku,
    }


@pytest.mark.anyio
async def test_the_served_json_without_its_signatures_is_exactly_what_was_signed(
    card: AgentCard,
) -> None:
    """A verifier that canonicalizes the document as served (drop signatures and empty values,
    RFC 8785), as a2a-js and the spec's example do, accepts the signature too."""
    jwk = private_jwk()

    async with serving_signed(card, CardSigner(jwk)) as (base, _), httpx.AsyncClient() as http:
        served = (await http.get(f"{base}/.well-known/agent-card.json")).json()

    (signature,) = served.pop("signatures")
    payload = rfc8785.dumps(without_empty(served))
    token = f"{signature['protected']}.{b64url(payload)}.{signature['signature']}"
    public = {key: value for key, value in jwk.items() if key != "d"}
    assert jwt.api_jws.decode(token, jwt.PyJWK(public), algorithms=["EdDSA"]) == payload
    assert served["securitySchemes"] == {
        "gatewayJwt": {"httpAuthSecurityScheme": {"scheme": "bearer", "bearerFormat": "JWT"}}
    }


def without_empty(value: Any) -> Any:
    """a2a-js's cleanEmpty: recursively drop "", null, [] and {}."""
    if isinstance(value, dict):
        cleaned = {key: without_empty(item) for key, item in value.items()}
        return {key: item for key, item in cleaned.items() if item not in ("", None, [], {})}
    if isinstance(value, list):
        return [item for item in map(without_empty, value) if item not in ("", None, [], {})]
    return value


@pytest.mark.anyio
async def test_a_card_whose_name_changed_after_signing_fails_verification(
    card: AgentCard,
) -> None:
    def rename(signed: AgentCard) -> None:
        signed.name = "mallory"

    signer = CardSigner(private_jwk())
    async with serving_signed(card, signer, rename) as (base, jku), httpx.AsyncClient() as http:
        verifier = await jwks_verifier(http, jku)
        with pytest.raises(InvalidSignaturesError):
            await A2ACardResolver(http, base).get_agent_card(signature_verifier=verifier)


@pytest.mark.anyio
async def test_the_served_jwks_is_cacheable_and_holds_no_private_member() -> None:
    signer = CardSigner(private_jwk())

    async with (
        serving_app(Starlette(routes=create_jwks_routes(signer.jwks()))) as base,
        httpx.AsyncClient() as http,
    ):
        response = await http.get(f"{base}{JWKS_PATH}")

    assert response.headers["cache-control"] == JWKS_CACHE_CONTROL
    assert response.headers["content-type"] == "application/json"
    (key,) = response.json()["keys"]
    assert "d" not in key
    assert key == signer.public_jwk


def test_the_jwks_has_the_public_key_only_with_use_sig_and_alg_eddsa() -> None:
    jwk = private_jwk("k-7")

    (key,) = CardSigner(jwk).jwks()["keys"]

    assert key == {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": jwk["x"],
        "kid": "k-7",
        "use": "sig",
        "alg": "EdDSA",
    }


def test_signing_returns_a_signed_copy_and_leaves_the_card_as_it_was(card: AgentCard) -> None:
    before = card.SerializeToString(deterministic=True)

    signed = CardSigner(private_jwk()).sign(
        card, "https://agents.example.com/.well-known/jwks.json"
    )

    assert card.SerializeToString(deterministic=True) == before
    assert not card.signatures
    assert len(signed.signatures) == 1
    del signed.signatures[:]
    assert signed == card


def test_several_agents_keys_make_one_jwks_with_each_kid_once() -> None:
    shared = private_jwk("a")

    jwks = combined_jwks([CardSigner(shared), CardSigner(private_jwk("b")), CardSigner(shared)])

    assert [key["kid"] for key in jwks["keys"]] == ["a", "b"]


def test_two_different_keys_under_one_kid_are_refused() -> None:
    with pytest.raises(SigningKeyError, match="two different card signing keys have the kid 'a'"):
        combined_jwks([CardSigner(private_jwk("a")), CardSigner(private_jwk("a"))])


def test_a_card_with_a_v0_3_interface_is_refused_since_its_served_form_differs(
    card: AgentCard,
) -> None:
    card.supported_interfaces.append(
        AgentInterface(url="http://x/v03", protocol_binding="JSONRPC", protocol_version="0.3")
    )

    with pytest.raises(CardSigningError, match=r"v0\.3 fields .*protocolVersion.*url"):
        CardSigner(private_jwk()).sign(card, "https://agents.example.com/.well-known/jwks.json")


def test_a_card_with_an_empty_required_field_is_refused(card: AgentCard) -> None:
    card.version = ""

    with pytest.raises(CardSigningError, match=r"REQUIRED fields are empty \(version\)"):
        CardSigner(private_jwk()).sign(card, "https://agents.example.com/.well-known/jwks.json")


def test_a_jku_that_is_not_an_http_url_is_refused(card: AgentCard) -> None:
    with pytest.raises(CardSigningError, match=r"jku '/\.well-known/jwks\.json' must be an http"):
        CardSigner(private_jwk()).sign(card, "/.well-known/jwks.json")


def test_no_signing_key_env_means_unsigned_cards(tmp_path: Path) -> None:
    assert CardSigner.from_settings(settings_from_mapping({}, base_dir=tmp_path)) is None


def test_the_key_is_read_from_the_variable_signing_key_env_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jwk = private_jwk("from-env")
    monkeypatch.setenv(KEY_VARIABLE, json.dumps(jwk) + "\n")

    signer = CardSigner.from_settings(signed_settings(tmp_path))

    assert signer is not None
    assert signer.public_jwk["x"] == jwk["x"]
    assert signer.kid == "from-env"


def signed_settings(tmp_path: Path) -> Settings:
    path = tmp_path / "agent.toml"
    path.write_text(f'[card]\nsigning_key_env = "{KEY_VARIABLE}"\n', encoding="utf-8")
    return load_settings(path)


def ec_jwk() -> dict[str, str]:
    jwk = json.loads(ECAlgorithm.to_jwk(generate_private_key(SECP256R1())))
    return {**jwk, "kid": "ec"}


def without(jwk: dict[str, str], member: str) -> dict[str, str]:
    return {key: value for key, value in jwk.items() if key != member}


GOOD = private_jwk()
OTHER = private_jwk()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, f"environment variable {KEY_VARIABLE} is not set", id="unset"),
        pytest.param(" ", f"environment variable {KEY_VARIABLE} is empty", id="empty"),
        pytest.param(GOOD["d"], "is not JSON", id="not-json"),
        pytest.param(json.dumps([GOOD]), "is not a JSON object", id="not-an-object"),
        pytest.param(json.dumps(without(GOOD, "kid")), "has no kid", id="no-kid"),
        pytest.param(json.dumps(ec_jwk()), "is not an Ed25519 key", id="not-ed25519"),
        pytest.param(json.dumps(without(GOOD, "d")), "is a public key (it has no d)", id="public"),
        pytest.param(
            json.dumps({**GOOD, "x": OTHER["x"]}),
            "has an x that is not the public key of its d",
            id="foreign-x",
        ),
        pytest.param(
            json.dumps({**GOOD, "d": GOOD["d"][:-2]}),
            "has a d that is not 32 bytes in base64url",
            id="short-d",
        ),
        pytest.param(json.dumps({**GOOD, "alg": "ES256"}), 'alg other than "EdDSA"', id="alg"),
    ],
)
def test_a_bad_key_is_one_line_naming_the_file_the_variable_and_the_key_never_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str
) -> None:
    if value is None:
        monkeypatch.delenv(KEY_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(KEY_VARIABLE, value)
    settings = signed_settings(tmp_path)

    with pytest.raises(ConfigError) as caught:
        CardSigner.from_settings(settings)

    message = str(caught.value)
    assert message.startswith(f"{settings.source}: environment variable {KEY_VARIABLE} ")
    assert expected in message
    assert "card.signing_key_env" in message
    assert GOOD["d"] not in message
    assert GOOD["d"][:-2] not in message
    assert "\n" not in message
    assert caught.value.__cause__ is None
