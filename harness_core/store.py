"""The per-agent SQLite store: each task's archived messages and events, and ended tasks' summaries.

A task's workflow holds only its current run; earlier runs are archived here (``archive``) before it
continues as new, and the last run with the task's summary when it ends (``store_final``). Reads of a
task combine this store with the workflow's tail. Writes are idempotent (rows at absolute positions), so
a retried activity changes nothing.

The store is written by activities (in a worker thread) and read by the HTTP layer (through
``anyio.to_thread``), so one connection is shared under a lock; SQLite in WAL mode lets readers proceed
while a write commits. Every process serving an agent must use the same file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any, cast

from harness_core.converter import payload_converter
from harness_core.payloads import Archive, ProtoJSON, TaskEvent, TaskRecord

__all__ = ["TaskStore", "content_digest"]

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
CREATE TABLE IF NOT EXISTS task_messages (
    task_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    sender TEXT,
    body TEXT NOT NULL,
    PRIMARY KEY (task_id, position)
);
CREATE INDEX IF NOT EXISTS task_messages_id ON task_messages (task_id, message_id);
CREATE TABLE IF NOT EXISTS task_events (
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);
"""
# PRAGMA user_version: 1 added task_participants; 2 split records into messages and events.
_VERSION = 2


def content_digest(message: Mapping[str, Any]) -> str:
    """A digest of a message's content (its parts, large ones by reference): a retry has the same."""
    parts = json.dumps(message.get("parts") or [], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(parts.encode()).hexdigest()[:32]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class TaskStore:
    """One agent's archived tasks in one SQLite file. Thread-safe; open it once per agent."""

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
                raw = cast("dict[str, Any]", json.loads(data))
                if "task" in raw:
                    self._split_old_record(raw)
                else:
                    self._put_participants(str(raw["task_id"]), raw.get("participants") or [])
            self._db.execute(f"PRAGMA user_version = {_VERSION}")

    def _split_old_record(self, raw: dict[str, Any]) -> None:
        """A version-1 record held the whole task; keep its messages and events as rows."""
        task = cast("dict[str, Any]", raw["task"])
        history = cast("list[ProtoJSON]", task.get("history") or [])
        old_events = cast("list[Any]", raw.get("events") or [])
        events = [payload_converter.structure(e, TaskEvent) for e in old_events]
        archive = Archive(
            task_id=str(raw["task_id"]),
            agent_id=str(raw["agent_id"]),
            context_id=str(raw["context_id"]),
            first_message=0,
            messages=tuple(history),
            events=tuple(events),
            participants=tuple(raw.get("participants") or ()),
        )
        record = TaskRecord(
            task_id=archive.task_id,
            context_id=archive.context_id,
            agent_id=archive.agent_id,
            state=str(raw["state"]),
            status=cast("ProtoJSON", task.get("status") or {"state": raw["state"]}),
            participants=archive.participants,
            updated_at=str(raw["updated_at"]),
            messages=len(history),
            events=len(events),
        )
        self._write_archive(archive)
        self._write_record(record)

    def _put_participants(self, task_id: str, participants: Any) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO task_participants VALUES (?, ?)",
            [(task_id, str(p)) for p in participants],
        )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _transaction(self) -> Generator[None, None, None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- writes -----------------------------------------------------------------------------------

    def _write_messages(
        self,
        task_id: str,
        first: int,
        messages: tuple[ProtoJSON, ...],
        senders: tuple[tuple[str, str], ...],
    ) -> None:
        by_id = dict(senders)
        rows: list[tuple[str, int, str, str, str | None, str]] = []
        for index, message in enumerate(messages):
            message_id = str(message.get("messageId", ""))
            rows.append(
                (
                    task_id,
                    first + index,
                    message_id,
                    content_digest(message),
                    by_id.get(message_id),
                    _dumps(message),
                )
            )
        self._db.executemany("INSERT OR REPLACE INTO task_messages VALUES (?, ?, ?, ?, ?, ?)", rows)

    def _write_archive(self, archive: Archive) -> None:
        self._write_messages(
            archive.task_id, archive.first_message, archive.messages, archive.senders
        )
        self._db.executemany(
            "INSERT OR REPLACE INTO task_events VALUES (?, ?, ?)",
            [
                (archive.task_id, event.seq, _dumps(payload_converter.unstructure(event)))
                for event in archive.events
            ],
        )
        self._put_participants(archive.task_id, archive.participants)

    def _write_record(self, record: TaskRecord) -> None:
        row = (
            record.task_id,
            record.context_id,
            record.agent_id,
            record.state,
            record.updated_at,
            _dumps(payload_converter.unstructure(record)),
        )
        self._db.execute("INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?)", row)
        self._put_participants(record.task_id, record.participants)

    def put_messages(
        self,
        task_id: str,
        first: int,
        messages: tuple[ProtoJSON, ...],
        senders: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Keep messages at positions ``first`` on (a turn's new ones, before it reads its history)."""
        with self._lock, self._transaction():
            self._write_messages(task_id, first, messages, senders)

    def archive(self, archive: Archive) -> None:
        """Keep a run's messages and events (a task about to continue as new)."""
        with self._lock, self._transaction():
            self._write_archive(archive)

    def store_final(self, archive: Archive, record: TaskRecord) -> None:
        """Keep an ended task: its last run and its summary, in one transaction."""
        with self._lock, self._transaction():
            self._write_archive(archive)
            self._write_record(record)

    # -- reads ------------------------------------------------------------------------------------

    def get(self, task_id: str) -> TaskRecord | None:
        with self._lock:
            row = self._db.execute(
                "SELECT record FROM tasks WHERE task_id = ?", (task_id,)
            ).fetchone()
        return None if row is None else _record(row[0])

    def messages(self, task_id: str, start: int, end: int) -> list[ProtoJSON]:
        """Archived messages at positions ``start`` up to (not including) ``end``."""
        return [message for message, _ in self.messages_with_senders(task_id, start, end)]

    def messages_with_senders(
        self, task_id: str, start: int, end: int
    ) -> list[tuple[ProtoJSON, str | None]]:
        """Archived messages at positions ``start`` up to ``end``, with who sent each."""
        if end <= start:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT body, sender FROM task_messages WHERE task_id = ? AND position >= ? "
                "AND position < ? ORDER BY position",
                (task_id, start, end),
            ).fetchall()
        return [(cast("ProtoJSON", json.loads(r[0])), r[1]) for r in rows]

    def message_digest(self, task_id: str, message_id: str) -> str | None:
        """The content digest of an archived message, or None when the task has no such message."""
        with self._lock:
            row = self._db.execute(
                "SELECT digest FROM task_messages WHERE task_id = ? AND message_id = ? LIMIT 1",
                (task_id, message_id),
            ).fetchone()
        return None if row is None else str(row[0])

    def events(self, task_id: str, after: int, until: int | None = None) -> list[TaskEvent]:
        """Archived events with ``after < seq <= until``."""
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM task_events WHERE task_id = ? AND seq > ? AND seq <= ? "
                "ORDER BY seq",
                (task_id, after, until if until is not None else 2**62),
            ).fetchall()
        return [payload_converter.structure(json.loads(r[0]), TaskEvent) for r in rows]

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
