"""What "nothing of the victim changed" compares: the task as its owner sees it, whole."""

from __future__ import annotations

from typing import Any

from harness_core import Harness


async def snapshot(harness: Harness, task_id: str, participant: str | None) -> dict[str, Any]:
    """The owner's view of the task: state, history, artifacts, events and participants."""
    view = await harness.tasks.view(task_id, participant)
    assert view is not None, "the victim's task must exist"
    page = await harness.tasks.events(task_id, 0, participant)
    assert page is not None
    return {
        "task": view.task,
        "participants": view.participants,
        "events": [(e.seq, e.kind, e.body) for e in page.events],
    }
