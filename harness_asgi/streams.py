"""The handler's stream helpers: what ``HarnessRequestHandler._follow`` uses to follow a task.

A stream shows a task's events from its durable log, each with ``metadata["harness.seq"]``
(``SEQ_KEY``), its position in the log; a turn running in this process reaches the stream live
first, and ``Shown`` remembers what it showed so that the durable copy is left out. A turn running
elsewhere shows its latest progress from the listing index (``indexed_progress``). A read of the log
that fails for a reason of ours is retried, backing off (``patient_poll``), before the stream ends.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, cast

import anyio
from a2a.types import TaskArtifactUpdateEvent, TaskStatusUpdateEvent
from a2a.utils.errors import A2AError
from google.protobuf.json_format import ParseDict

from harness_core import errors
from harness_core.live import LiveEvent
from harness_core.payloads import TERMINAL_STATES, EventPage, TaskEvent, TaskView
from harness_core.tasks.service import TaskService

__all__ = [
    "SEQ_KEY",
    "Shown",
    "ended",
    "event_proto",
    "indexed_progress",
    "live_kind",
    "patient_poll",
    "status_message_id",
]

log = logging.getLogger("harness.http")

SEQ_KEY = "harness.seq"


def event_proto(
    event: TaskEvent,
) -> TaskStatusUpdateEvent | TaskArtifactUpdateEvent:
    proto: TaskStatusUpdateEvent | TaskArtifactUpdateEvent
    body = event.body
    if event.kind == "status":
        proto = ParseDict(body, TaskStatusUpdateEvent(), ignore_unknown_fields=True)
    else:
        proto = ParseDict(body, TaskArtifactUpdateEvent(), ignore_unknown_fields=True)
    proto.metadata[SEQ_KEY] = event.seq
    return proto


def status_message_id(body: dict[str, Any]) -> str:
    status = cast("dict[str, Any]", body.get("status") or {})
    message = cast("dict[str, Any]", status.get("message") or {})
    return str(message.get("messageId", ""))


def live_kind(event: LiveEvent) -> Literal["status", "artifact"]:
    return "status" if event.kind == "status" else "artifact"


class Shown:
    """What a stream showed live, so the durable copy of it is not shown again."""

    def __init__(self) -> None:
        self._artifacts: dict[str, bool] = {}  # id -> shown from its first chunk
        self._messages: set[str] = set()
        # Progress shown from the listing index (a turn in another process), live or not.
        self._indexed: set[str] = set()

    def note(self, event: LiveEvent) -> None:
        if event.kind == "status":
            self._messages.add(status_message_id(event.body))
            return
        artifact_id = _artifact_id(event.body)
        if not event.body.get("append"):
            self._artifacts[artifact_id] = True
        else:
            self._artifacts.setdefault(artifact_id, False)

    def note_indexed(self, body: dict[str, Any]) -> None:
        self._indexed.add(status_message_id(body))

    def covers_indexed(self, event: TaskEvent) -> bool:
        """Whether ``event`` is the durable copy of progress shown from the index."""
        if event.kind != "status" or status_message_id(event.body) not in self._indexed:
            return False
        self._indexed.discard(status_message_id(event.body))
        return True

    def covers(self, event: TaskEvent) -> bool:
        """Whether the stream showed ``event`` live already (forgotten once its copy passed)."""
        if event.kind == "status":
            message_id = status_message_id(event.body)
            if message_id in self._messages:
                self._messages.discard(message_id)
                return True
            return False
        artifact_id = _artifact_id(event.body)
        whole = self._artifacts.get(artifact_id)
        if whole is not None and event.body.get("lastChunk"):
            del self._artifacts[artifact_id]
        return bool(whole)


def _artifact_id(body: dict[str, Any]) -> str:
    artifact = cast("dict[str, Any]", body.get("artifact") or {})
    return str(artifact.get("artifactId", ""))


#: A stream's read that fails for a reason of ours (a locked store, a slow Temporal call) is tried
#: this many times, backing off, before the stream ends with an internal error.
_POLL_ATTEMPTS = 4


async def patient_poll(
    tasks: TaskService, task_id: str, after: int, participant: str | None
) -> EventPage:
    delay = 0.25
    for attempt in range(1, _POLL_ATTEMPTS + 1):
        try:
            return await tasks.poll(task_id, after, participant)
        except (A2AError, errors.HarnessError):
            raise
        except Exception as exc:
            if attempt == _POLL_ATTEMPTS:
                raise
            log.warning(
                "a stream's read of task %s failed (%s); retrying in %.2fs",
                task_id,
                type(exc).__name__,
                delay,
            )
        await anyio.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def indexed_progress(task_id: str, view: TaskView) -> LiveEvent | None:
    """The running turn's latest progress as the task's status shows it (WORKING, with a
    message), or None."""
    status = cast("dict[str, Any]", view.task.get("status") or {})
    if status.get("state") != "TASK_STATE_WORKING" or not status.get("message"):
        return None
    message = cast("dict[str, Any]", status["message"])
    if "harness.delegation" in cast("dict[str, Any]", message.get("metadata") or {}):
        return None  # another agent's progress, relayed: it has its own way to the stream
    body = {"taskId": task_id, "contextId": view.task.get("contextId", ""), "status": status}
    return LiveEvent(kind="status", body=body)


def ended(view: TaskView) -> bool:
    return view.closed or view.state in TERMINAL_STATES
