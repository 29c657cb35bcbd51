"""What a turn reads: its messages (the task's latest, or those since its last fold, with earlier
answers' tool calls for a model step) and its context (``ActivityTurnContext``).

A mixin of ``AgentActivities`` (``harness_core.activities``): the turn and model-step activities read
their history the same way, from the agent's store in worker threads (never on the activity's event
loop), and as they read write the request's messages (with the index entry it carries) to the store.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
import attrs

from harness_core.agents.compaction import Row, Transcript
from harness_core.agents.context import ActivityTurnContext
from harness_core.agents.parts import message_from_json
from harness_core.agents.turn import TurnMessage
from harness_core.live import LiveHub
from harness_core.payloads import ProtoJSON, TurnRequest
from harness_core.store import TaskStore
from harness_core.store.connection import STORE_BUSY_ERRORS

__all__ = ["HISTORY_WINDOW", "TurnHistory"]

log = logging.getLogger("harness.worker")

#: The most messages a turn is given: the task's latest ones.
HISTORY_WINDOW = 400


class TurnHistory:
    """The history and context of an agent's turns, read from its store."""

    agent_id: str
    store: TaskStore
    live: LiveHub
    delegates: Callable[[], list[tuple[str, str]]]

    async def _history(
        self, request: TurnRequest, since: int | None = None
    ) -> tuple[TurnMessage, ...]:
        """The turn's messages: the task's latest ``HISTORY_WINDOW``, content restored
        (``_history_rows``; in a thread unless the request holds them all)."""
        if _inline_only(request, since):
            rows = _inline(request)
        else:
            rows = await anyio.to_thread.run_sync(self._history_rows, request, since)
        return tuple(message_from_json(m, sender) for m, sender in rows)

    def _history_rows(
        self, request: TurnRequest, since: int | None = None
    ) -> list[tuple[Any, str | None]]:
        """The turn's messages (JSON) with their senders, from the store's side (blocking).

        First the listing index learns that the turn started: the request's messages and the
        task's new events are written to the store with its state (at their positions, so a retry
        changes nothing). Earlier messages are read from the store; the request's own are used as
        they are. A store that takes no writes does not stop the turn.
        """
        start = request.archived
        end = start + len(request.messages)
        inline = _inline(request)
        if _inline_only(request, since):
            return inline
        self.write_turn_start(request)
        store = self.store
        first = max(0, end - HISTORY_WINDOW) if since is None else min(since, end)
        earlier = store.messages_with_senders(request.task_id, first, start)
        return [*earlier, *inline[max(0, first - start) :]]

    def write_turn_start(self, request: TurnRequest) -> None:
        """The listing index learns that the turn started: the request's messages and the task's
        new events, with its state (blocking; at their positions, so a retry changes nothing).
        A store that takes no writes does not stop the turn."""
        entry = request.index
        try:
            if entry is not None:
                archive = attrs.evolve(
                    entry.archive,
                    first_message=request.archived,
                    messages=request.messages,
                    senders=request.senders,
                )
                self.store.checkpoint(attrs.evolve(entry, archive=archive))
            elif request.persist:
                self.store.put_messages(
                    request.task_id, request.archived, request.messages, request.senders
                )
        except STORE_BUSY_ERRORS as error:
            log.warning("task %s: the store refused its messages: %s", request.task_id, error)

    def _context(
        self,
        request: TurnRequest,
        history: tuple[TurnMessage, ...],
        before_progress: Callable[[], Awaitable[None]] | None = None,
    ) -> ActivityTurnContext:
        return ActivityTurnContext(
            task_id=request.task_id,
            context_id=request.context_id,
            number=request.number,
            history=history,
            new_ids=request.new_ids,
            publish=partial(self.live.publish, self.agent_id, request.task_id),
            agents=dict(self.delegates()),
            earlier=partial(self._context_history, request, history),
            on_progress=partial(self._note_progress, request.task_id, before_progress),
        )

    async def _transcript(self, request: TurnRequest) -> Transcript:
        """The turn's messages for a model step: those since the task's last fold (its summary
        with them), each earlier answer with its turn's tool calls and results. The store is
        read once, in one thread hop (the fold, the messages, the exchanges)."""
        end = request.archived + len(request.messages)

        def read() -> tuple[Any, list[tuple[Any, str | None]], dict[int, Any] | None]:
            fold = self.store.latest_fold(request.task_id)
            since = fold[1] if fold is not None else None
            rows = self._history_rows(request, since)
            first = end - len(rows)
            expected = since if since is not None else max(0, end - HISTORY_WINDOW)
            if first != min(expected, end):
                return fold, rows, None
            return fold, rows, self.store.exchanges(request.task_id, first, end)

        fold, stored, exchanges = await anyio.to_thread.run_sync(read)
        history = tuple(message_from_json(m, sender) for m, sender in stored)
        first = end - len(history)
        if exchanges is None:
            # Rows are missing from the store (it refused a write): positions cannot be told,
            # so nothing is folded and no earlier exchange is placed this time.
            log.warning("task %s: its stored history has gaps; no compaction", request.task_id)
            rows = tuple(Row(-1, message) for message in history)
            return Transcript(rows, summary=fold[2] if fold else None, foldable=0)
        new = set(request.new_ids)
        rows = tuple(
            Row(first + i, message, tuple(exchanges.get(first + i, ())))
            for i, message in enumerate(history)
        )
        foldable = next(
            (i for i, row in enumerate(rows) if row.message.message_id in new), len(rows)
        )
        return Transcript(rows, summary=fold[2] if fold else None, foldable=foldable)

    async def _note_progress(
        self,
        task_id: str,
        before: Callable[[], Awaitable[None]] | None,
        status: ProtoJSON,
    ) -> None:
        if before is not None:
            await before()  # the index has the turn's start first (``LateStart``)
        try:
            await anyio.to_thread.run_sync(self.store.note_progress, task_id, status)
        except STORE_BUSY_ERRORS as error:
            log.warning("task %s: the index did not take its progress: %s", task_id, error)

    async def _context_history(
        self, request: TurnRequest, history: tuple[TurnMessage, ...], limit: int
    ) -> tuple[TurnMessage, ...]:
        """``TurnContext.context_history``: the first task of a context (its id derived from
        the task's, as for every task a client starts without one) has none, read from nowhere."""
        if request.context_id == str(uuid.uuid5(uuid.NAMESPACE_URL, request.task_id)):
            return ()
        wanted = set(request.new_ids)
        senders = [m.sender for m in history if m.message_id in wanted and m.role == "user"]
        participant = senders[-1] if senders else None
        rows = await anyio.to_thread.run_sync(
            self.store.context_messages,
            request.context_id,
            self.agent_id,
            participant,
            request.task_id,
            limit,
        )
        return tuple(message_from_json(m, sender) for m, sender in rows)


