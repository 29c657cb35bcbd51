"""The activities refuse another agent's work (two agents polling one task queue across processes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from harness_core import ScriptedModel
from harness_core.activities import AgentActivities
from harness_core.payloads import Archive, TaskRecord, TurnRequest
from harness_core.store import TaskStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # activities run on Temporal's asyncio loop


def turn(agent_id: str) -> TurnRequest:
    return TurnRequest(
        agent_id=agent_id,
        task_id="t",
        context_id="c",
        number=1,
        archived=0,
        messages=({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]},),
        new_ids=("m",),
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
            await env.run(activities.run_turn, turn("alpha"))
        own = await env.run(activities.run_turn, turn("beta"))
        record = TaskRecord(
            task_id="t",
            context_id="c",
            agent_id="alpha",
            state="TASK_STATE_COMPLETED",
            status={"state": "TASK_STATE_COMPLETED"},
            participants=(),
            updated_at="2026-01-01T00:00:00Z",
            messages=0,
            events=0,
        )
        run = Archive("t", "alpha", "c", 0, (), (), ())
        with pytest.raises(ApplicationError, match="reached the worker of agent"):
            env.run(activities.store_record, run, record)
        assert store.get("t") is None
    finally:
        store.close()
    assert own.kind == "complete"
    assert own.message == ({"text": "beta's answer"},)
    assert len(model.turns) == 1


async def test_the_echo_model_keeps_nothing_of_the_turns_it_served() -> None:
    """The embedded default serves for as long as its process runs: a turn leaves nothing behind
    (it used to keep every turn's input and context, growing without bound under load); a
    scripted model, for tests, still records them."""
    from harness_core import Complete, EchoModel, ScriptedModel
    from harness_core.agents.context import ActivityTurnContext
    from harness_core.agents.parts import message_from_json

    message = message_from_json({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]})
    echo, scripted = EchoModel(), ScriptedModel()
    for model in (echo, scripted):
        for number in (1, 2):
            ctx = ActivityTurnContext(
                task_id="t1", context_id="c1", number=number, history=(message,), new_ids=("m1",)
            )
            result = await model.turn(ctx)
            assert isinstance(result, Complete)
    assert echo.turns == [] and echo.contexts == []
    assert len(scripted.turns) == 2
