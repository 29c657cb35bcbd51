"""Every card a group serves is signed, and verifies with a2a-sdk's own verifier against the key set
its ``jku`` names: each agent's card under its prefix, the origin's stub card and each tenant's
extended card. A card changed after signing does not verify (tested in
``tests/unit/test_card_signing.py``); here the point is that what the runtime serves is what it
signed."""

from __future__ import annotations

import json

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetExtendedAgentCardRequest

from harness_asgi.signing import JWKS_PATH
from harness_core import Complete, Harness, TurnContext
from harness_core.agents.turn import TurnResult
from tests.conftest import agent_settings, serving, unique_id
from tests.unit.test_card_signing import jwks_verifier, private_jwk, protected_header

pytestmark = pytest.mark.anyio


async def answer(ctx: TurnContext) -> TurnResult:
    return Complete("ok")


async def test_every_served_card_is_signed_and_verifies(tmp_path, temporal_address, monkeypatch):
    ids = [unique_id("north"), unique_id("south")]
    for n, agent_id in enumerate(ids):
        monkeypatch.setenv(f"CARD_KEY_{n}", json.dumps(private_jwk(kid=f"key-{agent_id}")))
    harnesses = [
        Harness(
            agent_settings(
                tmp_path / i, temporal_address, i, card={"signing_key_env": f"CARD_KEY_{n}"}
            ),
            agent=answer,
        )
        for n, i in enumerate(ids)
    ]
    async with serving(*harnesses) as url, httpx.AsyncClient(timeout=30) as http:
        root_keys = (await http.get(url + JWKS_PATH)).json()
        verify_root = await jwks_verifier(http, url + JWKS_PATH)
        stub = await A2ACardResolver(http, url).get_agent_card(signature_verifier=verify_root)
        root = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(stub)
        tenant = await root.get_extended_agent_card(
            GetExtendedAgentCardRequest(tenant=ids[1]), signature_verifier=verify_root
        )
        own = f"{url}/agents/{ids[0]}"
        verify_own = await jwks_verifier(http, own + JWKS_PATH)
        card = await A2ACardResolver(http, own).get_agent_card(signature_verifier=verify_own)
    assert sorted(k["kid"] for k in root_keys["keys"]) == sorted(f"key-{i}" for i in ids)
    assert all("d" not in k for k in root_keys["keys"])
    assert protected_header(stub)["kid"] == f"key-{ids[0]}"
    assert protected_header(tenant)["kid"] == f"key-{ids[1]}"
    assert protected_header(tenant)["jku"] == url + JWKS_PATH
    assert protected_header(card) == {
        "alg": "EdDSA",
        "kid": f"key-{ids[0]}",
        "typ": "JOSE",
        "jku": own + JWKS_PATH,
    }
    assert card.name == ids[0] and tenant.name == ids[1]
