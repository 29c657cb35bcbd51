"""The activities of one agent: a turn, a model request and a tool call (the LLM loop), archiving a run,
storing an ended task, and the heartbeat.

They run on the Temporal event loop (the caller's under asyncio, the bridge thread under Trio); the
store's synchronous SQLite calls run in worker threads, never on that loop. Each activity is scheduled
with one attempt and the workflow owns the retries: an attempt that a worker stopping interrupts raises
``WorkerStopped``, which the workflow retries without counting it against the agent.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Generator
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol, TypeVar

import anyio
from temporalio import activity
from temporalio.exceptions import ApplicationError

from harness_core.agents.context import ActivityTurnContext, outcome_of
from harness_core.agents.parts import message_from_json
from harness_core.agents.turn import Agent, TurnMessage
from harness_core.blobs import BlobStore, has_blobs
from harness_core.live import LIVE
from harness_core.payloads import (
    Archive,
    ModelStep,
    ModelStepInput,
    TaskRecord,
    ToolCallInput,
    ToolCallOutput,
    TurnOutcome,
    TurnRequest,
)
from harness_core.secrets import SECRETS
from harness_core.store import TaskStore
from harness_core.workflows import ARCHIVE, HEARTBEAT, MODEL_STEP, RUN_TURN, STORE_RECORD, TOOL_CALL

__all__ = ["HISTORY_WINDOW", "AgentActivities", "LlmLoop"]

log = logging.getLogger("harness.worker")
T = TypeVar("T")

# A regular (non-local) activity heartbeats this often, well inside its 10 s heartbeat timeout, so a
# worker that dies mid-turn is noticed in seconds and the turn retried elsewhere; a cancel of the task
# reaches the turn with the heartbeat's answer.
_HEARTBEAT_EVERY = 1.0
#: The most messages a turn is given: the task's latest ones.
HISTORY_WINDOW = 400


class LlmLoop(Protocol):
    """The built-in LLM agent's steps, as the ``model_step`` and ``tool_call`` activities run them."""

    async def step(
        self, history: tuple[TurnMessage, ...], step: ModelStepInput, ctx: ActivityTurnContext
    ) -> ModelStep: ...

    async def call_tool(self, call: ToolCallInput) -> ToolCallOutput: ...


