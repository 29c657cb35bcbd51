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
