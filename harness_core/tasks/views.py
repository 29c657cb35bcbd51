"""One agent's tasks as they are read: the one read model that builds every ``TaskView``.

A task is read from three places, newest first: the workflow of a running task (its ``tail`` query:
the current run's messages and events), the agent's listing index (a row written at each durable
point: a turn's start, the task at rest, its end), and the store's final record of an ended task
(whose workflow may be gone, or in another process's retention). Runs archived before a workflow
continued as new are in the store too. ``TaskReads`` assembles a ``TaskView`` from whichever of them
answers, in one place, and follows a task's event log for streams. ``TaskService``
(``harness_core.tasks.service``) adds the write path.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar, cast

import anyio
from temporalio.client import (
    Client,
    WorkflowFailureError,
)
from temporalio.service import RPCError, RPCStatusCode

from harness_core.errors import (
    TaskNotFoundError,
)
from harness_core.payloads import (
    EventPage,
    ProtoJSON,
    TaskEvent,
    TaskRecord,
    TaskStart,
    TaskTail,
    TaskView,
    may_access,
)
from harness_core.pool import TemporalConnection
from harness_core.store import IndexRow, TaskStore
from harness_core.tasks.listing import TaskListing
from harness_core.tasks.pace import TurnPace
from harness_core.tasks.workflow import TaskWorkflow
from harness_core.temporal.names import TASK_WORKFLOW

__all__ = [
    "AFTER_TURN_DELAY",
    "FOLLOW_FIRST_DELAY",
    "FOLLOW_MAX_DELAY",
    "TaskReads",
    "fold_artifacts",
    "not_found",
]

log = logging.getLogger("harness.tasks")

T = TypeVar("T")

# How often a stream polls a quiet task's durable log: soon after a change, then backing off.
FOLLOW_FIRST_DELAY = 0.02
FOLLOW_MAX_DELAY = 0.5
# After a turn of the task ended in this process (its outcome is durable within milliseconds),
# or its store entry was written here: a stream reads the task again this soon.
AFTER_TURN_DELAY = 0.004
# The longest single wait before a query refused as busy is tried again.
_QUERY_PATIENCE = 3.0
# Task ids known to run on this agent's queue (ownership never changes).
_OWNED_CACHE = 4096


def not_found(exc: RPCError) -> bool:
    return exc.status == RPCStatusCode.NOT_FOUND


def fold_artifacts(events: list[TaskEvent] | tuple[TaskEvent, ...]) -> list[ProtoJSON]:
    """The task's artifacts from its artifact updates: a chunk with ``append`` adds its parts (text
    joins the text before it), any other replaces the artifact; first emitted first."""
    artifacts: dict[str, ProtoJSON] = {}
    for event in events:
        if event.kind != "artifact":
            continue
        artifact = cast("ProtoJSON", event.body.get("artifact") or {})
        artifact_id = str(artifact.get("artifactId", ""))
        known = artifacts.get(artifact_id)
        if not event.body.get("append") or known is None:
            artifacts[artifact_id] = artifact
            continue
        parts: list[ProtoJSON] = [
            dict(p) for p in cast("list[ProtoJSON]", known.get("parts") or [])
        ]
        for part in cast("list[ProtoJSON]", artifact.get("parts") or []):
            last = parts[-1] if parts else None
            if last is not None and set(last) == {"text"} and set(part) == {"text"}:
                last["text"] = str(last["text"]) + str(part["text"])
            else:
                parts.append(dict(part))
        artifacts[artifact_id] = {**known, "parts": parts}
    return list(artifacts.values())


class TaskReads(TaskListing):
    """Reading one agent's tasks (the base of ``TaskService``, which adds the writes).
    Cancellation of a caller cancels its Temporal call.

    Two checks guard every operation on a task, and a task that fails either reads as not found
    (and is left unchanged):

    * Ownership: the task's workflow runs on this agent's task queue (a described workflow, cached
      per id), and carries this agent's id. Another agent's task, in the same namespace, fails it.
    * Access (``may_access``): the caller's participant is on the task, or both are anonymous.

    A task's content is read from two places: the agent's store (runs archived before the workflow
    continued as new, and the whole task once it ended) and the workflow's current run.
    """

    def __init__(
        self,
        *,
        agent_id: str,
        queue: str,
        connection: TemporalConnection,
        store: TaskStore,
        start: TaskStart,
        pace: TurnPace | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.queue = queue
        self._connection = connection
        self._store = store
        # How the agent's new tasks run (the ids are filled in per task), and how long its turns
        # took lately (a long one: new tasks run turns as regular activities).
        self._start = start
        self._pace = pace
        self._owned: OrderedDict[str, None] = OrderedDict()

    @property
    def connection(self) -> TemporalConnection:
        """The agent's leased Temporal connection (client and bridge)."""
        return self._connection

    async def _call(self, fn: Callable[[Client], Awaitable[T]]) -> T:
        client = self._connection.client

        async def run() -> T:
            return await fn(client)

        return await self._connection.bridge.call(run)

    async def _record(self, task_id: str) -> TaskRecord | None:
        record = await anyio.to_thread.run_sync(self._store.get, task_id)
        return record if record is not None and record.agent_id == self.agent_id else None

    def _own(self, task_id: str) -> None:
        self._owned[task_id] = None
        self._owned.move_to_end(task_id)
        while len(self._owned) > _OWNED_CACHE:
            self._owned.popitem(last=False)

    async def _owner(self, task_id: str) -> bool | None:
        """True when the task's workflow runs on this agent's queue, False when it runs on another
        (or is no task), None when there is no such workflow."""
        if task_id in self._owned:
            self._owned.move_to_end(task_id)
            return True
        owner = await self._runs_here(task_id, TASK_WORKFLOW)
        if owner:
            self._own(task_id)
        return owner

    async def _runs_here(self, workflow_id: str, workflow_type: str) -> bool | None:
        """True when ``workflow_id`` is a ``workflow_type`` on this agent's queue, False when it is
        something else, None when there is no such workflow."""

        async def describe(client: Client) -> tuple[str, str]:
            info = await client.get_workflow_handle(workflow_id).describe()
            return info.task_queue, info.workflow_type

        try:
            queue, kind = await self._call(describe)
        except RPCError as exc:
            if not_found(exc) or exc.status == RPCStatusCode.INVALID_ARGUMENT:
                return None
            raise
        return queue == self.queue and kind == workflow_type

    # -- send -------------------------------------------------------------------------------------

    async def _ended_record(self, task_id: str) -> TaskRecord | None:
        """An ended task's record: from the store, else from its closed workflow's result.

        The second source covers a record stored by another process, or one the store could not
        take (its last run is then in the result). A task removed after its retention has none.
        """
        record = await self._record(task_id)
        if record is not None:
            return record
        row = await self._row(task_id)
        if row is not None and row.swept:
            return None

        async def result(client: Client) -> TaskRecord:
            handle = client.get_workflow_handle(task_id, result_type=TaskRecord)
            return await handle.result(follow_runs=False, rpc_timeout=timedelta(seconds=10))

        try:
            record = await self._call(result)
        except (RPCError, WorkflowFailureError):
            return None
        return record if record.agent_id == self.agent_id else None

    async def _tail(self, task_id: str, after_event: int, after_message: int) -> TaskTail | None:
        """The workflow's current run, or None when there is no such workflow of this agent."""
        if not await self._owner(task_id):
            return None
        delay = 0.05
        while True:
            try:
                tail = await self._call(
                    lambda c: c.get_workflow_handle(task_id).query(
                        TaskWorkflow.tail, args=[after_event, after_message]
                    )
                )
                break
            except RPCError as exc:
                if not_found(exc) or exc.status == RPCStatusCode.INVALID_ARGUMENT:
                    return None
                # A workflow busy with a long workflow task buffers few queries; wait a moment.
                if exc.status != RPCStatusCode.RESOURCE_EXHAUSTED or delay > _QUERY_PATIENCE:
                    raise
                await anyio.sleep(delay)
                delay *= 2
        return tail if tail.agent_id == self.agent_id else None

    def _assemble(
        self,
        task_id: str,
        context_id: str,
        status: ProtoJSON,
        messages: list[ProtoJSON],
        events: list[TaskEvent],
    ) -> ProtoJSON:
        task: ProtoJSON = {"id": task_id, "contextId": context_id, "status": status}
        if messages:
            task["history"] = messages
        artifacts = fold_artifacts(events)
        if artifacts:
            task["artifacts"] = artifacts
        return task

    def _record_rows(self, record: TaskRecord, after: int) -> list[TaskEvent]:
        """An ended task's events after ``after`` (in a worker thread): from the store, and from the
        workflow's result for a last run the store did not take."""
        unstored = record.unstored
        if unstored is None:
            return self._store.events(record.task_id, after, record.events)
        first_seq = unstored.events[0].seq if unstored.events else record.events + 1
        stored = self._store.events(record.task_id, after, first_seq - 1)
        return [*stored, *(e for e in unstored.events if e.seq > after)]

    async def _record_view(self, record: TaskRecord) -> TaskView:
        def read() -> ProtoJSON:
            messages = self._store.messages(record.task_id, 0, record.messages)
            unstored = record.unstored
            if unstored is not None:
                messages = [*messages[: unstored.first_message], *unstored.messages]
            events = self._record_rows(record, 0)
            return self._assemble(
                record.task_id, record.context_id, record.status, messages, events
            )

        return self._ended_view(record, await anyio.to_thread.run_sync(read))

    @staticmethod
    def _ended_view(record: TaskRecord, task: ProtoJSON) -> TaskView:
        return TaskView(
            task=task,
            last_seq=record.events,
            closed=True,
            participants=record.participants,
            agent_id=record.agent_id,
        )

    async def view(self, task_id: str, participant: str | None) -> TaskView | None:
        """The task as it is now, or None when this agent has no such task for ``participant``."""
        view = await self._view(task_id)
        return view if view is not None and may_access(view.participants, participant) else None

    async def _row(self, task_id: str) -> IndexRow | None:
        """The task's row in the listing index, if it has one (a removed task's is a tombstone:
        ``swept``)."""
        row = await anyio.to_thread.run_sync(self._store.index_row, task_id)
        return row if row is not None and row.agent_id == self.agent_id else None

    def _row_task(
        self, row: IndexRow, *, history: int | None = None, artifacts: bool = True
    ) -> ProtoJSON:
        """An indexed task from the store (in a worker thread): its latest ``history`` messages
        (all when None) and, with ``artifacts``, its artifacts."""
        first = 0 if history is None else max(0, row.messages - history)
        messages = self._store.messages(row.task_id, first, row.messages)
        events = self._store.events(row.task_id, 0, row.last_seq) if artifacts else []
        return self._assemble(row.task_id, row.context_id, row.status, messages, events)

    def _row_view(self, row: IndexRow, task: ProtoJSON) -> TaskView:
        return TaskView(
            task=task,
            last_seq=row.last_seq,
            closed=row.closed,
            participants=row.participants,
            agent_id=row.agent_id,
            busy=row.busy,
        )

    async def _view(self, task_id: str) -> TaskView | None:
        """The task if it is this agent's, whoever asks: from the listing index and the store,
        never waiting for the task's workflow."""
        row = await self._row(task_id)
        if row is not None:
            if row.swept or not await self._confirmed(row):
                return None
            task = await anyio.to_thread.run_sync(self._row_task, row)
            return self._row_view(row, task)
        # Not indexed: a task whose store refused its writes, or one that has run since before
        # the index existed and not rested since.
        record = await self._record(task_id)
        if record is not None:
            return await self._record_view(record)
        # An ended workflow still answers queries (within its retention), so a task whose record
        # another process stored reads from its last run.
        tail = await self._tail(task_id, 0, 0)
        if tail is None:
            return None

        def read() -> ProtoJSON:
            messages = self._store.messages(task_id, 0, tail.archived_messages)
            events = self._store.events(task_id, 0, tail.archived_events)
            context_id = str(
                (tail.events[0].body if tail.events else {}).get("contextId")
                or (tail.messages[0] if tail.messages else {}).get("contextId")
                or ""
            )
            return self._assemble(
                task_id,
                context_id,
                tail.status,
                [*messages, *tail.messages],
                [*events, *tail.events],
            )

        return self._tail_view(tail, await anyio.to_thread.run_sync(read))

    def _light(self, task_id: str, tail: TaskTail) -> TaskView:
        """The task's state without its history or artifacts (what a stream needs)."""
        return self._tail_view(tail, {"id": task_id, "status": tail.status})

    @staticmethod
    def _tail_view(tail: TaskTail, task: ProtoJSON) -> TaskView:
        return TaskView(
            task=task,
            last_seq=tail.last_seq,
            closed=tail.closed,
            participants=tail.participants,
            agent_id=tail.agent_id,
            busy=tail.busy,
        )

    async def events(self, task_id: str, after: int, participant: str | None) -> EventPage | None:
        """Events after ``after`` without waiting, and the task; None when this agent has no such
        task for ``participant``."""
        view = await self.view(task_id, participant)
        if view is None:
            return None
        page = await self._events_after(task_id, after)
        if page is None:
            return EventPage(events=(), view=view)
        return EventPage(events=page.events, view=view)

    async def _record_events(self, record: TaskRecord, after: int) -> EventPage:
        """An ended task's events after ``after``, and its state (not its history)."""
        events = await anyio.to_thread.run_sync(self._record_rows, record, after)
        task = {"id": record.task_id, "contextId": record.context_id, "status": record.status}
        return EventPage(events=tuple(events), view=self._ended_view(record, task))

    async def _events_after(self, task_id: str, after: int) -> EventPage | None:
        row = await self._row(task_id)
        if row is not None and row.swept:
            return None
        if row is not None:
            events = await anyio.to_thread.run_sync(
                self._store.events, task_id, after, row.last_seq
            )
            # A sender's receipt may have written a later event before the turn that wrote an
            # earlier one started; a reader stops before the gap and reads on after it fills.
            contiguous: list[TaskEvent] = []
            for event in events:
                if event.seq != after + len(contiguous) + 1:
                    break
                contiguous.append(event)
            task: ProtoJSON = {"id": task_id, "contextId": row.context_id, "status": row.status}
            return EventPage(events=tuple(contiguous), view=self._row_view(row, task))
        record = await self._record(task_id)
        if record is not None:
            return await self._record_events(record, after)
        tail = await self._tail(task_id, after, 2**62)
        if tail is None:
            return None
        archived: list[TaskEvent] = []
        if after < tail.archived_events:
            archived = await anyio.to_thread.run_sync(
                self._store.events, task_id, after, tail.archived_events
            )
        return EventPage(events=(*archived, *tail.events), view=self._light(task_id, tail))

    async def poll(self, task_id: str, after: int, participant: str | None) -> EventPage:
        """The task's durable events after ``after``, now, and its state (not its history).

        Raises ``TaskNotFoundError`` when this agent has no such task for ``participant``.
        """
        page = await self._events_after(task_id, after)
        if page is not None and may_access(page.view.participants, participant):
            return page
        # Gone since the last poll: its record may be on its way to the store.
        ended = await self._ended_record(task_id)
        if ended is None or not may_access(ended.participants, participant):
            raise TaskNotFoundError(f"task {task_id} not found")
        return await self._record_events(ended, after)

    async def follow(self, task_id: str, after: int, participant: str | None) -> EventPage:
        """Wait for durable events after ``after`` (or for the task to settle) and return them,
        polling quickly at first and then less often while nothing happens."""
        delay = FOLLOW_FIRST_DELAY
        while True:
            page = await self.poll(task_id, after, participant)
            if page.events or page.view.settled:
                return page
            await anyio.sleep(delay)
            delay = min(delay * 1.5, FOLLOW_MAX_DELAY)
