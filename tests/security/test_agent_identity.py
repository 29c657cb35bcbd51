"""Agents have identities of their own: an agent with a card key signs each call it makes to
another agent, and the other side takes the participant from that signed token, in any mode.

Agent ``d`` runs in strict mode with a resolver that names nobody: no plain request reaches it.
Agent ``a`` (header mode, with ``[card] signing_key_env``) delegates carol's message to ``d``;
its stand-in's call carries a token signed with a's key, naming carol as the participant and ``d``
as the tenant, and ``d`` answers. Before, every stand-in sent only ``X-Participant-Id``, which a
strict agent never reads, so agents of one group could not reach each other in strict mode. The
remote task belongs to carol, as a direct call of hers would.
"""

from __future__ import annotations

import json

import httpx
import pytest
from a2a.types import TaskState

from harness_core import Complete, Delegate, Delegation, Harness, TurnContext
from harness_core.agents.turn import TurnResult
from tests.conftest import a2a_client, agent_settings, serving, unique_id, user_message
from tests.integration.test_a2a_methods import send_blocking
from tests.unit.test_card_signing import private_jwk

pytestmark = pytest.mark.anyio


async def test_a_signed_agent_reaches_a_strict_sibling_for_its_participant(
    tmp_path, temporal_address, monkeypatch
):
    a_id, d_id = unique_id("a"), unique_id("d")
    monkeypatch.setenv("A_CARD_KEY", json.dumps(private_jwk(kid=f"key-{a_id}")))

    async def a(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            return Delegate(Delegation(d_id, ctx.new_messages[-1].text))
        return Complete(f"a heard: {ctx.new_messages[-1].text}")

    async def d(ctx: TurnContext) -> TurnResult:
        return Complete(f"d answers {ctx.new_messages[-1].sender}")

    harness_a = Harness(
        agent_settings(
            tmp_path / "a", temporal_address, a_id, card={"signing_key_env": "A_CARD_KEY"}
        ),
        agent=a,
        prefix=f"/agents/{a_id}",
    )
    harness_d = Harness(
        agent_settings(tmp_path / "d", temporal_address, d_id),
        agent=d,
        prefix=f"/agents/{d_id}",
        participant=lambda request: None,  # strict, and names nobody by itself
    )
    async with serving(harness_a, harness_d) as url:
        async with a2a_client(
            f"{url}/agents/{a_id}", streaming=False, headers={"X-Participant-Id": "carol"}
        ) as client:
            task = await send_blocking(client, user_message("who am I?"))
        async with httpx.AsyncClient() as http:
            plain = await http.post(
                f"{url}/agents/{d_id}/",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {
                        "message": {
                            "messageId": "m1",
                            "role": "ROLE_USER",
                            "parts": [{"text": "x"}],
                        }
                    },
                },
                headers={"X-Participant-Id": "carol", "A2A-Version": "1.0"},
            )
        carols, _, _ = await harness_d.tasks.list(participant="carol")
        anyones, _, _ = await harness_d.tasks.list(participant=None)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "a heard: d answers carol"
    assert "error" in plain.json()  # a plain request names nobody there
    assert len(carols) == 1 and anyones == []


async def test_a_push_carries_a_callback_token_signed_with_the_card_key(
    tmp_path, temporal_address, monkeypatch
):
    """A webhook with no authentication of its own hears each update with ``Authorization: Bearer
    <token>``: signed with the agent's card key (its ``jku`` the agent's key set), ``aud`` the
    push URL itself; the final update's message id is the semantic ``<task>:final``."""
    import jwt
    from a2a.types import (
        SendMessageConfiguration,
        SendMessageRequest,
        TaskPushNotificationConfig,
    )

    from harness_core import ScriptedModel
    from harness_core.agent_tokens import JWKS_PATH
    from tests.conftest import serving_app
    from tests.integration.test_push import Receiver

    monkeypatch.setenv("CARD_KEY", json.dumps(private_jwk(kid="push-key")))
    agent_id = unique_id("p")
    harness = Harness(
        agent_settings(
            tmp_path,
            temporal_address,
            agent_id,
            card={"signing_key_env": "CARD_KEY"},
            push={"allow_hosts": ["127.0.0.1"]},
        ),
        model=ScriptedModel(["done"]),
    )
    receiver = Receiver(fail_first=False)
    async with serving_app(receiver.app) as hook_base, serving(harness) as url:
        hook = f"{hook_base}/hook"
        async with a2a_client(url, streaming=False) as client:
            request = SendMessageRequest(
                message=user_message("go"),
                configuration=SendMessageConfiguration(
                    task_push_notification_config=TaskPushNotificationConfig(url=hook, token="t")
                ),
            )
            [event] = [e async for e in client.send_message(request)]
            await receiver.wait_for("TASK_STATE_COMPLETED")
        async with httpx.AsyncClient() as http:
            keys = jwt.PyJWKSet.from_dict((await http.get(url + JWKS_PATH)).json())
    headers, body = receiver.calls[-1]
    scheme, _, token = headers["authorization"].partition(" ")
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, keys["push-key"], algorithms=["EdDSA"], audience=hook)
    assert scheme == "Bearer" and header["kid"] == "push-key"
    assert header["jku"] == url + JWKS_PATH
    assert claims["aud"] == hook and claims["exp"] - claims["iat"] == 300
    final = body["statusUpdate"]["status"]["message"]["messageId"]
    assert final == f"{event.task.id}:final"
