"""``HeartbeatWorkflow``: started by an agent's schedule every ``[heartbeat] interval``.

Its activity records that the agent is served and runs the retention sweep (``AgentActivities``).
The schedule itself is kept in step with the configuration by ``harness_core.worker``.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from harness_core.temporal.names import HEARTBEAT, HEARTBEAT_WORKFLOW

__all__ = ["HeartbeatWorkflow"]


@workflow.defn(name=HEARTBEAT_WORKFLOW)
class HeartbeatWorkflow:
    """Records that the agent is served, and sweeps what its retention allows."""

    @workflow.run
    async def run(self, agent_id: str) -> None:
        await workflow.execute_activity(
            HEARTBEAT,
            agent_id,
            start_to_close_timeout=timedelta(seconds=30),
        )
