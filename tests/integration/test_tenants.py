"""Tenants on one endpoint: a group's root serves each of its agents as a tenant.

A client that knows only the origin reads the stub card at the root's well-known path, asks for the
extended card of the tenant it wants (``GetExtendedAgentCard`` with ``params.tenant``), and talks to
that agent at the root with the tenant on every request, JSON-RPC and HTTP+JSON alike. The task it
starts is the agent's own, the same one its prefix serves. No tenant, or one that is no agent's, is
``-32602`` naming ``params.tenant`` and ``GetExtendedAgentCard``.
"""

from __future__ import annotations

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import GetExtendedAgentCardRequest, GetTaskRequest, SendMessageRequest, TaskState

from harness_core import Complete, Harness, TurnContext
from harness_core.agents.turn import TurnResult
from tests.conftest import a2a_client, agent_settings, serving, unique_id, user_message

pytestmark = pytest.mark.anyio

HEADERS = {"X-Participant-Id": "carol", "A2A-Version": "1.0"}


def agents(tmp_path, temporal_address) -> tuple[list[Harness], list[str]]:
    ids = [unique_id("billing"), unique_id("support")]

    def answer(agent_id: str):
        async def turn(ctx: TurnContext) -> TurnResult:
            return Complete(f"{agent_id} heard {ctx.new_messages[-1].text}")

        return turn

    harnesses = [
        Harness(
            agent_settings(
                tmp_path / i, temporal_address, i, agent={"id": i, "description": f"the {i} desk"}
            ),
            agent=answer(i),
        )
        for i in ids
    ]
    return harnesses, ids


async def test_a_client_walks_from_the_stub_card_to_a_tenant_and_its_task(
    tmp_path, temporal_address
):
    harnesses, (billing, support) = agents(tmp_path, temporal_address)
    async with serving(*harnesses) as url, httpx.AsyncClient(timeout=30, headers=HEADERS) as http:
        stub = await A2ACardResolver(http, url).get_agent_card()
        root = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(stub)
        card = await root.get_extended_agent_card(GetExtendedAgentCardRequest(tenant=support))
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        [event] = [
            e
            async for e in client.send_message(
                SendMessageRequest(message=user_message("hello"), tenant=support)
            )
        ]
        task = event.task
        # The same task through the agent's prefix, and through the tenant's REST routes.
        async with a2a_client(f"{url}/agents/{support}", headers=HEADERS) as direct:
            seen = await direct.get_task(GetTaskRequest(id=task.id))
        rest = await http.get(f"{url}/{support}/tasks/{task.id}")
        rest_card = await http.get(f"{url}/{support}/extendedAgentCard")
    assert stub.capabilities.extended_agent_card
    assert [s.id for s in stub.skills] == [billing, support]
    assert billing in stub.description and support in stub.description
    assert [(i.url, i.tenant) for i in stub.supported_interfaces] == [(f"{url}/", "")]
    assert card.name == support and card.description == f"the {support} desk"
    assert {i.tenant for i in card.supported_interfaces} == {support}
    assert {i.url.rstrip("/") for i in card.supported_interfaces} == {url}
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == f"{support} heard hello"
    assert seen.id == task.id and seen.status.state == TaskState.TASK_STATE_COMPLETED
    assert rest.status_code == 200 and rest.json()["id"] == task.id
    assert rest_card.status_code == 200 and rest_card.json()["name"] == support


@pytest.mark.parametrize("tenant", [None, "", "ghost", "toString", "__proto__", "constructor"])
async def test_no_tenant_or_an_unknown_one_is_invalid_params_naming_the_way(
    tmp_path, temporal_address, tenant
):
    harnesses, _ = agents(tmp_path, temporal_address)
    params: dict[str, object] = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": []}}
    if tenant is not None:
        params["tenant"] = tenant
    async with serving(*harnesses) as url, httpx.AsyncClient(timeout=30, headers=HEADERS) as http:
        sent = await http.post(
            f"{url}/", json={"jsonrpc": "2.0", "id": 5, "method": "SendMessage", "params": params}
        )
        card = await http.post(
            f"{url}/",
            json={"jsonrpc": "2.0", "id": 6, "method": "GetExtendedAgentCard", "params": params},
        )
    for answer, request_id in ((sent, 5), (card, 6)):
        assert answer.status_code == 200
        body = answer.json()
        assert body["id"] == request_id and body["error"]["code"] == -32602
        assert "params.tenant" in body["error"]["message"]
        assert "GetExtendedAgentCard" in body["error"]["message"]
        if tenant:
            assert f"unknown tenant {tenant!r}" in body["error"]["message"]


async def test_a_tenant_call_naming_another_agent_is_refused_by_the_agent(
    tmp_path, temporal_address
):
    """Under its prefix, an agent refuses a request that names another agent as its tenant."""
    harnesses, (billing, support) = agents(tmp_path, temporal_address)
    async with serving(*harnesses) as url, httpx.AsyncClient(timeout=30, headers=HEADERS) as http:
        answer = await http.post(
            f"{url}/agents/{billing}/",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "tenant": support,
                    "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "x"}]},
                },
            },
        )
    assert answer.json()["error"]["code"] == -32602
    assert f"tenant {billing!r} only" in answer.json()["error"]["message"]
