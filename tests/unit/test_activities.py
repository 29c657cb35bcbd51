"""The activities refuse another agent's work (two agents polling one task queue across processes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from harness_core import ScriptedModel
from harness_core.activities import AgentActivities
from harness_core.payloads import ChatMessage, TaskRecord, TurnInput
from harness_core.store import TaskStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # activities run on Temporal's asyncio loop


def turn(agent_id: str) -> TurnInput:
    return TurnInput(
        agent_id=agent_id,
        task_id="t",
        context_id="c",
        number=1,
        history=(ChatMessage(role="user", text="hi", message_id="m"),),
    )


async def test_a_turn_of_another_agent_is_refused_and_never_reaches_the_model(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(["beta's answer"])
    store = TaskStore(tmp_path / "beta.sqlite3")
    activities = AgentActivities("beta", model, store)
    env = ActivityEnvironment()
    try:
        with pytest.raises(
            ApplicationError, match="agent 'alpha' reached the worker of agent 'beta'"
        ):
            await env.run(activities.model_turn, turn("alpha"))
        own = await env.run(activities.model_turn, turn("beta"))
        record = TaskRecord(
            task_id="t",
            context_id="c",
            agent_id="alpha",
            state="TASK_STATE_COMPLETED",
            task={},
            events=(),
            message_ids=(),
            participants=(),
            updated_at="2026-01-01T00:00:00Z",
        )
        with pytest.raises(ApplicationError, match="reached the worker of agent"):
            env.run(activities.store_record, record)
        assert store.get("t") is None
    finally:
        store.close()
    assert own.text == "beta's answer"
    assert len(model.turns) == 1
