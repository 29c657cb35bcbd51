"""The LLM agent's memory in the store: a turn's tool calls and results by its answer's position
(``harness_core.agents.compaction`` folds them into summaries, kept here too), and each task's
workspace files (``harness_core.agents.workspace``).
"""

from __future__ import annotations

import json
from typing import Any, cast

from harness_core.store.connection import StoreConnection
from harness_core.store.rows import now_micros

__all__ = ["AgentMemoryStore"]


class AgentMemoryStore(StoreConnection):
    """Exchanges, folds and workspaces: a part of :class:`~harness_core.store.TaskStore`."""

    def put_exchange(self, task_id: str, position: int, exchange: list[Any]) -> None:
        """A turn's tool calls and results (pydantic-ai JSON), by its answer's position."""
        with self._read() as db:
            db.execute(
                "INSERT INTO task_exchanges (task_id, position, exchange) VALUES (?, ?, ?) "
                "ON CONFLICT (task_id, position) DO UPDATE SET exchange = excluded.exchange",
                (task_id, position, json.dumps(exchange)),
            )

    def exchanges(self, task_id: str, start: int, end: int) -> dict[int, list[Any]]:
        with self._read() as db:
            rows = db.execute(
                "SELECT position, exchange FROM task_exchanges WHERE task_id = ? "
                "AND position >= ? AND position < ?",
                (task_id, start, end),
            ).fetchall()
        return {int(p): cast("list[Any]", json.loads(e)) for p, e in rows}

    def latest_fold(self, task_id: str) -> tuple[int, int, str] | None:
        """The task's latest compaction that has its summary: (first, upto, summary)."""
        with self._read() as db:
            row = db.execute(
                "SELECT first, upto, summary FROM task_folds WHERE task_id = ? AND summary "
                "IS NOT NULL ORDER BY upto DESC LIMIT 1",
                (task_id,),
            ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), str(row[2]))

    def fold_state(self, task_id: str, upto: int) -> tuple[bool, str | None]:
        """(the listeners heard of it, its summary) for the fold up to ``upto``."""
        with self._read() as db:
            row = db.execute(
                "SELECT notified, summary FROM task_folds WHERE task_id = ? AND upto = ?",
                (task_id, upto),
            ).fetchone()
        return (False, None) if row is None else (bool(row[0]), row[1])

    def fold_notified(self, task_id: str, first: int, upto: int) -> None:
        with self._read() as db:
            db.execute(
                "INSERT INTO task_folds (task_id, upto, first, notified) VALUES (?, ?, ?, 1) "
                "ON CONFLICT (task_id, upto) DO UPDATE SET notified = 1",
                (task_id, upto, first),
            )

    def fold_summary(self, task_id: str, first: int, upto: int, summary: str) -> None:
        with self._read() as db:
            db.execute(
                "INSERT INTO task_folds (task_id, upto, first, summary) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (task_id, upto) DO UPDATE SET summary = excluded.summary",
                (task_id, upto, first, summary),
            )

    # -- workspaces (``harness_core.agents.workspace``) ----------------------------------------------

    def workspace_read(self, task_id: str, path: str) -> str | None:
        with self._read() as db:
            row = db.execute(
                "SELECT content FROM workspace_files WHERE task_id = ? AND path = ?",
                (task_id, path),
            ).fetchone()
        return None if row is None else str(row[0])

    def workspace_write(self, task_id: str, path: str, content: str) -> None:
        with self._read() as db:
            db.execute(
                "INSERT INTO workspace_files (task_id, path, content, size, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (task_id, path) DO UPDATE SET "
                "content = excluded.content, size = excluded.size, updated_at = excluded.updated_at",
                (task_id, path, content, len(content.encode()), now_micros()),
            )

    def workspace_delete(self, task_id: str, path: str) -> bool:
        with self._read() as db:
            cursor = db.execute(
                "DELETE FROM workspace_files WHERE task_id = ? AND path = ?", (task_id, path)
            )
            return cursor.rowcount > 0

    def workspace_list(self, task_id: str) -> list[tuple[str, int]]:
        with self._read() as db:
            rows = db.execute(
                "SELECT path, size FROM workspace_files WHERE task_id = ? ORDER BY path",
                (task_id,),
            ).fetchall()
        return [(str(path), int(size)) for path, size in rows]
