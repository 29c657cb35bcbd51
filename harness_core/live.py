"""The live fan-out: what a turn emits reaches the streams of the same process at once.

A turn's progress, artifacts and text deltas are published here as they happen (from the Temporal
loop, which is another thread under Trio) and delivered to every open stream of that task in this
process; the durable copy follows in the task's event log when the turn ends. Streams served by another
process see the durable log, and a running turn's latest progress from the listing index (a stream
reads that only for a task whose turn does not run, and did not just run, here: ``turn_here``).
Each agent (``Harness``) owns its hub. A subscriber that falls too far behind stops receiving live events
(``overflowed``) and relies on the durable log alone, so a slow client never holds memory or the turn.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Any

import anyio
import attrs

from harness_core.bridge import loop_caller
from harness_core.payloads import ProtoJSON
from harness_core.retention import MAX_KEPT, MAX_PENDING, RECENT_TURNS

__all__ = ["LiveEvent", "LiveHub", "Subscription"]


@attrs.frozen
class LiveEvent:
    """A status or artifact update as emitted (ProtoJSON, large content by reference)."""

    kind: str
    body: ProtoJSON


class Subscription:
    """One stream's view of a task's live events."""

    def __init__(
        self, call: Callable[[Callable[[], None]], None], earlier: list[LiveEvent], complete: bool
    ) -> None:
        self._call = call
        self._lock = threading.Lock()
        self._pending: deque[LiveEvent] = deque(earlier)
        self._event = anyio.Event()
        #: The live path missed events: the stream relies on the durable log alone.
        self.overflowed = not complete
        self._nudged = False

    def _push(self, event: LiveEvent) -> None:
        """From any thread."""
        with self._lock:
            if self.overflowed:
                return
            if len(self._pending) >= MAX_PENDING:
                self.overflowed = True
                self._pending.clear()
            else:
                self._pending.append(event)
        self._call(self._wake)

    def _wake(self) -> None:
        self._event.set()

    def _nudge(self) -> None:
        """From any thread."""
        with self._lock:
            self._nudged = True
        self._call(self._wake)

    def take_nudge(self) -> bool:
        """Whether, since the last call, a turn of the task ended in this process or its store
        entry was written here: the stream reads the task now, and again soon."""
        with self._lock:
            nudged, self._nudged = self._nudged, False
        return nudged

    def drain(self) -> list[LiveEvent]:
        """The events published since the last drain, oldest first."""
        with self._lock:
            events = list(self._pending)
            self._pending.clear()
        return events

    async def wait(self, seconds: float) -> None:
        """Return when an event is published, or after ``seconds``."""
        with anyio.move_on_after(seconds):
            await self._event.wait()
        self._event = anyio.Event()


class LiveHub:
    """Subscriptions by (agent, task). Thread-safe; publishing never blocks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscriptions: dict[tuple[str, str], set[Subscription]] = {}
        # The running attempt's events so far, per task, and whether none was dropped.
        self._kept: dict[tuple[str, str], tuple[list[LiveEvent], bool]] = {}
        # Tasks whose latest attempt here ended (oldest first, at most RECENT_TURNS).
        self._ended: dict[tuple[str, str], None] = {}

    @contextlib.asynccontextmanager
    async def subscribe(self, agent_id: str, task_id: str) -> AsyncGenerator[Subscription, None]:
        """Receive the task's live events while the block runs, starting with those its running
        turn emitted before (a stream that joins mid-turn misses nothing)."""
        key = (agent_id, task_id)
        with self._lock:
            kept, complete = self._kept.get(key, ([], True))
            subscription = Subscription(loop_caller(), list(kept), complete)
            self._subscriptions.setdefault(key, set()).add(subscription)
        try:
            yield subscription
        finally:
            with self._lock:
                subscriptions = self._subscriptions.get(key)
                if subscriptions is not None:
                    subscriptions.discard(subscription)
                    if not subscriptions:
                        del self._subscriptions[key]

    def publish(
        self, agent_id: str, task_id: str, kind: str, body: dict[str, Any], *, keep: bool = True
    ) -> None:
        """An event of a running turn, or (``keep`` false: not shown to streams that subscribe
        later) of a delegation of the task. From any thread."""
        key = (agent_id, task_id)
        event = LiveEvent(kind=kind, body=body)
        with self._lock:
            if keep:
                kept, complete = self._kept.setdefault(key, ([], True))
                if complete and len(kept) < MAX_KEPT:
                    kept.append(event)
                elif complete:
                    self._kept[key] = ([], False)
            subscriptions = list(self._subscriptions.get(key, ()))
        for subscription in subscriptions:
            subscription._push(event)  # pyright: ignore[reportPrivateUsage]

    def listening(self, agent_id: str, task_id: str) -> bool:
        """Whether a stream of this process follows the task now."""
        with self._lock:
            return (agent_id, task_id) in self._subscriptions

    def end(self, agent_id: str, task_id: str) -> None:
        """A turn's attempt ended: its events are (or will be) in the durable log, or void. The
        task's streams are nudged to read it again soon."""
        key = (agent_id, task_id)
        with self._lock:
            self._kept.pop(key, None)
            self._ended.pop(key, None)
            self._ended[key] = None
            if len(self._ended) > RECENT_TURNS:
                del self._ended[next(iter(self._ended))]
        self.stored(agent_id, task_id)

    def turn_here(self, agent_id: str, task_id: str) -> bool:
        """Whether the task's turn runs in this process, or one of its recent turns ran here:
        its streams here have its events live, and then its durable copy. The listing index's
        progress would only repeat them (or, read between the turn's end and its durable write,
        show the latest before the ones it follows)."""
        key = (agent_id, task_id)
        with self._lock:
            return key in self._kept or key in self._ended

    def stored(self, agent_id: str, task_id: str) -> None:
        """The task's store entry changed: its streams in this process read it now."""
        with self._lock:
            subscriptions = list(self._subscriptions.get((agent_id, task_id), ()))
        for subscription in subscriptions:
            subscription._nudge()  # pyright: ignore[reportPrivateUsage]
