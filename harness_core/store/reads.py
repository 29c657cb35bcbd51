"""The reads of an agent's store: ended tasks' records, archived messages and events, the
listing index, a task's cancel request and the agent's meta keys.
"""

from __future__ import annotations

import json
from typing import cast

from harness_core.converter import payload_converter
from harness_core.payloads import ProtoJSON, TaskEvent, TaskRecord
from harness_core.store.connection import StoreConnection
from harness_core.store.rows import ROW_COLUMNS, IndexRow, index_row_from, record_from_json

__all__ = ["TaskStoreReads"]

#: From this many tasks of one participant on, a page walks the index newest first (it stops at
#: the page's end, after about ``limit * all / theirs`` rows); below it, it takes the
#: participant's tasks by their key and sorts them.
_DENSE = 2000


class TaskStoreReads(StoreConnection):
    """The reads of the store, the base of :class:`~harness_core.store.TaskStore`."""

    def get(self, task_id: str) -> TaskRecord | None:
        with self._read() as db:
            row = db.execute("SELECT record FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return None if row is None else record_from_json(row[0])

    def messages(self, task_id: str, start: int, end: int) -> list[ProtoJSON]:
        """Archived messages at positions ``start`` up to (not including) ``end``."""
        return [message for message, _ in self.messages_with_senders(task_id, start, end)]

    def messages_with_senders(
        self, task_id: str, start: int, end: int
    ) -> list[tuple[ProtoJSON, str | None]]:
        """Archived messages at positions ``start`` up to ``end``, with who sent each."""
        if end <= start:
            return []
        with self._read() as db:
            rows = db.execute(
                "SELECT body, sender FROM task_messages WHERE task_id = ? AND position >= ? "
                "AND position < ? ORDER BY position",
                (task_id, start, end),
            ).fetchall()
        return [(cast("ProtoJSON", json.loads(r[0])), r[1]) for r in rows]

    def context_messages(
        self, context_id: str, agent_id: str, participant: str | None, task_id: str, limit: int
    ) -> list[tuple[ProtoJSON, str | None]]:
        """The latest ``limit`` messages of this agent's other tasks in ``context_id`` that
        ``participant`` takes part in (anonymous: tasks without participants), oldest first, in
        the order their tasks last changed."""
        if participant is None:
            who = "NOT EXISTS (SELECT 1 FROM task_participants p WHERE p.task_id = i.task_id)"
            args: tuple[object, ...] = (context_id, agent_id, task_id, limit)
        else:
            who = (
                "EXISTS (SELECT 1 FROM task_participants p WHERE p.task_id = i.task_id "
                "AND p.participant = ?)"
            )
            args = (context_id, agent_id, task_id, participant, limit)
        with self._read() as db:
            rows = db.execute(
                "SELECT m.body, m.sender FROM task_index i JOIN task_messages m "
                "ON m.task_id = i.task_id WHERE i.context_id = ? AND i.agent_id = ? "
                f"AND i.task_id != ? AND {who} "
                "ORDER BY i.status_at DESC, i.task_id DESC, m.position DESC LIMIT ?",
                args,
            ).fetchall()
        return [(cast("ProtoJSON", json.loads(r[0])), r[1]) for r in reversed(rows)]

    def message_digest(self, task_id: str, message_id: str) -> str | None:
        """The content digest of an archived message, or None when the task has no such message."""
        with self._read() as db:
            row = db.execute(
                "SELECT digest FROM task_messages WHERE task_id = ? AND message_id = ? LIMIT 1",
                (task_id, message_id),
            ).fetchone()
        return None if row is None else str(row[0])

    def events(self, task_id: str, after: int, until: int | None = None) -> list[TaskEvent]:
        """Archived events with ``after < seq <= until``."""
        with self._read() as db:
            rows = db.execute(
                "SELECT body FROM task_events WHERE task_id = ? AND seq > ? AND seq <= ? "
                "ORDER BY seq",
                (task_id, after, until if until is not None else 2**62),
            ).fetchall()
        return [payload_converter.structure(json.loads(r[0]), TaskEvent) for r in rows]

    def index_row(self, task_id: str) -> IndexRow | None:
        """The task as the listing index has it, with everyone on it; None when it has no row."""
        with self._read() as db:
            row = db.execute(
                f"SELECT {ROW_COLUMNS} FROM task_index WHERE task_id = ?", (task_id,)
            ).fetchone()
            if row is None:
                return None
            people = db.execute(
                "SELECT participant FROM task_participants WHERE task_id = ?", (task_id,)
            ).fetchall()
        return index_row_from(row, tuple(str(p[0]) for p in people))

    def stale_rows(
        self, agent_id: str, *, moving_before: int, waiting_before: int, limit: int
    ) -> list[IndexRow]:
        """The agent's tasks that have not ended and that no write has touched for a while
        (times in microseconds since the epoch), oldest first: those the index shows in motion
        (SUBMITTED or WORKING) since before ``moving_before``, and those waiting for their
        sender (INPUT_REQUIRED or AUTH_REQUIRED) since before ``waiting_before``. They are the
        ones whose workflow may have ended without the store learning of it."""
        with self._read() as db:
            rows = db.execute(
                f"SELECT {ROW_COLUMNS} FROM task_index WHERE agent_id = ? AND closed = 0 AND ("
                "(state IN ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING') AND written_at < ?) "
                "OR (state IN ('TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED') "
                "AND written_at < ?)) ORDER BY written_at LIMIT ?",
                (agent_id, moving_before, waiting_before, limit),
            ).fetchall()
        return [index_row_from(row, ()) for row in rows]

    def list_index(
        self,
        *,
        participant: str | None,
        context_id: str = "",
        state: str = "",
        status_after: int | None = None,
        limit: int = 50,
        cursor: tuple[int, str] | None = None,
    ) -> tuple[list[IndexRow], int]:
        """Tasks ``participant`` may see (``may_access``), latest status first, filtered by
        context, state and status time (microseconds, at or after), after the keyset ``cursor``
        (a row's status time and id); and how many match in all (the cursor aside)."""
        where: list[str] = ["task_index.closed < 2"]
        args: list[str | int] = []
        if context_id:
            where.append("task_index.context_id = ?")
            args.append(context_id)
        if state:
            where.append("task_index.state = ?")
            args.append(state)
        if status_after is not None:
            where.append("task_index.status_at >= ?")
            args.append(status_after)
        clause = " AND ".join(where)
        page_clause, page_args = clause, list(args)
        if cursor is not None:
            page_clause += (
                " AND (task_index.status_at < ? OR "
                "(task_index.status_at = ? AND task_index.task_id < ?))"
            )
            page_args += [cursor[0], cursor[0], cursor[1]]
        with self._snapshot() as db:
            if participant:
                # The participant's tasks through its key (participant, task id), each looked up
                # in the index: not every row of the index tested against the participant.
                total = int(
                    db.execute(
                        "SELECT COUNT(*) FROM task_participants p JOIN task_index "
                        f"ON task_index.task_id = p.task_id WHERE p.participant = ? AND {clause}",
                        [participant, *args],
                    ).fetchone()[0]
                )
                if total >= _DENSE:
                    # Many tasks: walk the index newest first and stop at the page's end.
                    who = (
                        "EXISTS (SELECT 1 FROM task_participants p WHERE p.participant = ? "
                        "AND p.task_id = task_index.task_id)"
                    )
                else:
                    # Few: take them by the participant's key and sort them.
                    who = (
                        "task_index.task_id IN "
                        "(SELECT task_id FROM task_participants WHERE participant = ?)"
                    )
                page_args = [participant, *page_args]
            else:
                who = (
                    "NOT EXISTS (SELECT 1 FROM task_participants p "
                    "WHERE p.task_id = task_index.task_id)"
                )
                total = int(
                    db.execute(
                        f"SELECT COUNT(*) FROM task_index WHERE {who} AND {clause}", args
                    ).fetchone()[0]
                )
            rows = (
                db.execute(
                    f"SELECT {ROW_COLUMNS} FROM task_index WHERE {who} AND {page_clause} "
                    "ORDER BY task_index.status_at DESC, task_index.task_id DESC LIMIT ?",
                    [*page_args, limit],
                ).fetchall()
                if total
                else []
            )
        return [index_row_from(r, ()) for r in rows], total

    def count_open(self) -> int:
        """How many of the agent's tasks have not ended."""
        with self._read() as db:
            return int(db.execute("SELECT COUNT(*) FROM task_index WHERE closed = 0").fetchone()[0])

    def cancel_requested(self, task_id: str) -> bool:
        with self._read() as db:
            row = db.execute(
                "SELECT cancel_requested FROM task_index WHERE task_id = ?", (task_id,)
            ).fetchone()
        return bool(row and row[0])

    def get_meta(self, key: str) -> str | None:
        with self._read() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])
