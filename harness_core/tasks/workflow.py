"""``TaskWorkflow``: one per A2A task (workflow id = task id), the driver of its ``TaskState``.

The state (``harness_core.tasks.state``) decides; this workflow waits, runs activities and child
workflows, and feeds what they return back in. A message reaches a task through the ``deliver``
update (update-with-start for a new task, whose first message also travels in the start's input, so
it is durable even if the worker dies before the update is accepted); the validator asks the state,
so a refused message leaves no trace in history. The update returns a small receipt.

A turn is either one activity (a custom or built-in agent, given the run's messages and where the rest
is) or, for the built-in LLM agent, a loop (``harness_core.tasks.llm_turn``): one activity per model
request and one per tool call. The workflow owns the retries: each activity gets one attempt per
schedule, and only a failure of the agent itself counts against the turn's attempts; a worker that
stopped or died is retried without counting a few times, then counted, so restarts are not blamed on
the model but an agent that keeps its worker from heartbeating still ends.

When a run is full and the task idle, the run is archived to the agent's store and the workflow
continues as new, carrying only its state. When the task ends, its final record is stored first, and
only then do webhooks hear of the end.

Workflow code must be deterministic: time comes from ``workflow.now()``, and nothing here does I/O.
``asyncio`` here is Temporal's own deterministic workflow loop, the same whichever backend the host
runs (the host's side goes through ``harness_core.bridge``): temporalio's workflow API is asyncio's
(a task for the pusher, ``CancelledError`` for a canceled stand-in, ``TimeoutError`` for a timed
``wait_condition``). Changes go behind ``workflow.patched`` (``docs/workflows.md``); ``tests/replay``
replays recorded histories.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import attrs
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from harness_core.payloads import (
    DelegationProgress,
    Inbound,
    PushBatch,
    Receipt,
    TaskRecord,
    TaskStart,
    TaskTail,
    TurnOutcome,
)
from harness_core.tasks.attempts import HEARTBEAT_TIMEOUT, TURN_ATTEMPTS, Attempts
from harness_core.tasks.delegating import relay_once
from harness_core.tasks.llm_turn import LlmTurn, turn_failed
from harness_core.tasks.state import LONG_TURN, TaskRefused, TaskState
from harness_core.temporal.names import (
    ARCHIVE,
    CHECKPOINT,
    PUSH,
    RELAY_SIGNAL,
    RUN_TURN,
    SANDBOXED,
    STORE_RECORD,
    TASK_WORKFLOW,
)
from harness_core.temporal.workflow_log import log

__all__ = ["STORE_ATTEMPTS", "TaskWorkflow"]

#: Attempts of a store write before the record stays in the workflow's result.
STORE_ATTEMPTS = 5
# How long an ending task waits for its pushes to go out.
_PUSH_PATIENCE = timedelta(minutes=5)
_STORE_RETRY = RetryPolicy(
    maximum_attempts=STORE_ATTEMPTS, non_retryable_error_types=["WrongAgent", "StoreRefused"]
)


def _now() -> str:
    return workflow.now().isoformat().replace("+00:00", "Z")


@workflow.defn(name=TASK_WORKFLOW, sandboxed=SANDBOXED)
class TaskWorkflow(LlmTurn):
    @workflow.init
    def __init__(self, start: TaskStart) -> None:
        # Taken at construction so that an update delivered with the start already knows the task.
        self._start = start
        self._task = TaskState(start, _now)
        self._attempts = Attempts(start, lambda: self._task.cancel_requested)
        # Pushes of an ended task wait for its final record (a receiver that reads the task on
        # COMPLETED must find it COMPLETED); False only between the end and the record.
        self._push_open = True
        # The final record the task's last turn stored itself (``TurnRequest.record_at``).
        self._recorded: TaskRecord | None = None

    # -- the run ------------------------------------------------------------------------------------

    @workflow.run
    async def run(self, start: TaskStart) -> TaskRecord:
        pusher = asyncio.create_task(self._pusher(start))
        try:
            return await self._run(start)
        finally:
            pusher.cancel()

    async def _run(self, start: TaskStart) -> TaskRecord:
        task = self._task
        while True:
            idle = task.idle_seconds()
            limit = timedelta(seconds=idle) if idle else None
            try:
                await workflow.wait_condition(
                    lambda: bool(task.mailbox) or task.cancel_requested, timeout=limit
                )
            except asyncio.TimeoutError:  # noqa: UP041 - the builtin name is temporalio's here
                task.expire()
                break
            if task.cancel_requested:
                task.end("TASK_STATE_CANCELED", "canceled")
                break
            await self._turn(start)
            if task.ended():
                break
            if not task.mailbox:
                await self._checkpoint(start)
            suggested = workflow.info().is_continue_as_new_suggested()
            if not task.mailbox and task.run_is_full(suggested):
                await self._continue_as_new(start)
        task.close()
        # The final record first: a webhook's receiver that reads the task on its end finds it.
        self._push_open = False
        record = await self._store_final(start)
        self._push_open = True
        await self._pushes_sent()
        # Blocked senders wake on closed; let their updates finish first.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return record

    async def _turn(self, start: TaskStart) -> None:
        task = self._task
        request, taken, local = task.begin_turn()
        began = workflow.now()
        try:
            if start.loop == "llm":
                outcome = await self._llm_turn(start, request, local)
            else:
                try:
                    outcome = await self._attempts.run(
                        RUN_TURN, request, TurnOutcome, local=local, attempts=TURN_ATTEMPTS
                    )
                except (ActivityError, ApplicationError) as error:
                    log.warning(
                        "turn %d of task %s failed; the task fails", task.turns, start.task_id
                    )
                    outcome = turn_failed(error)
            held = (workflow.now() - began).total_seconds()
            if local and held >= LONG_TURN:
                task.long_turns = True
            if outcome is not None and outcome.kind == "delegate":
                outcome = await self._delegate(start, outcome, asked_first=local)
            if outcome is None:
                task.end("TASK_STATE_CANCELED", "canceled")
                return
            recorded = outcome.recorded
            # A turn that stored the task's end gave it its time.
            task.apply(outcome, at=recorded.updated_at if recorded is not None else None)
            self._recorded = recorded
            if request.record_at and not task.ended():
                # The turn may have stored an end the task did not reach: a message got in while
                # it ran, or an attempt that stored one was lost (its worker died). The index's
                # next entries take the task back (``IndexEntry.reopen``).
                if recorded is not None:
                    log.warning("task %s: its turn stored an end it did not reach", start.task_id)
                self._recorded = None
                task.reopen = True
        finally:
            task.end_turn(taken)

    # -- the store ----------------------------------------------------------------------------------

    async def _checkpoint(self, start: TaskStart) -> None:
        """The index learns the task's state and what happened since its last write: when the
        task rests (waiting for input), in the workflow task that ended the turn, and while a
        turn waits for other agents."""
        try:
            await workflow.execute_local_activity(
                CHECKPOINT,
                self._task.checkpoint(),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=_STORE_RETRY,
            )
        except (ActivityError, ApplicationError):
            # Listings show the task as the last write left it; the next durable point (its next
            # turn, or its end) writes again.
            log.warning("task %s: the index did not take its state", start.task_id)

    async def _continue_as_new(self, start: TaskStart) -> None:
        task = self._task
        task.closing = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        try:
            await workflow.execute_activity(
                ARCHIVE,
                task.archive(),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=STORE_ATTEMPTS),
            )
        except ActivityError:
            # The store refused; keep this run going and try again after the next turn.
            log.warning("task %s: archiving its run failed", start.task_id)
            task.closing = False
            return
        # No batch may start after this run's last command: the next run pushes the rest.
        self._push_open = False
        workflow.continue_as_new(
            attrs.evolve(start, first=None, carry=task.carry(), record_in_turn=True)
        )

    async def _store_final(self, start: TaskStart) -> TaskRecord:
        task = self._task
        record = task.final_record()
        if record == self._recorded:
            # The last turn stored this very record: nothing reached the task in between.
            return record
        archive = task.archive()
        try:
            # In the workflow task that ends the turn: no round trip through the task queue.
            await workflow.execute_local_activity(
                STORE_RECORD,
                args=[archive, record],
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=_STORE_RETRY,
            )
        except (ActivityError, ApplicationError):
            log.error(
                "task %s: its record could not be stored; it stays in the workflow's result",
                start.task_id,
            )
            return attrs.evolve(record, unstored=archive)
        return record

    # -- pushes -------------------------------------------------------------------------------------

    async def _pusher(self, start: TaskStart) -> None:
        """Once the task pushes, deliver each new update to its webhooks, in order, by an activity
        that retries with backoff (and so survives restarts)."""
        task = self._task
        await workflow.wait_condition(lambda: task.push)
        while True:
            await workflow.wait_condition(lambda: task.last_seq() > task.pushed and self._push_open)
            upto = task.last_seq()
            first = max(task.pushed - task.archived_events, 0)
            # What an earlier run archived before it was pushed is read from the store.
            stored = task.pushed < task.archived_events
            batch = PushBatch(
                agent_id=start.agent_id,
                task_id=start.task_id,
                events=tuple(task.events[first : upto - task.archived_events]),
                stored_after=task.pushed if stored else 0,
                stored_until=task.archived_events if stored else 0,
            )
            try:
                await workflow.execute_activity(
                    PUSH,
                    batch,
                    start_to_close_timeout=timedelta(minutes=2),
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(seconds=1),
                        maximum_interval=timedelta(seconds=60),
                        maximum_attempts=8,
                        non_retryable_error_types=["WrongAgent"],
                    ),
                )
            except ActivityError:
                log.warning("task %s: its push notifications failed", start.task_id)
            task.pushed = upto

    async def _pushes_sent(self) -> None:
        """Wait (a while) for the pushes of what happened so far to go out."""
        task = self._task
        if not task.push:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await workflow.wait_condition(
                lambda: task.pushed >= task.last_seq(), timeout=_PUSH_PATIENCE
            )

    # -- handlers -----------------------------------------------------------------------------------

    @workflow.update
    async def deliver(self, inbound: Inbound) -> Receipt:
        task = self._task
        message_id = str(inbound.message.get("messageId", ""))
        cursor = task.last_seq()
        duplicate = not task.take(inbound)
        mine = task.accepted
        if inbound.wait:
            await workflow.wait_condition(lambda: task.answered(mine))
        try:
            return task.receipt(message_id, inbound, cursor=cursor, duplicate=duplicate)
        except TaskRefused as refused:
            raise _refusal(refused) from None

    @deliver.validator
    def _check_delivery(self, inbound: Inbound) -> None:
        try:
            self._task.check(inbound)
        except TaskRefused as refused:
            raise _refusal(refused) from None

    @workflow.query
    def tail(self, after_event: int, after_message: int) -> TaskTail:
        """The task's status, and this run's messages and events after the given positions.

        Streams and reads use this (a query is neither written to history nor counted against the
        workflow's update limits).
        """
        return self._task.tail(after_event, after_message)

    @workflow.signal
    def cancel(self) -> None:
        self._task.cancel()

    @workflow.signal(name=RELAY_SIGNAL)
    def relay(self, progress: list[DelegationProgress]) -> None:
        """Another agent's progress on a delegation of this task, from its stand-in: shown as
        WORKING updates while the delegating turn waits (late ones change nothing)."""
        self._task.relay(progress, once=relay_once())

    @workflow.signal
    def enable_push(self) -> None:
        """A client registered a push notification config for the task."""
        self._task.push = True


def _refusal(refused: TaskRefused) -> ApplicationError:
    return ApplicationError(refused.message, type=refused.kind, non_retryable=not refused.retryable)
