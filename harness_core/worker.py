"""An agent's Temporal worker and heartbeat schedule, as child tasks of its harness.

The worker polls only the agent's own task queue. It is stopped with ``Worker.shutdown()`` (graceful:
polling stops, running activities get ``graceful_timeout`` to finish), never by cancelling ``run()``,
because a second cancellation would interrupt the shutdown itself (temporalio's ``run`` docstring).
"""

from __future__ import annotations

import logging
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import anyio
from anyio.abc import TaskStatus
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from harness_core.activities import AgentActivities
from harness_core.bridge import InlineActivations
from harness_core.delegation.workflow import DelegationWorkflow
from harness_core.logs import AgentContextInterceptor
from harness_core.pool import TemporalConnection
from harness_core.tasks.workflow import TaskWorkflow
from harness_core.temporal.heartbeat import HeartbeatWorkflow

__all__ = [
    "PASSTHROUGH",
    "heartbeat_schedule_id",
    "run_worker",
    "sync_heartbeat_schedule",
    "workflow_runner",
]

log = logging.getLogger("harness.worker")

# The payload classes and their converter (with the libraries they are made of) cross the sandbox
# unchanged: re-importing them per workflow run would grow cattrs' caches without bound
# (shared/reference/temporal-latency.md). So do the task's state machine and the names, which are
# pure (no clock but the one the workflow hands in, no I/O; tests/unit/test_task_state.py), so no
# run pays for importing them again. Everything else of harness_core is re-imported inside it, so
# time, randomness or I/O in the workflow's own code fails loudly instead of running unnoticed.
PASSTHROUGH = (
    "harness_core.payloads",
    "harness_core.converter",
    "harness_core.tasks.state",
    "harness_core.tasks.admission",
    "harness_core.tasks.records",
    "harness_core.retention",
    "harness_core.temporal.names",
    "attrs",
    "cattrs",
    # Temporal's tracing interceptor, while tracing is on: one tracer state for every run.
    "opentelemetry",
)
_RUNNER = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox the agents' workflows run in (and replay in)."""
    return _RUNNER


async def run_worker(
    connection: TemporalConnection,
    queue: str,
    activities: AgentActivities,
    *,
    graceful_timeout: float,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run the agent's worker until cancelled, then shut it down gracefully.

    Ready (``task_status.started()``) once the worker is constructed and its run has begun. If the
    worker fails, the exception propagates and cancels the harness.
    """
    activations = InlineActivations()
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"harness-{queue}") as executor:

        async def build() -> Worker:
            return Worker(
                connection.client,
                task_queue=queue,
                workflows=[TaskWorkflow, HeartbeatWorkflow, DelegationWorkflow],
                activities=activities.all(),
                activity_executor=executor,
                workflow_task_executor=activations,
                # Operators (and `temporal task-queue describe`) see which agent polls.
                identity=f"{os.getpid()}@{socket.gethostname()}/{activities.agent_id}",
                # Every log line of an activity names its agent.
                interceptors=[AgentContextInterceptor(activities.agent_id)],
                workflow_runner=_RUNNER,
                graceful_shutdown_timeout=timedelta(seconds=graceful_timeout),
                # A cancel reaches a running turn, model request or tool call with a heartbeat's
                # answer: send them at least every second (Temporal's default waits up to 80 % of
                # the heartbeat timeout, 8 s here).
                max_heartbeat_throttle_interval=timedelta(seconds=1),
            )

        worker = await connection.bridge.call(build)
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                # Shielded: the worker stops through shutdown() below, not through cancellation.
                with anyio.CancelScope(shield=True):
                    await connection.bridge.call(worker.run)

            tg.start_soon(run)
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                with anyio.CancelScope(shield=True):
                    await connection.bridge.call(worker.shutdown)


def heartbeat_schedule_id(agent_id: str) -> str:
    """``harness-heartbeat`` for the default agent, ``harness-heartbeat-<id>`` for the others."""
    return "harness-heartbeat" if agent_id == "harness" else f"harness-heartbeat-{agent_id}"


async def sync_heartbeat_schedule(
    connection: TemporalConnection, agent_id: str, queue: str, interval: float
) -> None:
    """Make the agent's heartbeat schedule match its configuration: create it, or update it.

    The schedule is left in place when the agent stops: schedules are durable, and other processes may
    still serve the agent.
    """
    schedule_id = heartbeat_schedule_id(agent_id)
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            HeartbeatWorkflow.run,
            agent_id,
            id=f"{schedule_id}-run",
            task_queue=queue,
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=interval))]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )

    async def sync() -> None:
        try:
            await connection.client.create_schedule(schedule_id, schedule)
        except ScheduleAlreadyRunningError:

            def replace(_: ScheduleUpdateInput) -> ScheduleUpdate:
                return ScheduleUpdate(schedule=schedule)

            await connection.client.get_schedule_handle(schedule_id).update(replace)

    await connection.bridge.call(sync)
    log.debug("heartbeat schedule %s every %ss on %s", schedule_id, interval, queue)
