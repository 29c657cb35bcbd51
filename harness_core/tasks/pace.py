"""How long an agent's turns take in this process, so that long ones stop holding workflow tasks.

A turn runs as a local activity when every sender waits for it (one workflow task, no round trip
through the task queue), which is right for a turn of a second or two. A local activity holds its
workflow task, though: one that lasts more than a few seconds makes Temporal log "workflow task
duration exceeded" and keeps reads and cancels of the task waiting. So once a turn of the agent has
taken ``LONG_TURN`` seconds or more, new tasks of the agent run their turns as regular activities
for ``MEMORY`` seconds (``TaskService`` reads this when it starts a task), and the task whose turn
was long does so for the rest of its life (its workflow notices by itself).
"""

from __future__ import annotations

import threading
import time

from harness_core.tasks.state import LONG_TURN

__all__ = ["LONG_TURN", "TurnPace"]
#: How long (seconds) the agent's new tasks keep to regular activities after a long turn.
MEMORY = 600.0


class TurnPace:
    """Thread-safe: turns end on the Temporal thread, tasks start on the host's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._long_at: float | None = None

    def note(self, seconds: float) -> None:
        """A turn (or one model request) ran for ``seconds``."""
        if seconds >= LONG_TURN:
            with self._lock:
                self._long_at = time.monotonic()

    def long(self) -> bool:
        """A turn of the agent was long in the last ``MEMORY`` seconds."""
        with self._lock:
            return self._long_at is not None and time.monotonic() - self._long_at < MEMORY
