"""The heartbeat makes the listing index right about tasks whose workflow ended without the store
learning of it: a terminated workflow's task ends FAILED saying so, whether it was working or
waiting for its sender, and a completed one whose final write the store lost is stored again from
the workflow's result."""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import anyio
import pytest
from a2a.types import GetTaskRequest, TaskState

from harness_core import Ask, Complete, TurnContext
from harness_core.agents.turn import TurnResult
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import send_blocking, send_immediately, wait_for_state

pytestmark = pytest.mark.anyio


class Stuck:
    """A turn that waits until the test lets it go (or its activity is called off)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    async def turn(self, ctx: TurnContext) -> Complete:
        self.entered.set()
        while not self.release.is_set():
            await anyio.sleep(0.05)
        return Complete("done")


def reconciling(make_harness, monkeypatch, age: str, answer: TurnResult, agent: object = None):
    """A harness whose heartbeat (every second) reconciles tasks after half a second of ``age``
    (``RECONCILE_AFTER`` or ``RECONCILE_WAITING_AFTER``), serving ``agent`` or, when none is
    given, one whose every turn returns ``answer``."""
    monkeypatch.setattr(f"harness_core.tasks.reconcile.{age}", 0.5)

    class Answering:
        async def turn(self, ctx: TurnContext) -> TurnResult:
            return answer

    return make_harness(agent or Answering(), heartbeat={"interval": "1s"})


async def terminate(harness, task_id: str) -> None:
    """Terminate the task's workflow, as an operator would."""
    connection = harness.tasks.connection

    async def terminating() -> None:
        await connection.client.get_workflow_handle(task_id).terminate(reason="an operator's test")

    await connection.bridge.call(terminating)


async def test_a_terminated_workflows_task_ends_failed_saying_so(make_harness, monkeypatch):
    """Given a task whose workflow an operator terminates mid-turn (the index shows it WORKING),
    when the agent's heartbeat runs, then the task reads FAILED, saying its workflow was
    terminated; before the reconciliation it read WORKING for good."""
    agent = Stuck()
    harness = reconciling(make_harness, monkeypatch, "RECONCILE_AFTER", Complete(), agent)
    try:
        async with serving(harness) as url, a2a_client(url, streaming=False) as client:
            task = await send_immediately(client, user_message("work"))
            with anyio.fail_after(30):
                while not agent.entered.is_set():
                    await anyio.sleep(0.05)
            await terminate(harness, task.id)
            ended = await wait_for_state(client, task.id, TaskState.TASK_STATE_FAILED)
    finally:
        agent.release.set()
    assert "terminated" in ended.status.message.parts[0].text
    assert ended.history[0].parts[0].text == "work"


async def test_a_completed_task_whose_end_the_store_lost_is_stored_from_its_result(
    make_harness, monkeypatch
):
    """Given a completed task whose final write the store lost (its index row back to WORKING,
    its record gone, as a refused write leaves them), when the heartbeat runs, then the task
    reads COMPLETED again, whole, from its workflow's result."""
    harness = reconciling(make_harness, monkeypatch, "RECONCILE_AFTER", Complete("answered"))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        done = await send_blocking(client, user_message("question"))
        db = sqlite3.connect(harness.settings.store_path, timeout=10)
        try:
            with db:
                db.execute(
                    "UPDATE task_index SET closed = 0, state = 'TASK_STATE_WORKING', "
                    "status = ?, written_at = ? WHERE task_id = ?",
                    (json.dumps({"state": "TASK_STATE_WORKING"}), time.time_ns() // 1000, done.id),
                )
                db.execute("DELETE FROM tasks WHERE task_id = ?", (done.id,))
        finally:
            db.close()
        lost = await client.get_task(GetTaskRequest(id=done.id))
        again = await wait_for_state(client, done.id, TaskState.TASK_STATE_COMPLETED)
    assert lost.status.state == TaskState.TASK_STATE_WORKING
    assert [m.parts[0].text for m in again.history] == ["question", "answered"]
    assert again.status.message.parts[0].text == "answered"


async def test_a_task_waiting_for_input_whose_workflow_was_terminated_ends_failed(
    make_harness, monkeypatch
):
    """Given a task that asked its sender (INPUT_REQUIRED) and whose workflow an operator then
    terminates, when the heartbeat runs past the waiting age, then the task reads FAILED,
    saying its workflow was terminated; before, it read INPUT_REQUIRED for good."""
    harness = reconciling(make_harness, monkeypatch, "RECONCILE_WAITING_AFTER", Ask("which one?"))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        asked = await send_blocking(client, user_message("pick one"))
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        await terminate(harness, asked.id)
        ended = await wait_for_state(client, asked.id, TaskState.TASK_STATE_FAILED)
    assert "terminated" in ended.status.message.parts[0].text
    assert [m.parts[0].text for m in ended.history][:2] == ["pick one", "which one?"]
