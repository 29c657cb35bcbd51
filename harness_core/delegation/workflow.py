"""``DelegationWorkflow``: the stand-in of one delegation, a child of the delegating task.

It runs on its parent's task queue (which is what the push receiver's ownership check relies on) and
outside the workflow sandbox: it calls nothing but Temporal's workflow API and pure functions of
``payloads``. Its activities are in ``harness_core.delegation.activities``.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import attrs
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, FailureError

from harness_core.payloads import (
    SETTLED_STATES,
    DelegationRequest,
    DelegationResult,
    ProtoJSON,
    status_key,
)
from harness_core.tasks.attempts import HEARTBEAT_TIMEOUT
from harness_core.temporal.names import (
    DELEGATE_CANCEL,
    DELEGATE_POLL,
    DELEGATE_SEND,
    DELEGATE_STATUS,
    DELEGATE_WAIT,
    DELEGATION_WORKFLOW,
    RELAY_SIGNAL,
    SANDBOXED,
)

__all__ = ["MAX_STAND_IN_RELAYS", "DelegationWorkflow"]

#: The most progress statuses one stand-in relays to its delegating task.
MAX_STAND_IN_RELAYS = 100
# The failure types of the delegation activities, whose messages are ours (calls.py).
_DELEGATION_FAILURES = frozenset({"UnknownAgent", "DelegationRefused", "DelegationUnreachable"})


@workflow.defn(name=DELEGATION_WORKFLOW, sandboxed=SANDBOXED)
class DelegationWorkflow:
    """The stand-in of one delegation, a child of the delegating task on the same queue.

    It sends the message to the other agent over A2A and reads the answer on the send's own
    stream for a moment (``[delegation] stream_for``); a task still running then is followed by
    the other agent's pushes to this stand-in, or by reading it (GetTask, backing off) until it
    settles (answered, asking, ended). The other agent's progress on the way is relayed to the
    delegating task. Canceled with its parent, it cancels the remote task.

    It runs outside the sandbox (creating a sandboxed workflow costs ~10 ms, paid on every
    delegation): it calls nothing but Temporal's workflow API and pure functions of ``payloads``.
    """

    def __init__(self) -> None:
        self._pushes: list[ProtoJSON] = []  # pushed statuses not looked at yet
        self._relays = 0  # statuses relayed to the delegating task

    @workflow.signal
    def pushed(self, state: str, status: ProtoJSON | None = None) -> None:
        """The other agent pushed an update of its task (checked by the receiver first)."""
        self._pushes.append(status if status is not None else {"state": state})

    @workflow.run
    async def run(self, request: DelegationRequest) -> DelegationResult:
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=1),
            maximum_interval=timedelta(seconds=30),
            maximum_attempts=10,
            non_retryable_error_types=["UnknownAgent", "DelegationRefused"],
        )
        remote_task_id = ""
        try:
            stale = ""
            if request.message.get("taskId"):
                # It answers the other agent's question: the question's status, noted once
                # before the send (a retried send must not take the answer for the question).
                stale = await workflow.execute_local_activity(
                    DELEGATE_STATUS,
                    request,
                    result_type=str,
                    start_to_close_timeout=timedelta(seconds=60),
                    retry_policy=retry,
                )
            # Short calls run as local activities: no round trip through the task queue.
            result: DelegationResult = await workflow.execute_local_activity(
                DELEGATE_SEND,
                args=[request, stale],
                result_type=DelegationResult,
                # The send reads the answer on its stream for at most a few seconds.
                start_to_close_timeout=timedelta(seconds=90),
                retry_policy=retry,
            )
            if result.state in SETTLED_STATES:
                return result  # the delegating task shows its progress with the answer
            remote_task_id = result.remote_task_id
            seen = await self._relay(request, result, result.stale)
            silence = 60.0
            while result.pushed and result.state not in SETTLED_STATES:
                # Woken by a push, or after a silence: then the task is read.
                with contextlib.suppress(asyncio.TimeoutError):
                    await workflow.wait_condition(
                        lambda: bool(self._pushes), timeout=timedelta(seconds=silence)
                    )
                pushes = [p for p in self._pushes if status_key(p) != seen]
                self._pushes.clear()
                news = [
                    p for p in pushes if "message" in p and p.get("state") not in SETTLED_STATES
                ]
                if news:
                    # The latest of a batch is enough to show.
                    latest = attrs.evolve(result, progress=tuple(news[-1:]))
                    seen = await self._relay(request, latest, seen)
                settled = any(p.get("state") in SETTLED_STATES for p in pushes)
                if pushes and not settled:
                    silence = 60.0
                    continue
                silence = min(silence * 2, 600.0)
                polled = await workflow.execute_local_activity(
                    DELEGATE_POLL,
                    # Told that it settled, the read waits (a little) for the task to show it.
                    args=[request, remote_task_id, seen, 5.0 if settled else 0.0],
                    result_type=DelegationResult,
                    start_to_close_timeout=timedelta(seconds=60),
                    retry_policy=retry,
                )
                result = attrs.evolve(polled, pushed=True)
            while result.state not in SETTLED_STATES:
                # Followed: an activity that reads the task until it settles or says something,
                # heartbeating.
                result = await workflow.execute_activity(
                    DELEGATE_WAIT,
                    args=[request, remote_task_id, seen, self._relays < MAX_STAND_IN_RELAYS],
                    result_type=DelegationResult,
                    start_to_close_timeout=timedelta(days=1),
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=retry,
                )
                if result.state not in SETTLED_STATES:
                    seen = await self._relay(request, result, seen)
            return result
        except (ActivityError, ApplicationError) as error:
            # A local activity's failure arrives as the ApplicationError itself.
            cause = error.__cause__ if isinstance(error, ActivityError) else error
            if not isinstance(cause, CancelledError):
                # Only our own words: anything else may carry the other side's text.
                why = "it could not be reached"
                if isinstance(cause, ApplicationError) and cause.type in _DELEGATION_FAILURES:
                    why = cause.message
                return DelegationResult(
                    target=request.target, remote_task_id="", state="", error=why
                )
            await self._cancel_remote(request, remote_task_id)
            raise
        except asyncio.CancelledError:
            await self._cancel_remote(request, remote_task_id)
            raise

    async def _relay(self, request: DelegationRequest, result: DelegationResult, seen: str) -> str:
        """Show the other agent's progress to the delegating task's clients (one signal); returns
        the ``status_key`` of the last status relayed (``seen`` when none). Past
        ``MAX_STAND_IN_RELAYS`` nothing more is relayed: the task's history stays bounded."""
        if not result.progress or self._relays >= MAX_STAND_IN_RELAYS:
            return seen
        self._relays += len(result.progress)
        parent = workflow.get_external_workflow_handle(request.parent_task_id)
        with contextlib.suppress(FailureError):  # the delegating task ended: nobody to tell
            await parent.signal(RELAY_SIGNAL, result.relays(workflow.info().workflow_id))
        return status_key(result.progress[-1])

    async def _cancel_remote(self, request: DelegationRequest, remote_task_id: str) -> None:
        """The delegating task was canceled: cancel the other agent's task too, also when the
        send was cut off (its activity noted the task's id in the store once it was known)."""
        await workflow.execute_activity(
            DELEGATE_CANCEL,
            args=[request, remote_task_id],
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(maximum_attempts=3),
        )
