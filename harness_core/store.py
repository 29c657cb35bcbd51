"""The per-agent SQLite store: final task records, for lookups and listing after a workflow ended.

The store is written by the ``store_record`` activity (in a worker thread) and read by the HTTP layer
(through ``anyio.to_thread``), so one connection is shared under a lock; SQLite in WAL mode lets
readers proceed while a write commits.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Generator
from pathlib import Path

from harness_core.converter import payload_converter
from harness_core.payloads import TaskRecord

__all__ = ["TaskStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY,
    context_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_context ON tasks (context_id, updated_at);
CREATE INDEX IF NOT EXISTS tasks_updated ON tasks (updated_at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS task_participants (
    task_id TEXT NOT NULL,
    participant TEXT NOT NULL,
    PRIMARY KEY (participant, task_id)
);
"""
# PRAGMA user_version: 1 added task_participants (filled from the records already stored).
_VERSION = 1


class TaskStore:
    """Final task records of one agent in one SQLite file. Thread-safe; open it once per agent."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._migrate()
        path.chmod(0o600)

    def _migrate(self) -> None:
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version >= _VERSION:
            return
        with self._transaction():
            for (data,) in self._db.execute("SELECT record FROM tasks").fetchall():
                self._put_participants(_record(data))
            self._db.execute(f"PRAGMA user_version = {_VERSION}")

    def _put_participants(self, record: TaskRecord) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO task_participants VALUES (?, ?)",
            [(record.task_id, p) for p in record.participants],
        )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def put(self, record: TaskRecord) -> None:
        data = json.dumps(payload_converter.unstructure(record), separators=(",", ":"))
        row = (
            record.task_id,
            record.context_id,
            record.agent_id,
            record.state,
            record.updated_at,
            data,
        )
        with self._lock, self._transaction():
            self._db.execute("INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?)", row)
            self._put_participants(record)

    @contextlib.contextmanager
    def _transaction(self) -> Generator[None, None, None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def get(self, task_id: str) -> TaskRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT record FROM tasks WHERE task_id = ?", (task_id,)
            ).fetchone()
        return None if row is None else _record(row[0])

    def list(
        self,
        *,
        participant: str | None,
        context_id: str = "",
        state: str = "",
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[TaskRecord], int]:
        """Records ``participant`` may see (``may_access``) newest first, filtered by context and
        state, and how many match in all."""
        where: list[str] = []
        args: list[str | int] = []
        if participant:
            where.append("task_id IN (SELECT task_id FROM task_participants WHERE participant = ?)")
            args.append(participant)
        else:
            where.append(
                "NOT EXISTS (SELECT 1 FROM task_participants p WHERE p.task_id = tasks.task_id)"
            )
        if context_id:
            where.append("context_id = ?")
            args.append(context_id)
        if state:
            where.append("state = ?")
            args.append(state)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._lock:
            total = int(
                self._db.execute(f"SELECT COUNT(*) FROM tasks {clause}", args).fetchone()[0]
            )
            rows = self._db.execute(
                f"SELECT record FROM tasks {clause} ORDER BY updated_at DESC, task_id "
                "LIMIT ? OFFSET ?",
                [*args, limit, offset],
            ).fetchall()
        return [_record(r[0]) for r in rows], total

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])


def _record(data: str) -> TaskRecord:
    return payload_converter.structure(json.loads(data), TaskRecord)
