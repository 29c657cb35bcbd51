"""Every recorded history replays on the current workflow code: a change that would break a running
task fails here (put it behind ``workflow.patched``; see docs/workflows.md)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from harness_core.converter import data_converter
from harness_core.delegation.workflow import DelegationWorkflow
from harness_core.tasks.workflow import TaskWorkflow
from harness_core.temporal.heartbeat import HeartbeatWorkflow
from harness_core.worker import workflow_runner

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the Replayer runs on asyncio


def test_there_are_recorded_histories_of_every_kind() -> None:
    kinds = {path.name.rsplit("-", 1)[0] for path in HISTORIES}
    assert kinds >= {
        "ask-answer",
        "llm-tools",
        "llm-tools-local",
        "continue-as-new",
        "cancel",
        "failure",
        "delegate-stream",
        "delegate-follow-standin",
        "turn-end",
        "turn-end-reply",
    }


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_a_recorded_history_replays_on_the_current_workflow(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, await anyio.Path(path).read_text())
    replayer = Replayer(
        workflows=[TaskWorkflow, HeartbeatWorkflow, DelegationWorkflow],
        data_converter=data_converter,
        workflow_runner=workflow_runner(),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
