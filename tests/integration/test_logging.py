"""What the log says (issue 16): a client's cancel and an agent that raises are one line each, not
tracebacks; the access log, off by default, is one line per request without the query string."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest
from a2a.types import CancelTaskRequest, TaskState

from harness_core import Gate, ScriptedModel
from harness_core.agents.turn import TurnContext, TurnResult
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import send_blocking, send_immediately

pytestmark = pytest.mark.anyio


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.exc_info is not None and r.levelno >= logging.INFO
    ]


async def test_a_cancel_is_one_info_line_and_no_traceback(make_harness, caplog):
    caplog.set_level(logging.INFO)
    gate = Gate()
    harness = make_harness(ScriptedModel(["late"], gate=gate))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_immediately(client, user_message("hold on"))
        with anyio.fail_after(20):
            while gate.entered < 1:
                await anyio.sleep(0.02)
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        await anyio.sleep(1.0)  # the turn's attempt ends on the worker meanwhile
        gate.release()
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert _tracebacks(caplog) == []
    lines = [r.getMessage() for r in caplog.records if "canceled by a client" in r.getMessage()]
    assert lines == [f"task {task.id} canceled by a client"]


async def test_an_agent_that_raises_is_one_warning_line_per_attempt(make_harness, caplog):
    caplog.set_level(logging.INFO)

    async def boom(ctx: TurnContext) -> TurnResult:
        raise RuntimeError("agent exploded")

    harness = make_harness(options={"agent": boom})
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("go"))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert _tracebacks(caplog) == []
    raised = [r for r in caplog.records if "the agent raised RuntimeError" in r.getMessage()]
    assert len(raised) == 3  # one per attempt
    assert all(r.levelno == logging.WARNING for r in raised)
    assert "agent exploded" in raised[0].getMessage()
    assert "test_logging.py" in raised[0].getMessage()  # where it was raised
    # The workflow says what comes next: two retries, then the end; no dict of Temporal's info.
    assert [r.getMessage() for r in caplog.records if r.name == "harness.workflow"] == [
        f"task {task.id}: run_turn failed (attempt 1 of 3); trying again",
        f"task {task.id}: run_turn failed (attempt 2 of 3); trying again",
        f"turn 1 of task {task.id} failed; the task fails",
    ]


@pytest.mark.parametrize("on", [True, False], ids=["access-log", "default-off"])
async def test_the_access_log_is_one_line_per_request_without_the_query(make_harness, caplog, on):
    caplog.set_level(logging.INFO)
    harness = make_harness(server={"access_log": on})
    async with serving(harness) as url, httpx.AsyncClient(base_url=url) as http:
        card = await http.get("/.well-known/agent-card.json?token=sekrit")
    assert card.status_code == 200
    access = [r.getMessage() for r in caplog.records if r.name == "harness.access"]
    if not on:
        assert access == []
        return
    [line] = [a for a in access if "agent-card.json" in a]
    assert '"GET /.well-known/agent-card.json HTTP/1.1" 200' in line
    assert "sekrit" not in line
