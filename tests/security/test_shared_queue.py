"""Abuse case 4: a second agent configured onto the first one's namespace and task queue.

Its worker would take the first agent's workflows and activities (and answer its users with another
model). The claims refuse it at start, naming the clash and the holder, before any connection or
worker: the queue's only poller stays the first agent's, and the first agent's tasks are answered by
its own model alone.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from harness_core import AgentState, Harness, HarnessConflictError, ScriptedModel
from tests.conftest import a2a_client, agent_settings, serving, unique_id, user_message
from tests.integration.test_a2a_methods import send_blocking

pytestmark = pytest.mark.anyio


async def pollers(harness: Harness, queue: str) -> set[str]:
    """The identities polling ``queue`` for workflow tasks, as Temporal reports them."""
    connection = harness.tasks._connection  # pyright: ignore[reportPrivateUsage]

    async def describe(client: Client) -> set[str]:
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        return {p.identity for p in response.pollers}

    client = connection.client
    return await connection.bridge.call(lambda: describe(client))


@pytest.mark.parametrize("spelling", ["same", "localhost"])
async def test_a_second_agent_on_the_same_namespace_and_queue_is_refused_before_any_worker(
    tmp_path: Path, temporal_address: str, spelling: str
):
    """Also when the second configuration spells the cluster's address another way."""
    queue = unique_id("shared")
    owner_model = ScriptedModel(["from the owner"])
    intruder_model = ScriptedModel(["from the intruder"])
    owner = Harness(
        agent_settings(tmp_path / "owner", temporal_address, temporal={"task_queue": queue}),
        model=owner_model,
    )
    address = temporal_address
    if spelling == "localhost":
        address = temporal_address.replace("127.0.0.1", "localhost")
    intruder = Harness(
        agent_settings(tmp_path / "intruder", address, temporal={"task_queue": queue}),
        model=intruder_model,
    )
    async with serving(owner) as url:
        with anyio.fail_after(10):  # the worker's first poll may still be on its way
            while not (before := await pollers(owner, queue)):
                await anyio.sleep(0.05)
        with pytest.raises(HarnessConflictError) as clash:
            async with intruder:
                pass
        async with a2a_client(url, streaming=False) as client:
            answers = [
                (await send_blocking(client, user_message(f"job {n}"))).history[-1].parts[0].text
                for n in range(4)
            ]
        after = await pollers(owner, queue)
    message = str(clash.value)
    assert f"task queue {queue!r}" in message
    assert f"agent {owner.agent_id!r}" in message
    assert intruder.state is AgentState.STOPPED
    assert answers == ["from the owner"] * 4
    assert intruder_model.turns == []
    assert len(before) == 1 and next(iter(before)).endswith(f"/{owner.agent_id}")
    assert after == before
