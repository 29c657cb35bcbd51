"""The activities of one agent: a model turn, storing a final record, and the heartbeat.

They run on the Temporal event loop (the caller's under asyncio, the bridge thread under Trio); the
store's synchronous SQLite calls run in the worker's activity thread pool, never on that loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs
from temporalio import activity
from temporalio.exceptions import ApplicationError

from harness_core.model import Model
from harness_core.payloads import TaskRecord, TurnInput, TurnOutput
from harness_core.secrets import SECRETS
from harness_core.store import TaskStore
from harness_core.workflows import HEARTBEAT, MODEL_TURN, STORE_RECORD

__all__ = ["AgentActivities"]

log = logging.getLogger("harness.worker")

# A regular (non-local) turn heartbeats this often, well inside its 10 s heartbeat timeout, so a
# worker that dies mid-turn is noticed in seconds and the turn retried elsewhere.
_HEARTBEAT_EVERY = 2.0


class AgentActivities:
    """The activity implementations bound to one agent's model and store."""

    def __init__(self, agent_id: str, model: Model, store: TaskStore) -> None:
        self.agent_id = agent_id
        self.model = model
        self.store = store

    def _check_agent(self, agent_id: str, what: str) -> None:
        """Refuse work of another agent: it reaches this worker only when two agents (in two
        processes: one process refuses it at start) poll one task queue, and this model must not
        answer that agent's users, nor this store keep its records."""
        if agent_id != self.agent_id:
            queue = activity.info().task_queue
            message = (
                f"{what} of agent {agent_id!r} reached the worker of agent {self.agent_id!r}: "
                f"both poll task queue {queue!r}; give each agent its own queue"
            )
            log.error("%s", message)
            raise ApplicationError(message, type="WrongAgent")

    @activity.defn(name=MODEL_TURN)
    async def model_turn(self, turn: TurnInput) -> TurnOutput:
        self._check_agent(turn.agent_id, "a turn")
        if activity.info().is_local:
            return _redacted(await self.model.reply(turn))
        result: list[TurnOutput] = []
        async with anyio.create_task_group() as tg:

            async def beat() -> None:
                while True:
                    activity.heartbeat()
                    await anyio.sleep(_HEARTBEAT_EVERY)

            tg.start_soon(beat)
            result.append(await self.model.reply(turn))
            tg.cancel_scope.cancel()
        return _redacted(result[0])

    @activity.defn(name=STORE_RECORD)
    def store_record(self, record: TaskRecord) -> None:
        self._check_agent(record.agent_id, "the record")
        self.store.put(record)

    @activity.defn(name=HEARTBEAT)
    def heartbeat(self, agent_id: str) -> None:
        self._check_agent(agent_id, "the heartbeat")
        self.store.set_meta("last_heartbeat", datetime.now(UTC).isoformat())

    def all(self) -> list[Callable[..., Any]]:
        return [self.model_turn, self.store_record, self.heartbeat]


def _redacted(output: TurnOutput) -> TurnOutput:
    """A reply with every secret of the process masked: it is stored, and sent to clients."""
    text = SECRETS.redact(output.text)
    return output if text is output.text else attrs.evolve(output, text=text)
