"""The task and stand-in workflows run outside Temporal's sandbox in production (it re-imports
their modules for every run); here every recorded history replays inside it, so time, randomness
or I/O in workflow code fails loudly in CI (``harness_core.temporal.names.SANDBOXED``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_recorded_history_replays_inside_the_sandbox() -> None:
    probe = (
        "from harness_core.tasks.workflow import TaskWorkflow\n"
        "from harness_core.delegation.workflow import DelegationWorkflow\n"
        "from temporalio.workflow import _Definition\n"
        "assert all(_Definition.must_from_class(w).sandboxed "
        "for w in (TaskWorkflow, DelegationWorkflow))\n"
    )
    env = {**os.environ, "HARNESS_WORKFLOW_SANDBOX": "1"}
    checked = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    replayed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "replay" / "test_replay.py"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replayed.returncode == 0, replayed.stdout[-4000:]
    assert " passed" in replayed.stdout
