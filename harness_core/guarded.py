"""How an agent's work (a turn, a model request, a tool call, a turn gate) runs inside its activity:
heartbeating when the activity is a regular one, watching the listing index for a client's
cancel, handing a local activity back when the worker stops, and telling the agent's own failure
(one line in the log, with where it was raised) from a worker that stopped or an attempt that
Temporal called off.

A mixin of ``AgentActivities`` (``harness_core.activities``).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from harness_core.store import TaskStore
from harness_core.tasks.attempts import TASK_CANCELED

__all__ = ["WORKER_GRACE", "GuardedWork"]

log = logging.getLogger("harness.worker")
T = TypeVar("T")

# A regular (non-local) activity heartbeats this often, well inside its 10 s heartbeat timeout, so a
# worker that dies mid-turn is noticed in seconds and the turn retried elsewhere; a cancel of the task
# reaches the turn with the heartbeat's answer, or from the index, which is looked at as often.
_WATCH_EVERY = 0.5
# A turn that defers writing its start (``LateStart``) writes it once it has run this long.
_FIRST_LOOK = 0.05
#: How long a stopping worker lets running activities (turns, model requests, tool calls) finish
#: before it stops them; they are run again, uncounted, when a worker polls the queue again.
WORKER_GRACE = 1.0


class GuardedWork:
    """Running an agent's work in an activity, watched."""

    store: TaskStore

    async def _guarded(
        self,
        task_id: str,
        work: Callable[[], Awaitable[T]],
        *,
        first_look: Callable[[], Awaitable[None]] | None = None,
    ) -> T:
        """Run an agent's work, heartbeating when it is a regular activity, and watching the index
        for a client's cancel (``TaskCanceled``: it may reach this worker long before the
        workflow's signal, which waits for a local activity's workflow task). A worker stop
        (``WorkerStopped``, retried freely) is told from the agent's own failure. ``first_look``
        runs before the first look at the index, which is then taken after ``_FIRST_LOOK`` (a
        ``LateStart``'s write)."""
        local = activity.info().is_local
        canceled = stopped = False
        result: list[T] = []
        failure: list[Exception] = []
        try:
            async with anyio.create_task_group() as tg:

                async def hand_back() -> None:
                    # A stopping worker cancels regular activities after its grace period, but
                    # waits for local ones: stop this one then too, so the host keeps to its
                    # grace period, and the workflow runs the turn again on the next worker.
                    nonlocal stopped
                    await activity.wait_for_worker_shutdown()
                    await anyio.sleep(WORKER_GRACE)
                    stopped = True
                    tg.cancel_scope.cancel()

                if local:
                    tg.start_soon(hand_back)

                async def watch() -> None:
                    nonlocal canceled, first_look
                    while True:
                        if not local:
                            activity.heartbeat()
                        await anyio.sleep(_WATCH_EVERY if first_look is None else _FIRST_LOOK)
                        if first_look is not None:
                            await first_look()
                            first_look = None
                        if await anyio.to_thread.run_sync(self.store.cancel_requested, task_id):
                            canceled = True
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(watch)
                try:
                    result.append(await work())
                except Exception as error:
                    # Raised as itself, not in a group: its type tells the workflow what to do.
                    failure.append(error)
                tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            if activity.is_worker_shutdown():
                # Benign: Temporal logs it at DEBUG, not as a failure with a traceback.
                raise ApplicationError(
                    "the worker stopped during this attempt",
                    type="WorkerStopped",
                    category=ApplicationErrorCategory.BENIGN,
                ) from None
            details = activity.cancellation_details()
            if details is not None and not details.cancel_requested:
                # Temporal no longer wants this attempt (its workflow moved on: a canceled task
                # ended without waiting for it, a timeout): nothing failed, so no traceback.
                raise ApplicationError(
                    "the attempt was called off",
                    type="AttemptCalledOff",
                    category=ApplicationErrorCategory.BENIGN,
                ) from None
            raise
        if failure:
            error = failure[0]
            if isinstance(error, ApplicationError):
                raise error  # ours, classified (a model's or a tool's failure)
            # The agent's own code raised: one line saying what and where (the traceback with
            # --log-level DEBUG), not one traceback per attempt from temporalio.
            log.warning(
                "task %s: the agent raised %s: %s (%s)",
                task_id,
                type(error).__name__,
                error,
                _where(error),
            )
            log.debug("the agent's failure in full", exc_info=error)
            raise ApplicationError(
                str(error), type=type(error).__name__, category=ApplicationErrorCategory.BENIGN
            ) from None
        if stopped and not result:
            raise ApplicationError(
                "the worker stopped during this attempt",
                type="WorkerStopped",
                category=ApplicationErrorCategory.BENIGN,
            )
        if not result:
            # Only the watcher cancels the group without a result.
            assert canceled
            raise ApplicationError(
                "the task was canceled",
                type=TASK_CANCELED,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            )
        return result[0]


def _where(error: BaseException) -> str:
    """Where an exception was raised: the innermost frame's file, line and function."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "no traceback"
    last = frames[-1]
    return f"{last.filename}:{last.lineno}, in {last.name}"