class AgentActivities:
    """The activity implementations bound to one agent and its stores."""

    def __init__(
        self,
        agent_id: str,
        agent: Agent | None,
        store: TaskStore,
        blobs: BlobStore,
        llm: LlmLoop | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.agent = agent
        self.store = store
        self.blobs = blobs
        self.llm = llm

    def _check_agent(self, agent_id: str, what: str) -> None:
        """Refuse work of another agent: it reaches this worker only when two agents (in two
        processes: one process refuses it at start) poll one task queue, and this agent must not
        answer that agent's users, nor this store keep its records."""
        if agent_id != self.agent_id:
            queue = activity.info().task_queue
            message = (
                f"{what} of agent {agent_id!r} reached the worker of agent {self.agent_id!r}: "
                f"both poll task queue {queue!r}; give each agent its own queue"
            )
            log.error("%s", message)
            raise ApplicationError(message, type="WrongAgent", non_retryable=True)

    async def _history(self, request: TurnRequest) -> tuple[TurnMessage, ...]:
        """The turn's messages: the task's latest ``HISTORY_WINDOW``, content restored.

        The request's messages are written to the store first when ``persist`` says so (at their
        positions, so a retry changes nothing), and the history read back; otherwise they are
        used as they are, after the earlier ones the store has. A short conversation's first
        turn touches no file at all.
        """
        senders = dict(request.senders)
        start = request.archived
        end = start + len(request.messages)
        inline = [(m, senders.get(str(m.get("messageId", "")))) for m in request.messages]
        if not request.persist and start == 0 and not has_blobs(list(request.messages)):
            return tuple(message_from_json(m, sender) for m, sender in inline)

        def read() -> list[tuple[Any, str | None]]:
            store = self.store
            first = max(0, end - HISTORY_WINDOW)
            rows: list[tuple[Any, str | None]]
            if request.persist:
                try:
                    store.put_messages(request.task_id, start, request.messages, request.senders)
                    rows = store.messages_with_senders(request.task_id, first, end)
                except sqlite3.OperationalError as error:
                    # A store that takes no writes does not stop the turn: it sees its own
                    # messages (the workflow still holds them, and keeps them in its result).
                    log.warning(
                        "task %s: the store refused its messages: %s", request.task_id, error
                    )
                    rows = [*store.messages_with_senders(request.task_id, first, start), *inline]
            else:
                rows = [*store.messages_with_senders(request.task_id, first, start), *inline]
            return [(self.blobs.restore(m), sender) for m, sender in rows]

        rows = await anyio.to_thread.run_sync(read)
        return tuple(message_from_json(m, sender) for m, sender in rows)

    def _context(
        self, request: TurnRequest, history: tuple[TurnMessage, ...]
    ) -> ActivityTurnContext:
        return ActivityTurnContext(
            task_id=request.task_id,
            context_id=request.context_id,
            number=request.number,
            history=history,
            new_ids=request.new_ids,
            blobs=self.blobs,
            publish=partial(LIVE.publish, self.agent_id, request.task_id),
        )

    @activity.defn(name=RUN_TURN)
    async def run_turn(self, request: TurnRequest) -> TurnOutcome:
        self._check_agent(request.agent_id, "a turn")
        agent = self.agent
        if agent is None:
            raise ApplicationError("this agent runs an LLM loop, not turns", non_retryable=True)
        ctx = self._context(request, await self._history(request))
        try:
            result = await _guarded(lambda: agent.turn(ctx))
            return _redacted(outcome_of(result, ctx))
        finally:
            LIVE.end(self.agent_id, request.task_id)

    @activity.defn(name=MODEL_STEP)
    async def model_step(self, step: ModelStepInput) -> ModelStep:
        self._check_agent(step.turn.agent_id, "a model request")
        llm = self.llm
        if llm is None:
            raise ApplicationError("this agent has no model", non_retryable=True)
        history = await self._history(step.turn)
        ctx = self._context(step.turn, history)
        try:
            return _redacted(await _guarded(lambda: llm.step(history, step, ctx)))
        finally:
            LIVE.end(self.agent_id, step.turn.task_id)

    @activity.defn(name=TOOL_CALL)
    async def tool_call(self, call: ToolCallInput) -> ToolCallOutput:
        self._check_agent(call.agent_id, "a tool call")
        llm = self.llm
        if llm is None:
            raise ApplicationError("this agent has no tools", non_retryable=True)
        return _redacted(await _guarded(lambda: llm.call_tool(call)))

    @activity.defn(name=ARCHIVE)
    def archive(self, archive: Archive) -> None:
        self._check_agent(archive.agent_id, "the archive")
        with _store_errors():
            self.store.archive(archive)

    @activity.defn(name=STORE_RECORD)
    def store_record(self, archive: Archive, record: TaskRecord) -> None:
        self._check_agent(record.agent_id, "the record")
        with _store_errors():
            self.store.store_final(archive, record)

    @activity.defn(name=HEARTBEAT)
    def heartbeat(self, agent_id: str) -> None:
        self._check_agent(agent_id, "the heartbeat")
        self.store.set_meta("last_heartbeat", datetime.now(UTC).isoformat())

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.run_turn,
            self.model_step,
            self.tool_call,
            self.archive,
            self.store_record,
            self.heartbeat,
        ]


@contextlib.contextmanager
def _store_errors() -> Generator[None, None, None]:
    """A store that cannot take writes (full disk, read-only file) will not take them on a retry:
    the workflow stops trying (``StoreRefused``) and keeps the record in its result. A busy or
    locked database is retried."""
    try:
        yield
    except sqlite3.OperationalError as error:
        text = str(error).lower()
        if "full" in text or "readonly" in text or "read-only" in text or "disk i/o" in text:
            log.error("the store %s refused a write: %s", activity.info().task_queue, error)
            raise ApplicationError(
                f"the agent's store refused the write: {error}",
                type="StoreRefused",
                non_retryable=True,
            ) from None
        raise


async def _guarded(work: Callable[[], Awaitable[T]]) -> T:
    """Run an agent's work: heartbeating when it is a regular activity, and telling a worker stop
    (``WorkerStopped``, retried freely) from the agent's own failure."""
    try:
        if activity.info().is_local:
            return await work()
        result: list[T] = []
        async with anyio.create_task_group() as tg:

            async def beat() -> None:
                while True:
                    activity.heartbeat()
                    await anyio.sleep(_HEARTBEAT_EVERY)

            tg.start_soon(beat)
            result.append(await work())
            tg.cancel_scope.cancel()
        return result[0]
    except anyio.get_cancelled_exc_class():
        if activity.is_worker_shutdown():
            raise ApplicationError(
                "the worker stopped during this attempt", type="WorkerStopped"
            ) from None
        raise


def _redacted(value: T) -> T:
    """A value with every secret of the process masked: it is stored, and sent to clients."""
    return SECRETS.redact_attrs(value)
