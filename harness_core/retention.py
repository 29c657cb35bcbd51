"""How long things are kept, in one place: idle tasks, ended tasks, the claim check's payloads,
and what a live stream may hold.

- **Idle expiry** (``[retention] idle_timeout``): a task that waits for input longer than this ends
  (``[retention] expired_state``); the task workflow's timer decides it through
  :func:`idle_limit` and says it with :func:`expiry_text` (pure: workflow code calls them).
- **The sweep** (``[retention] ended_ttl``): the heartbeat's activity removes the records of tasks
  that ended longer ago, leaving tombstones in the index, then releases their references to the
  claim check's payloads and collects the payloads no task refers to any more
  (:class:`Sweep`; the payload store's own rules keep a racing ``put`` safe). Hosts that share
  a store sweep one at a time: the sweep runs under a lease in the store (:data:`SWEEP_LEASE`).
- **Stream caps**: what one open stream may have waiting (:data:`MAX_PENDING`) and what a running
  turn keeps for streams that join late (:data:`MAX_KEPT`); past them a stream reads the durable log
  alone, so a slow client never holds memory.

This module imports nothing with I/O at module level: the task state machine uses its pure part.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness_core.store import TaskStore
    from harness_core.temporal.codec import PayloadStore

__all__ = ["MAX_KEPT", "MAX_PENDING", "SWEEP_LEASE", "Sweep", "expiry_text", "idle_limit"]

log = logging.getLogger("harness.retention")

#: Live events one subscriber may have waiting before it gives up on the live path.
MAX_PENDING = 4096
#: Live events of a running attempt kept for streams that join mid-turn.
MAX_KEPT = 1024
#: Tasks a hub remembers a turn of as having run in this process (its streams then take that
#: task's progress from the live fan-out, not from the listing index).
RECENT_TURNS = 4096
#: Ended tasks removed by one statement of the sweep (it goes on until fewer are left).
SWEEP_BATCH = 1000
#: The lease a sweep holds in the store, and for how long at most (a host killed mid-sweep
#: leaves it to run out).
SWEEP_LEASE = "retention-sweep"
SWEEP_LEASE_SECONDS = 600.0


def idle_limit(idle_seconds: float, waiting_for_input: bool) -> float | None:
    """How long a task may still wait before it expires (None: as long as it takes)."""
    if not idle_seconds or not waiting_for_input:
        return None
    return idle_seconds


def expiry_text(idle_seconds: float) -> str:
    """What an expired task says, in the configuration's words."""
    waited = f"{idle_seconds / 86400:g}d" if idle_seconds >= 86400 else f"{idle_seconds:g}s"
    return (
        f"this task expired: it waited for input for {waited} "
        "([retention] idle_timeout); start a new task"
    )


class Sweep:
    """The ended-task sweep of one agent: its store, then the claim check's payloads."""

    def __init__(
        self,
        agent_id: str,
        store: TaskStore,
        payloads: PayloadStore | None,
        ended_ttl: float,
    ) -> None:
        self.agent_id = agent_id
        self.store = store
        self.payloads = payloads
        # 0: ended tasks are kept.
        self.ended_ttl = ended_ttl
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        # One sweep at a time in this process too: a retried heartbeat whose first attempt's
        # thread still sweeps does not start a second.
        self._running = threading.Lock()

    def __call__(self) -> tuple[int, int]:
        """Remove what ended longer than ``ended_ttl`` ago: tasks, then the payloads that no task
        refers to any more. Returns how many of each; (0, 0) when another host holds the sweep's
        lease. Blocking: run it in a worker thread."""
        if not self.ended_ttl:
            return 0, 0
        if not self._running.acquire(blocking=False):
            log.info("agent %s: a sweep is still running in this process", self.agent_id)
            return 0, 0
        try:
            # A holder per sweep: a lease is never "renewed" by another sweep of this process.
            holder = f"{self.holder}:{uuid.uuid4().hex[:8]}"
            if not self.store.take_lease(SWEEP_LEASE, holder, SWEEP_LEASE_SECONDS):
                log.info("agent %s: another host is sweeping; this one leaves it", self.agent_id)
                return 0, 0
            try:
                return self._sweep()
            finally:
                self.store.release_lease(SWEEP_LEASE, holder)
        finally:
            self._running.release()

    def _sweep(self) -> tuple[int, int]:
        before = int((time.time() - self.ended_ttl) * 1_000_000)
        tasks = 0
        payloads = 0
        while True:
            swept = self.store.sweep(before, SWEEP_BATCH)
            tasks += len(swept)
            if self.payloads is not None:
                self.payloads.release(swept)
            if len(swept) < SWEEP_BATCH:
                break
        if self.payloads is not None:
            # Stored within ended_ttl: perhaps for a task that is only starting.
            payloads = self.payloads.collect(self.ended_ttl)
        if tasks or payloads:
            log.info(
                "agent %s: removed %d ended task(s) and %d payload(s) past [retention] ended_ttl",
                self.agent_id,
                tasks,
                payloads,
            )
        return tasks, payloads
