"""The activities of one agent: a turn, a model request and a tool call (the LLM loop), archiving a run,
storing an ended task, and the heartbeat. What a turn reads (its history, its context) is
``harness_core.turn_history``.

They run on the Temporal event loop (the caller's under asyncio, the bridge thread under Trio); the
store's synchronous SQLite calls run in worker threads, never on that loop. Each activity is scheduled
with one attempt and the workflow owns the retries: an attempt that a worker stopping interrupts raises
``WorkerStopped``, which the workflow retries without counting it against the agent.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Generator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar, cast

import anyio
import attrs
from temporalio import activity
from temporalio.exceptions import ApplicationError

from harness_core.agents.compaction import Transcript
from harness_core.agents.context import ActivityTurnContext, outcome_of
from harness_core.agents.parts import message_from_json
from harness_core.agents.turn import Agent, TurnMessage
from harness_core.converter import payload_converter
from harness_core.delegation.activities import DelegationActivities
from harness_core.guarded import WORKER_GRACE, GuardedWork
from harness_core.live import LiveHub
from harness_core.payloads import (
    Archive,
    CompactRequest,
    IndexEntry,
    ModelStep,
    ModelStepInput,
    TaskRecord,
    ToolCallInput,
    ToolCallOutput,
    TurnOutcome,
    TurnRequest,
)
from harness_core.plugins.runtime import AgentPlugins
from harness_core.push.delivery import PushActivities
from harness_core.retention import Sweep
from harness_core.secrets import SECRETS
from harness_core.store import TaskStore
from harness_core.store.connection import STORE_ERRORS
from harness_core.tasks.pace import TurnPace
from harness_core.tasks.reconcile import reconcile
from harness_core.tasks.state import text_message, turn_end
from harness_core.temporal.codec import PayloadStore
from harness_core.temporal.names import (
    ARCHIVE,
    CHECKPOINT,
    COMPACT,
    HEARTBEAT,
    MODEL_STEP,
    RUN_TURN,
    STORE_RECORD,
    TOOL_CALL,
)
from harness_core.turn_history import HISTORY_WINDOW, LateStart, TurnHistory

__all__ = ["HISTORY_WINDOW", "RECORD_WITHIN", "WORKER_GRACE", "AgentActivities", "LlmLoop"]

log = logging.getLogger("harness.worker")
T = TypeVar("T")

#: A turn stores its task's end itself only this soon (seconds) after its workflow task began, so
#: that a message rarely gets in meanwhile: a workflow-task heartbeat (at 80 % of its 10 s timeout)
#: or a retry's backoff would let one in. When one does, the workflow takes the task back.
RECORD_WITHIN = 2.0


class LlmLoop(Protocol):
    """The built-in LLM agent's steps, as the ``model_step`` and ``tool_call`` activities run them."""

    async def step(
        self,
        transcript: Transcript,
        step: ModelStepInput,
        ctx: ActivityTurnContext,
        *,
        stream: bool = True,
    ) -> ModelStep: ...

    async def summarize(
        self,
        previous: str | None,
        messages: Sequence[tuple[int, TurnMessage]],
        exchanges: dict[int, list[Any]],
    ) -> str: ...

    async def call_tool(self, call: ToolCallInput) -> ToolCallOutput: ...