def _inline(request: TurnRequest) -> list[tuple[Any, str | None]]:
    """The request's own messages, with their senders."""
    senders = dict(request.senders)
    return [(m, senders.get(str(m.get("messageId", "")))) for m in request.messages]


def _inline_only(request: TurnRequest, since: int | None) -> bool:
    """The request holds the turn's whole history, and has nothing to write: no store call."""
    return request.archived == 0 and request.index is None and not request.persist and not since


class LateStart:
    """The start of a task's first turn given the whole run (``TurnRequest.record_at``), written
    to the listing index only when the turn lasts (50 ms: its first look for a cancel), reports
    progress, or ends without storing the task's end: until then readers see the task as its
    sender listed it (SUBMITTED), and a quick turn that ends the task writes everything at once,
    one store write instead of two on the way to the sender's answer."""

    def __init__(self, history: TurnHistory, request: TurnRequest) -> None:
        self._history = history
        self._request = request
        self._begun = False
        self._written = anyio.Event()

    @staticmethod
    def applies(request: TurnRequest) -> bool:
        """Whether ``request`` may defer its start: it holds the task's whole history."""
        return bool(request.record_at) and request.archived == 0 and request.index is not None

    def rows(self) -> list[tuple[Any, str | None]]:
        """The turn's messages, from the request alone (the latest ``HISTORY_WINDOW``)."""
        rows = _inline(self._request)
        return rows[max(0, len(rows) - HISTORY_WINDOW) :]

    async def write(self) -> None:
        """Write the start, once; a second caller returns when the first one's write is done."""
        if self._begun:
            await self._written.wait()
            return
        self._begun = True
        try:
            # Shielded: a turn that ends while the write waits for its thread (the watcher is
            # canceled then) must not leave it unwritten, since later callers take it as done.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._history.write_turn_start, self._request)
        finally:
            self._written.set()
