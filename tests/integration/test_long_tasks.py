"""Tasks that hold real conversations: thousands of messages across continue-as-new, with history that
grows linearly, and content far over Temporal's payload limit carried by the claim check."""

from __future__ import annotations

import anyio
import pytest
from a2a.types import GetTaskRequest, TaskState
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from harness_core import Ask, Complete, FilePart, TurnContext
from harness_core.agents.turn import Artifact, TurnResult
from harness_core.tasks.state import RUN_MESSAGES
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import send_blocking, send_immediately, wait_for_state

pytestmark = pytest.mark.anyio

MESSAGES = 5000
SENDERS = 8
ACCEPTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # reads Temporal histories with the client directly


async def history_per_run(client: Client, task_id: str) -> list[tuple[int, int, int]]:
    """(events, bytes, messages accepted) of each run of the task's workflow, oldest first."""
    runs = [w async for w in client.list_workflows(f"WorkflowId = '{task_id}'")]
    sizes: list[tuple[str, int, int, int]] = []
    for run in runs:
        history = await client.get_workflow_handle(task_id, run_id=run.run_id).fetch_history()
        accepted = sum(1 for e in history.events if e.event_type == ACCEPTED)
        size = sum(e.ByteSize() for e in history.events)
        sizes.append((run.start_time.isoformat(), len(history.events), size, accepted))
    return [(events, size, accepted) for _, events, size, accepted in sorted(sizes)]


@pytest.mark.timeout(900)
async def test_a_task_of_five_thousand_messages_continues_as_new_and_stays_readable(make_harness):
    async def agent(ctx: TurnContext) -> TurnResult:
        return Ask(f"noted {len(ctx.new_messages)}")

    harness = make_harness(agent)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        first = await send_blocking(client, user_message("message 0"))
        sent = iter(range(1, MESSAGES))

        async def sender() -> None:
            for n in sent:
                await send_immediately(client, user_message(f"message {n}", task_id=first.id))

        async with anyio.create_task_group() as tg:
            for _ in range(SENDERS):
                tg.start_soon(sender)
        with anyio.fail_after(720):  # 90-150 s alone on 2 cores; longer beside other tests
            while True:
                task = await client.get_task(GetTaskRequest(id=first.id))
                users = [m for m in task.history if m.role == 1]
                if (
                    len(users) == MESSAGES
                    and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
                ):
                    break
                await anyio.sleep(0.2)
        # An early message, archived runs ago, is still recognised as a retry.
        again = await send_blocking(
            client, user_message("message 0", message_id=users[0].message_id, task_id=first.id)
        )
        runs = await history_per_run(harness.tasks.connection.client, first.id)
    assert sorted(int(m.parts[0].text.split()[1]) for m in users) == list(range(MESSAGES))
    assert len([m for m in again.history if m.role == 1]) == MESSAGES
    assert len(runs) >= MESSAGES // (2 * RUN_MESSAGES)
    per_message = [size / accepted for _, size, accepted in runs if accepted]
    print(
        f"\nruns: {len(runs)}; history bytes per message, per run: {[round(b) for b in per_message]}"
    )
    # Linear growth: a late run costs per message what an early one did.
    assert max(per_message[1:-1]) <= 1.5 * per_message[0]
    assert all(events < 10_240 for events, _, _ in runs)


async def test_a_five_megabyte_artifact_completes_and_stays_readable(make_harness):
    blob = bytes(range(256)) * (5 * 4096)  # 5 MiB

    async def agent(ctx: TurnContext) -> TurnResult:
        for _ in range(3000):  # a long reply, streamed in 1 KB deltas
            await ctx.delta("x" * 1000)
        part = FilePart(data=blob, name="big.bin", media_type="application/octet-stream")
        return Complete("here", artifacts=[Artifact((part,), name="big")])

    harness = make_harness(agent)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("big please"))
        again = await wait_for_state(client, task.id, TaskState.TASK_STATE_COMPLETED)
    by_name = {a.name: a for a in again.artifacts}
    assert by_name["big"].parts[0].raw == blob
    assert sum(len(p.text) for p in by_name["response"].parts) == 3_000_000
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