class AgentActivities(TurnHistory, GuardedWork):
    """The activity implementations bound to one agent and its stores."""

    def __init__(
        self,
        agent_id: str,
        agent: Agent | None,
        store: TaskStore,
        llm: LlmLoop | None = None,
        *,
        payloads: PayloadStore | None = None,
        ended_ttl: float = 0.0,
        delegation: DelegationActivities | None = None,
        push: PushActivities | None = None,
        delegates: Callable[[], list[tuple[str, str]]] = list,
        pace: TurnPace | None = None,
        live: LiveHub | None = None,
        plugins: AgentPlugins | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.agent = agent
        self.store = store
        self.llm = llm
        # Run by the heartbeat: ended tasks older than ended_ttl (0: never), then the payloads of
        # the claim check that no task refers to any more.
        self.sweep = Sweep(agent_id, store, payloads, ended_ttl)
        self.delegation = delegation
        self.push = push
        # The agents a turn may delegate to, with what they say of themselves.
        self.delegates = delegates
        self.pace = pace
        # The agent's live fan-out to its open streams in this process (the Harness owns it).
        self.live = live if live is not None else LiveHub()
        # Asked before each turn (their gates), in the turn's first activity.
        self.plugins = plugins

    def _paced(self, began: float) -> None:
        """A local turn (or model request) that ran long: the agent's new tasks avoid holding
        workflow tasks with theirs (``harness_core.tasks.pace``)."""
        if self.pace is not None and activity.info().is_local:
            self.pace.note(time.monotonic() - began)

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

    async def _gate(
        self,
        request: TurnRequest,
        history: tuple[TurnMessage, ...],
        late: LateStart | None = None,
    ) -> tuple[str, ...]:
        """The plugins whose turn gates decline this turn (none: take it). Guarded like the
        turn: a slow gate heartbeats, and a client's cancel is heard (and a late start
        written)."""
        plugins = self.plugins
        if plugins is None or not plugins.gated:
            return ()
        return await self._guarded(
            request.task_id,
            lambda: plugins.gate(history, task_id=request.task_id, context_id=request.context_id),
            first_look=late.write if late is not None else None,
        )

    @activity.defn(name=RUN_TURN)
    async def run_turn(self, request: TurnRequest) -> TurnOutcome:
        self._check_agent(request.agent_id, "a turn")
        agent = self.agent
        if agent is None:
            raise ApplicationError("this agent runs an LLM loop, not turns", non_retryable=True)
        late = LateStart(self, request) if LateStart.applies(request) else None
        if late is None:
            history = await self._history(request)
        else:
            history = tuple(message_from_json(m, s) for m, s in late.rows())
        try:
            declined = await self._gate(request, history, late)
            if declined:
                outcome = TurnOutcome(kind="declined", declined=declined)
            else:
                outcome = await self._run_agent(agent, request, history, late)
        except Exception:
            if late is not None:
                await late.write()  # the turn did start, whatever the workflow does next
            raise
        outcome = await self._record_end(request, outcome)
        if late is not None and outcome.recorded is None:
            await late.write()
        return outcome

    async def _run_agent(
        self,
        agent: Agent,
        request: TurnRequest,
        history: tuple[TurnMessage, ...],
        late: LateStart | None,
    ) -> TurnOutcome:
        before_progress = late.write if late is not None else None
        ctx = self._context(request, history, before_progress)
        began = time.monotonic()
        try:
            result = await self._guarded(
                request.task_id, lambda: agent.turn(ctx), first_look=before_progress
            )
            return _redacted(outcome_of(result, ctx))
        finally:
            self._paced(began)
            self.live.end(self.agent_id, request.task_id)

    async def _record_end(self, request: TurnRequest, outcome: TurnOutcome) -> TurnOutcome:
        """A turn that ends its task stores the task's end (archive and final record) itself,
        when the workflow asked (``TurnRequest.record_at``): the workflow, in the same workflow
        task, then has nothing to store, and the sender hears the answer one activity sooner.
        Not when the workflow task is old enough for a message to have reached the task since
        (the workflow would take the task back), nor when the store fails (the workflow stores
        instead)."""
        now = datetime.now(UTC)
        if not request.record_at or not _young(request.record_at, now):
            return outcome
        ending = turn_end(request, outcome, now.isoformat().replace("+00:00", "Z"))
        if ending is None:
            return outcome
        archive, record = ending
        try:
            await anyio.to_thread.run_sync(self.store.store_final, archive, record)
        except STORE_ERRORS as error:
            log.warning("task %s: its turn could not store its end: %s", request.task_id, error)
            return outcome
        self.live.stored(self.agent_id, request.task_id)
        return attrs.evolve(outcome, recorded=record)

    @activity.defn(name=MODEL_STEP)
    async def model_step(self, turn: Any, number: int, final: bool, *exchange: Any) -> ModelStep:
        # Its arguments arrive as JSON: a variable number of them has no type hints to follow.
        step = ModelStepInput(
            turn=payload_converter.structure(turn, TurnRequest),
            step=number,
            exchange=exchange,
            final=final,
        )
        self._check_agent(step.turn.agent_id, "a model request")
        llm = self.llm
        if llm is None:
            raise ApplicationError("this agent has no model", non_retryable=True)
        transcript = await self._transcript(step.turn)
        history = tuple(row.message for row in transcript.rows)
        ctx = self._context(step.turn, history)
        if step.step == 1:
            declined = await self._gate(step.turn, history)
            if declined:
                return ModelStep(text="", tool_calls=(), response=None, declined=declined)
        # The model's text streams in only when it can be watched: a regular activity (its
        # task's streams read it live), or a local one that a stream of this process follows.
        stream = not activity.info().is_local or self.live.listening(
            self.agent_id, step.turn.task_id
        )
        began = time.monotonic()
        try:
            answer = _redacted(
                await self._guarded(
                    step.turn.task_id, lambda: llm.step(transcript, step, ctx, stream=stream)
                )
            )
            if step.exchange and answer.compact is None and (not answer.tool_calls or final):
                # The turn's answer came with tool calls: later turns see them with it (at the
                # answer's position), until they are folded away. Masked like the answer.
                turn = step.turn
                position = turn.archived + len(turn.messages)
                kept = cast("list[Any]", SECRETS.redact_json([*step.exchange, answer.response]))
                try:
                    await anyio.to_thread.run_sync(
                        self.store.put_exchange, turn.task_id, position, kept
                    )
                except STORE_ERRORS as error:
                    log.warning(
                        "task %s: the store did not keep the turn's tool calls: %s",
                        turn.task_id,
                        error,
                    )
            return await self._step_end(step, answer)
        finally:
            self._paced(began)
            self.live.end(self.agent_id, step.turn.task_id)

    async def _step_end(self, step: ModelStepInput, answer: ModelStep) -> ModelStep:
        """A step that answers stores the task's end when the workflow asked
        (``TurnRequest.record_at``), with the outcome the workflow makes of it (``LlmTurn``)."""
        if not step.turn.record_at or answer.compact is not None or answer.declined:
            return answer
        if answer.tool_calls and not step.final:
            return answer
        outcome = TurnOutcome(
            kind="complete",
            message=answer.message or text_message(answer.text),
            emitted=(*step.turn.emitted, *answer.emitted),
        )
        recorded = (await self._record_end(step.turn, outcome)).recorded
        return answer if recorded is None else attrs.evolve(answer, recorded=recorded)

    @activity.defn(name=COMPACT)
    async def compact(self, request: CompactRequest) -> int:
        """Fold the task's messages ``first`` up to ``upto`` into a summary, once: the plugins'
        listeners hear the exact slice first (once), then the summary is made (by a plugin's
        ``summarize``, else the model) and stored; a retry finds what is done."""
        self._check_agent(request.agent_id, "a compaction")
        llm = self.llm
        if llm is None:
            raise ApplicationError("this agent has no model", non_retryable=True)
        store = self.store
        task_id = request.task_id
        notified, summary = await anyio.to_thread.run_sync(store.fold_state, task_id, request.upto)
        if summary is not None:
            return request.upto
        rows = await anyio.to_thread.run_sync(
            store.messages_with_senders, task_id, request.first, request.upto
        )
        messages = tuple(message_from_json(m, sender) for m, sender in rows)
        plugins = self.plugins
        if not notified:
            if plugins is not None:
                await self._guarded(
                    task_id,
                    lambda: plugins.displaced(
                        messages, task_id=task_id, context_id=request.context_id
                    ),
                )
            await anyio.to_thread.run_sync(
                store.fold_notified, task_id, request.first, request.upto
            )
        previous = await anyio.to_thread.run_sync(store.latest_fold, task_id)
        exchanges = await anyio.to_thread.run_sync(
            store.exchanges, task_id, request.first, request.upto
        )
        summarizer = self.plugins.summarizer() if self.plugins is not None else None
        earlier = previous[2] if previous is not None else None
        if summarizer is not None:
            # What a plugin returns is checked, whatever its annotation says.
            made = cast(
                "object",
                await self._guarded(
                    task_id,
                    lambda: summarizer(
                        earlier, messages, task_id=task_id, context_id=request.context_id
                    ),
                ),
            )
        else:
            positioned = [(request.first + i, m) for i, m in enumerate(messages)]
            made = cast(
                "object",
                await self._guarded(task_id, lambda: llm.summarize(earlier, positioned, exchanges)),
            )
        if not isinstance(made, str) or not made.strip():
            # A fold without a summary would be asked for again and again.
            raise ApplicationError("the compaction's summary came back empty", type="SummaryEmpty")
        text = made
        await anyio.to_thread.run_sync(
            store.fold_summary, task_id, request.first, request.upto, SECRETS.redact(text)
        )
        return request.upto

    @activity.defn(name=TOOL_CALL)
    async def tool_call(self, call: ToolCallInput) -> ToolCallOutput:
        self._check_agent(call.agent_id, "a tool call")
        llm = self.llm
        if llm is None:
            raise ApplicationError("this agent has no tools", non_retryable=True)
        return _redacted(await self._guarded(call.task_id, lambda: llm.call_tool(call)))

    @activity.defn(name=ARCHIVE)
    def archive(self, archive: Archive) -> None:
        self._check_agent(archive.agent_id, "the archive")
        with _store_errors():
            self.store.archive(archive)

    @activity.defn(name=CHECKPOINT)
    def checkpoint(self, entry: IndexEntry) -> None:
        self._check_agent(entry.archive.agent_id, "an index entry")
        with _store_errors():
            self.store.checkpoint(entry)
        self.live.stored(self.agent_id, entry.archive.task_id)

    @activity.defn(name=STORE_RECORD)
    def store_record(self, archive: Archive, record: TaskRecord) -> None:
        self._check_agent(record.agent_id, "the record")
        with _store_errors():
            self.store.store_final(archive, record)
        self.live.stored(self.agent_id, record.task_id)

    @activity.defn(name=HEARTBEAT)
    async def heartbeat(self, agent_id: str) -> None:
        """The agent is served: noted, then the retention sweep, then the tasks whose workflow
        ended without the store learning of it (``harness_core.tasks.reconcile``)."""
        self._check_agent(agent_id, "the heartbeat")

        def note_and_sweep() -> None:
            self.store.set_meta("last_heartbeat", datetime.now(UTC).isoformat())
            self.sweep()

        await anyio.to_thread.run_sync(note_and_sweep)
        await reconcile(self.store, activity.client(), self.agent_id)

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.run_turn,
            self.model_step,
            self.tool_call,
            self.compact,
            self.archive,
            self.checkpoint,
            self.store_record,
            self.heartbeat,
            *(self.delegation.all() if self.delegation is not None else ()),
            *(self.push.all() if self.push is not None else ()),
        ]


