"""Listing an agent's tasks: pages of the listing index, newest status first, with keyset
cursors; the count of its running workflows; and its heartbeat's last run.

A base of ``TaskReads`` (``harness_core.tasks.views``), which gives it the store, the queue, the
Temporal calls and the views of index rows. A row the index learned of before its workflow
started, and that nothing wrote over since, is checked against Temporal before it is shown.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from temporalio.client import Client

from harness_core.errors import InvalidRequestValueError
from harness_core.payloads import ProtoJSON, TaskView
from harness_core.store import IndexRow, TaskStore
from harness_core.temporal.names import TASK_WORKFLOW

__all__ = ["TaskListing"]

log = logging.getLogger("harness.tasks")

T = TypeVar("T")

# How long a task the index learned of before its workflow started may go unconfirmed (nothing
# written over it) before a read checks that its workflow exists.
_UNCONFIRMED_SECONDS = 30.0


class TaskListing:
    """The listing reads of one agent's tasks."""

    _store: TaskStore
    queue: str

    async def _call(self, fn: Callable[[Client], Awaitable[T]]) -> T:
        raise NotImplementedError

    async def _owner(self, task_id: str) -> bool | None:
        raise NotImplementedError

    def _row_task(
        self, row: IndexRow, *, history: int | None = None, artifacts: bool = True
    ) -> ProtoJSON:
        raise NotImplementedError

    def _row_view(self, row: IndexRow, task: ProtoJSON) -> TaskView:
        raise NotImplementedError

    async def list(
        self,
        *,
        participant: str | None,
        context_id: str = "",
        state: str = "",
        status_after: int | None = None,
        page_size: int = 50,
        page_token: str = "",
        history: int | None = None,
        artifacts: bool = True,
    ) -> tuple[list[TaskView], str, int]:
        """The tasks ``participant`` may see, latest status first, from the listing index: never
        waiting for a workflow, and never reading more than the page.

        ``status_after`` (microseconds since the epoch) keeps tasks whose status changed at or
        after it; ``history`` limits each task's messages to the latest ones (None: all); without
        ``artifacts`` none are read. Returns the page, the next page's token ('' at the end) and
        the number of matching tasks. Tokens are keyset cursors: a task appears at most once in
        one walk through the pages, however tasks change meanwhile (one whose status changes
        moves to the front, where the next walk finds it).
        """
        cursor = _decode_token(page_token)

        rows, total = await anyio.to_thread.run_sync(
            lambda: self._store.list_index(
                participant=participant,
                context_id=context_id,
                state=state,
                status_after=status_after,
                limit=page_size + 1,
                cursor=cursor,
            )
        )
        more = len(rows) > page_size
        page = rows[:page_size]
        shown = [row for row in page if await self._confirmed(row)]
        total -= len(page) - len(shown)

        def read() -> list[TaskView]:
            return [
                self._row_view(row, self._row_task(row, history=history, artifacts=artifacts))
                for row in shown
            ]

        views = await anyio.to_thread.run_sync(read)
        if not more:
            return views, "", total
        last = page[-1]
        return views, _encode_token(last.status_at, last.task_id), total

    async def running_count(self) -> int:
        """How many of this agent's task workflows run (Temporal's visibility, a moment behind)."""
        query = (
            f"WorkflowType = {_quote(TASK_WORKFLOW)} AND TaskQueue = {_quote(self.queue)} "
            "AND ExecutionStatus = 'Running'"
        )

        async def count(client: Client) -> int:
            return (await client.count_workflows(query)).count

        return await self._call(count)

    async def _confirmed(self, row: IndexRow) -> bool:
        """False for a task the index learned of before its workflow started, whose workflow
        never did (its process died in between): the row is taken out. Checked only for rows
        nothing has written over for ``_UNCONFIRMED_SECONDS``."""
        if not row.unconfirmed or time.time() * 1e6 - row.written_at < _UNCONFIRMED_SECONDS * 1e6:
            return True
        if await self._owner(row.task_id) is not None:
            return True
        log.info("task %s never started (its process stopped first): forgotten", row.task_id)
        await anyio.to_thread.run_sync(self._store.forget_unstarted, row.task_id)
        return False

    async def last_heartbeat(self) -> str | None:
        """When the agent's heartbeat last ran (ISO 8601), or None before the first one."""
        return await anyio.to_thread.run_sync(self._store.get_meta, "last_heartbeat")


def _quote(value: str) -> str:
    """A string literal for a Temporal visibility query (values from configuration only)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _encode_token(status_at: int, task_id: str) -> str:
    return base64.urlsafe_b64encode(f"k1:{status_at}:{task_id}".encode()).decode()


def _decode_token(token: str) -> tuple[int, str] | None:
    if not token:
        return None
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
        tag, status_at, task_id = text.split(":", 2)
        if tag == "k1" and status_at.isdigit() and task_id and len(text) < 256:
            return int(status_at), task_id
    except (ValueError, UnicodeDecodeError):
        pass
    raise InvalidRequestValueError("pageToken is not a token this server returned")
