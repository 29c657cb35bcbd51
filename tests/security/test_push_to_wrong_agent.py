"""Abuse case 3 of the seed: a push aimed at another agent's delegation is refused and wakes nothing.

Agent a delegates to d (held mid-turn) with pushes; its stand-in waits. A push for that stand-in
sent to agent b (which shares the process and the Temporal service), and one sent to a with a wrong
token, are both 401; the stand-in's history does not change; the real push still completes a.
"""

from __future__ import annotations

import anyio
import httpx
import pytest
from a2a.types import GetTaskRequest, TaskState
from temporalio.client import Client

from harness_core import Complete, Delegate, Delegation, Gate, Harness, TurnContext
from harness_core.agents.turn import TurnResult
from tests.conftest import a2a_client, agent_settings, serving, unique_id, user_message
from tests.integration.test_a2a_methods import send_immediately

pytestmark = pytest.mark.anyio


async def pushed_states(harness: Harness, workflow_id: str) -> list[str]:
    """The states the stand-in was woken with (its ``pushed`` signals), from its history."""
    connection = harness.tasks.connection

    async def fetch(client: Client) -> list[str]:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        return [
            event.workflow_execution_signaled_event_attributes.input.payloads[0].data.decode()
            for event in history.events
            if event.HasField("workflow_execution_signaled_event_attributes")
        ]

    async def run() -> list[str]:
        return await fetch(connection.client)

    return await connection.bridge.call(run)


async def test_a_push_to_another_agents_delegation_is_refused_and_wakes_nothing(
    tmp_path, temporal_address
):
    gate = Gate()
    ids = {name: unique_id(name) for name in "abd"}

    async def a(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            return Delegate(Delegation(ids["d"], "take your time"))
        return Complete(f"a heard: {ctx.new_messages[-1].text}")

    async def d(ctx: TurnContext) -> TurnResult:
        await gate.pass_through()
        return Complete("d is done")

    async def b(ctx: TurnContext) -> TurnResult:
        return Complete("b")

    agents = {"a": a, "b": b, "d": d}
    harnesses = {
        name: Harness(
            agent_settings(
                tmp_path / name, temporal_address, ids[name], push={"agent_hosts": ["127.0.0.1"]}
            ),
            agent=agents[name],
            prefix=f"/agents/{ids[name]}",
        )
        for name in "abd"
    }
    async with serving(*harnesses.values()) as url:
        a_url = f"{url}/agents/{ids['a']}"
        async with a2a_client(a_url, streaming=False) as client:
            sent = await send_immediately(client, user_message("go"))
            with anyio.fail_after(60):  # the delegation reached d
                await gate.wait_entered()
            standin = f"{sent.id}:delegate:1:1"

            forged = {
                "statusUpdate": {
                    "taskId": "whatever",
                    "status": {"state": "TASK_STATE_COMPLETED"},
                }
            }
            async with httpx.AsyncClient() as http:
                at_b = await http.post(
                    f"{url}/agents/{ids['b']}/a2a/push/{standin}",
                    json=forged,
                    headers={"X-A2A-Notification-Token": "guess"},
                )
                wrong_token = await http.post(
                    f"{a_url}/a2a/push/{standin}",
                    json=forged,
                    headers={"X-A2A-Notification-Token": "guess"},
                )
                no_token = await http.post(f"{a_url}/a2a/push/{standin}", json=forged)
            woken = await pushed_states(harnesses["a"], standin)
            gate.release()
            with anyio.fail_after(30):
                while True:
                    task = await client.get_task(GetTaskRequest(id=sent.id))
                    if task.status.state == TaskState.TASK_STATE_COMPLETED:
                        break
                    await anyio.sleep(0.1)
    assert (at_b.status_code, wrong_token.status_code, no_token.status_code) == (401, 401, 401)
    assert at_b.json() == {"error": "unknown delegation, or a wrong X-A2A-Notification-Token"}
    # Only d's real pushes (WORKING, before it was released) reached the stand-in.
    assert '"TASK_STATE_COMPLETED"' not in woken
    assert task.status.message.parts[0].text == "a heard: d is done"