def refuses_writes(error: Exception) -> bool:
    """Whether a store's error says it will not take writes on a retry either: SQLite's full disk,
    read-only file or I/O error; PostgreSQL's full disk (SQLSTATE 53100). A PostgreSQL
    "read-only transaction" is not among them: after a failover a retry reaches the new primary."""
    if isinstance(error, sqlite3.Error):
        text = str(error).lower()
        return any(word in text for word in ("full", "readonly", "read-only", "disk i/o"))
    return getattr(error, "sqlstate", None) == "53100"


@contextlib.contextmanager
def _store_errors() -> Generator[None, None, None]:
    """A store that cannot take writes (full disk, read-only file) will not take them on a retry:
    the workflow stops trying (``StoreRefused``) and keeps the record in its result. A busy or
    locked database is retried."""
    try:
        yield
    except STORE_ERRORS as error:
        if refuses_writes(error):
            log.error("the store %s refused a write: %s", activity.info().task_queue, error)
            raise ApplicationError(
                f"the agent's store refused the write: {error}",
                type="StoreRefused",
                non_retryable=True,
            ) from None
        raise


def _young(workflow_time: str, now: datetime) -> bool:
    """Whether a workflow task that began at ``workflow_time`` (the workflow's clock) began less
    than ``RECORD_WITHIN`` before ``now`` (this host's clock)."""
    try:
        began = datetime.fromisoformat(workflow_time)
    except ValueError:
        return False
    return abs((now - began).total_seconds()) < RECORD_WITHIN


def _redacted(value: T) -> T:
    """A value with every secret of the process masked: it is stored, and sent to clients."""
    return SECRETS.redact_attrs(value)
