"""How a task's workflow runs an activity: one attempt per schedule, its own retries, its own count.

Temporal's retry policy cannot tell an agent that failed from a worker that stopped under it, so the
workflow retries itself. A failure of the agent counts against the attempts (and waits with backoff,
longer when the provider asked for it); a worker that stopped (shutdown, crash: the attempt is
cancelled or stops heartbeating) is retried at once without counting, but only a few times in a row:
an agent that blocks its worker's event loop stops the heartbeats of every attempt, and must end
rather than loop until the history is full.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutError,
    TimeoutType,
)

from harness_core.payloads import TaskStart
from harness_core.temporal.workflow_log import log

__all__ = [
    "HEARTBEAT_TIMEOUT",
    "MODEL_ATTEMPTS",
    "STALLED",
    "TASK_CANCELED",
    "TOOL_ATTEMPTS",
    "TURN_ATTEMPTS",
    "Attempts",
    "failure_type",
    "not_counted",
]

#: Attempts of a turn that failed by itself; stops and crashes do not count.
TURN_ATTEMPTS = 3
#: Attempts of a model request that failed for a reason that may pass (unreachable, 5xx, 429):
#: with the backoff, a model server gets ~5 s to come back before the turn fails.
MODEL_ATTEMPTS = 5
#: A tool's attempts when it is idempotent (one otherwise).
TOOL_ATTEMPTS = 3
#: The failure type of a turn stopped because a client canceled the task (the activity saw it in
#: the listing index before the workflow's cancel signal arrived).
TASK_CANCELED = "TaskCanceled"
#: The failure type of an activity whose worker stopped heartbeating too many times in a row.
STALLED = "WorkerStalled"
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
#: Heartbeat timeouts in a row an activity is retried after without counting; the next ends it.
FREE_HEARTBEAT_TIMEOUTS = 2
# Failure types that say the worker, not the agent, stopped the attempt.
_WORKER_STOPPED = "WorkerStopped"
_NO_RETRY = RetryPolicy(maximum_attempts=1)
# The longest Retry-After a provider may impose on a turn.
_MAX_ASKED_DELAY = 60.0


def _settled(handle: workflow.ActivityHandle[Any]) -> None:
    """Take the outcome of an activity the workflow stopped waiting for (it canceled it), so
    that it is not reported as an exception nobody retrieved."""
    if not handle.cancelled():
        handle.exception()


def _cause(error: BaseException) -> BaseException | None:
    return error.__cause__ if isinstance(error, ActivityError) else error


def not_counted(error: BaseException) -> bool:
    """The attempt was stopped by a worker stopping or dying, not by the agent: retry it freely."""
    cause = _cause(error)
    if isinstance(cause, ApplicationError) and cause.type == _WORKER_STOPPED:
        return True
    if isinstance(cause, CancelledError):
        return True
    # A worker that dies stops heartbeating; a start-to-close timeout is the agent being slow.
    return isinstance(cause, TimeoutError) and cause.type in (
        TimeoutType.HEARTBEAT,
        TimeoutType.SCHEDULE_TO_START,
    )


def _heartbeat_timeout(error: BaseException) -> bool:
    cause = _cause(error)
    return isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT


def failure_type(error: BaseException) -> str:
    cause = _cause(error)
    return cause.type or "" if isinstance(cause, ApplicationError) else ""


def _asked_delay(error: BaseException) -> float:
    """The wait a failure asked for (``next_retry_delay``), in seconds; 0 when none."""
    cause = _cause(error)
    if isinstance(cause, ApplicationError) and cause.next_retry_delay is not None:
        return cause.next_retry_delay.total_seconds()
    return 0.0


def _retryable(error: BaseException) -> bool:
    cause = _cause(error)
    return not (isinstance(cause, ApplicationError) and cause.non_retryable)


class Attempts:
    """Runs a task's activities; ``canceled`` says whether a client canceled the task."""

    def __init__(self, start: TaskStart, canceled: Callable[[], bool]) -> None:
        self._start = start
        self._canceled = canceled

    async def run(
        self,
        activity: str,
        arg: Any,
        result_type: type[Any],
        *more: Any,
        local: bool,
        attempts: int,
        seconds: float | None = None,
        free_retries: bool = True,
    ) -> Any:
        """Run an activity (with ``arg`` and ``more`` as its arguments) until it succeeds, its
        attempts are spent, or the task is canceled (None).

        Attempts stopped by a worker (shutdown, crash) are retried without counting, heartbeat
        timeouts only ``FREE_HEARTBEAT_TIMEOUTS`` times in a row. Raises the last
        ``ActivityError`` when the attempts are spent or the failure is not retryable, and an
        ``ApplicationError`` of type ``STALLED`` when the worker kept stopping heartbeating.
        """
        failures = 0
        stalls = 0
        delay = 0.2
        limit = timedelta(seconds=seconds if seconds is not None else self._start.turn_timeout)
        while True:
            if local:
                handle = workflow.start_local_activity(
                    activity,
                    args=[arg, *more],
                    result_type=result_type,
                    start_to_close_timeout=limit,
                    retry_policy=_NO_RETRY,
                )
            else:
                handle = workflow.start_activity(
                    activity,
                    args=[arg, *more],
                    result_type=result_type,
                    start_to_close_timeout=limit,
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=_NO_RETRY,
                )
            await workflow.wait_condition(lambda handle=handle: handle.done() or self._canceled())
            if self._canceled() and not handle.done():
                # Reaches the activity through its heartbeat: the model call or tool in flight
                # is cancelled. Its outcome is not waited for, but taken when it comes.
                handle.cancel()
                handle.add_done_callback(_settled)
                return None
            try:
                return await handle
            except (ActivityError, ApplicationError) as error:
                # A local activity's failure arrives as the ApplicationError itself.
                if failure_type(error) == TASK_CANCELED:
                    # A client canceled the task; the signal saying so is on its way.
                    return None
                if free_retries and not_counted(error):
                    stalls = stalls + 1 if _heartbeat_timeout(error) else 0
                    if stalls > FREE_HEARTBEAT_TIMEOUTS:
                        raise ApplicationError(
                            f"its worker stopped heartbeating {stalls} times in a row "
                            f"(every {HEARTBEAT_TIMEOUT.total_seconds():g} s at least): an agent "
                            "must not block its event loop; run blocking work in a thread",
                            type=STALLED,
                            non_retryable=True,
                        ) from None
                    log.info(
                        "task %s: %s stopped by its worker; retrying", self._start.task_id, activity
                    )
                    await workflow.sleep(timedelta(seconds=0.5))
                    continue
                stalls = 0
                failures += 1
                if failures >= attempts or not _retryable(error):
                    raise
                log.info(
                    "task %s: %s failed (attempt %d of %d); trying again",
                    self._start.task_id,
                    activity,
                    failures,
                    attempts,
                )
                wait = delay * (0.8 + 0.4 * workflow.random().random())
                # A provider that said when to come back (Retry-After) is asked no sooner.
                asked = _asked_delay(error)
                await workflow.sleep(timedelta(seconds=max(wait, min(asked, _MAX_ASKED_DELAY))))
                delay = min(delay * 2, 10.0)
