"""The listing index made right about tasks whose workflow ended without the store learning of it.

A task's end reaches the agent's store from its workflow: the turn that ended it, or the
``store_record`` local activity. A workflow that ended otherwise (terminated by an operator, timed
out, failed in a way no activity reported) or whose final write the store refused (its record then
lives in the workflow's result, ``TaskRecord.unstored``) leaves the index showing the task in
motion, or waiting for its sender, for good. The agent's heartbeat runs ``reconcile``: each task
the index shows SUBMITTED or WORKING, untouched for ``RECONCILE_AFTER`` seconds, and each it shows
INPUT_REQUIRED or AUTH_REQUIRED, untouched for ``RECONCILE_WAITING_AFTER`` seconds (such tasks may
be many, and wait for days), is looked up in Temporal. A completed workflow's
record (and the run it kept, when the store refused it) is stored from its result; a workflow that
ended without one is stored as FAILED (CANCELED when canceled through Temporal), saying how it
ended, and so is one that Temporal no longer knows although it wrote to the index. A running
workflow is left alone and looked at again after the others; one whose start never happened is
left to ``TaskReads``, which forgets it.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from functools import partial

import anyio
import attrs
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from harness_core.payloads import Archive, TaskRecord
from harness_core.store import IndexRow, TaskStore
from harness_core.tasks.state import TaskState
from harness_core.temporal.names import TASK_WORKFLOW

__all__ = ["RECONCILE_AFTER", "RECONCILE_BATCH", "RECONCILE_WAITING_AFTER", "reconcile"]

log = logging.getLogger("harness.tasks")

#: Seconds a task in motion goes with no write to the index before its workflow is looked up.
RECONCILE_AFTER = 60.0
#: Seconds a task waiting for its sender goes with no write before its workflow is looked up.
RECONCILE_WAITING_AFTER = 600.0
#: The most tasks one heartbeat looks up.
RECONCILE_BATCH = 50

_ENDED_HOW = {
    WorkflowExecutionStatus.FAILED: "it failed",
    WorkflowExecutionStatus.CANCELED: "it was canceled through Temporal",
    WorkflowExecutionStatus.TERMINATED: "it was terminated",
    WorkflowExecutionStatus.TIMED_OUT: "it timed out",
}
_GONE = "Temporal no longer knows it"


async def reconcile(store: TaskStore, client: Client, agent_id: str) -> int:
    """Store the end of each of the agent's tasks whose workflow ended without the store
    learning of it; returns how many."""
    now = time.time()
    stale = partial(
        store.stale_rows,
        agent_id,
        moving_before=int((now - RECONCILE_AFTER) * 1_000_000),
        waiting_before=int((now - RECONCILE_WAITING_AFTER) * 1_000_000),
        limit=RECONCILE_BATCH,
    )
    rows = await anyio.to_thread.run_sync(stale)
    fixed = 0
    for row in rows:
        try:
            fixed += await _reconcile_one(store, client, row)
        except RPCError as error:
            log.warning("task %s: its workflow could not be looked up: %s", row.task_id, error)
    return fixed


async def _reconcile_one(store: TaskStore, client: Client, row: IndexRow) -> int:
    handle = client.get_workflow_handle(row.task_id, result_type=TaskRecord)
    try:
        described = await handle.describe()
        status = described.status
        if described.workflow_type != TASK_WORKFLOW:
            return 0
    except RPCError as error:
        # Never started (its row is forgotten when read: ``TaskReads``), or, once its workflow
        # wrote to the index, removed from Temporal before its end reached the store.
        if error.status != RPCStatusCode.NOT_FOUND or row.last_seq == 0:
            raise
        status = None
    if status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW):
        # Looked at again only after the others: the batch moves on.
        await anyio.to_thread.run_sync(store.touch_index, row.task_id)
        return 0
    if status == WorkflowExecutionStatus.COMPLETED:
        record = await handle.result(follow_runs=False, rpc_timeout=timedelta(seconds=10))
        archive = record.unstored or Archive(
            task_id=record.task_id,
            agent_id=record.agent_id,
            context_id=record.context_id,
            first_message=record.messages,
            messages=(),
            events=(),
            participants=record.participants,
        )
        await anyio.to_thread.run_sync(
            store.store_final, archive, attrs.evolve(record, unstored=None)
        )
        how = "its final write did not reach the store"
    else:
        how = _ENDED_HOW.get(status, _GONE) if status is not None else _GONE
        canceled = status == WorkflowExecutionStatus.CANCELED
        full = await anyio.to_thread.run_sync(store.index_row, row.task_id)
        archive, record = _lost_end(full or row, how, canceled=canceled)
        await anyio.to_thread.run_sync(store.store_final, archive, record)
    log.warning("task %s: its workflow ended (%s); its end is stored now", row.task_id, how)
    return 1


def _lost_end(row: IndexRow, how: str, *, canceled: bool) -> tuple[Archive, TaskRecord]:
    """The end of a task whose workflow ended without one: FAILED (CANCELED when it was
    canceled), saying how, by the task's own rules."""
    task = TaskState.resumed(
        row.task_id,
        row.context_id,
        row.agent_id,
        status=row.status,
        participants=row.participants,
        archived_messages=row.messages,
        archived_events=row.last_seq,
        turns=0,
        now=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    )
    state = "TASK_STATE_CANCELED" if canceled else "TASK_STATE_FAILED"
    task.end(state, f"the task could not be completed: its workflow ended ({how})")
    return task.archive(), task.final_record()
