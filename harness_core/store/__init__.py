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
import os
import sqlite3
import threading
import time
from collections.abc import Generator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import attrs

from harness_core.converter import payload_converter
from harness_core.payloads import Archive, IndexEntry, ProtoJSON, TaskEvent, TaskRecord

__all__ = ["IndexRow", "TaskStore", "content_digest", "parse_timestamp"]

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
CREATE TABLE IF NOT EXISTS task_index (
    task_id TEXT PRIMARY KEY,
    context_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    state TEXT NOT NULL,
    status TEXT NOT NULL,
    status_at INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    closed INTEGER NOT NULL,
    busy INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    written_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS task_index_order ON task_index (status_at, task_id);
CREATE TABLE IF NOT EXISTS push_tokens (
    standin_id TEXT PRIMARY KEY,
    digest TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS push_configs (
    task_id TEXT NOT NULL,
    config_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (task_id, config_id)
);
CREATE INDEX IF NOT EXISTS task_index_context ON task_index (context_id, status_at, task_id);
"""
#: How long the id of a removed task is remembered (reads of it answer not found).
TOMBSTONE_SECONDS = 30 * 86400
# PRAGMA user_version: 1 added task_participants; 2 split records into messages and events; 3 added
# the listing index (filled from the ended tasks' records).
_VERSION = 3


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
        # SQLite gives the -wal and -shm files the database file's mode: make it 0600 before they
        # exist (and fix side files an older version left readable).
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        for side in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            with contextlib.suppress(FileNotFoundError):
                side.chmod(0o600)
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
            if version < 2:
                for (data,) in self._db.execute("SELECT record FROM tasks").fetchall():
                    raw = cast("dict[str, Any]", json.loads(data))
                    if "task" in raw:
                        self._split_old_record(raw)
                    else:
                        self._put_participants(str(raw["task_id"]), raw.get("participants") or [])
            for (data,) in self._db.execute("SELECT record FROM tasks").fetchall():
                self._index_record(_record(data))
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
    def _snapshot(self) -> Generator[None, None, None]:
        """Reads that see one state of the file (a count and its page agree)."""
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

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
        verb: str = "INSERT OR REPLACE",
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
        self._db.executemany(f"{verb} INTO task_messages VALUES (?, ?, ?, ?, ?, ?)", rows)

    def _write_archive(self, archive: Archive, verb: str = "INSERT OR REPLACE") -> None:
        self._write_messages(
            archive.task_id, archive.first_message, archive.messages, archive.senders, verb
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
        self._index_record(record)
        # Messages a last turn never took (the task ended first) are no part of it.
        self._db.execute(
            "DELETE FROM task_messages WHERE task_id = ? AND position >= ?",
            (record.task_id, record.messages),
        )

    def _index_record(self, record: TaskRecord) -> None:
        """An ended task in the index: it replaces whatever the index had (nothing moves it on)."""
        self._db.execute(
            "INSERT OR REPLACE INTO task_index VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, 0, 0, ?)",
            (
                record.task_id,
                record.context_id,
                record.agent_id,
                record.state,
                _dumps(record.status),
                _status_micros(record.status),
                record.events,
                record.messages,
                _now_micros(),
            ),
        )

    def _index_entry(self, entry: IndexEntry) -> None:
        """A running task's state in the index, unless the index has it at a later point already
        (or ended): writers race (a turn's activity, the sender's receipt), and the latest event
        wins."""
        archive = entry.archive
        self._db.execute(
            "INSERT INTO task_index VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 0, ?) "
            "ON CONFLICT (task_id) DO UPDATE SET state = excluded.state, "
            "status = excluded.status, status_at = excluded.status_at, seq = excluded.seq, "
            "messages = max(messages, excluded.messages), busy = excluded.busy, "
            "written_at = excluded.written_at "
            "WHERE closed = 0 AND (excluded.seq > seq OR (excluded.seq = seq AND "
            "(excluded.messages > messages OR excluded.busy > busy)))",
            (
                archive.task_id,
                archive.context_id,
                archive.agent_id,
                str(entry.status.get("state", "")),
                _dumps(entry.status),
                _status_micros(entry.status),
                entry.last_seq,
                max(entry.messages, 0),
                int(entry.busy),
                _now_micros(),
            ),
        )

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

    def checkpoint(self, entry: IndexEntry, *, partial: bool = False) -> None:
        """Keep what a running task has reached: its new messages and events, and its state in
        the listing index, in one transaction. A ``partial`` entry (a sender's receipt: it knows
        no senders) adds only the rows the store lacks."""
        with self._lock, self._transaction():
            self._write_archive(
                entry.archive, "INSERT OR IGNORE" if partial else "INSERT OR REPLACE"
            )
            self._index_entry(entry)

    def forget_unstarted(self, task_id: str) -> None:
        """Drop a task the index learned of before its workflow started, if nothing since has
        written over it (its start failed)."""
        with self._lock, self._transaction():
            removed = self._db.execute(
                "DELETE FROM task_index WHERE task_id = ? AND seq = 0 AND closed = 0 "
                "AND NOT EXISTS (SELECT 1 FROM task_events e WHERE e.task_id = task_index.task_id)",
                (task_id,),
            ).rowcount
            if removed:
                self._db.execute("DELETE FROM task_messages WHERE task_id = ?", (task_id,))
                self._db.execute("DELETE FROM task_participants WHERE task_id = ?", (task_id,))

    def request_cancel(self, task_id: str) -> None:
        """Note that a client asked to cancel the task: its running turn (in any process serving
        the agent) stops at its next look (``cancel_requested``)."""
        with self._lock:
            self._db.execute(
                "UPDATE task_index SET cancel_requested = 1 WHERE task_id = ?", (task_id,)
            )

    def cancel_requested(self, task_id: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT cancel_requested FROM task_index WHERE task_id = ?", (task_id,)
            ).fetchone()
        return bool(row and row[0])

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

    def index_row(self, task_id: str) -> IndexRow | None:
        """The task as the listing index has it, with everyone on it; None when it has no row."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {_ROW_COLUMNS} FROM task_index WHERE task_id = ?", (task_id,)
            ).fetchone()
            if row is None:
                return None
            people = self._db.execute(
                "SELECT participant FROM task_participants WHERE task_id = ?", (task_id,)
            ).fetchall()
        return _index_row(row, tuple(str(p[0]) for p in people))

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
        where: list[str] = ["closed < 2"]
        args: list[str | int] = []
        if participant:
            where.append("task_id IN (SELECT task_id FROM task_participants WHERE participant = ?)")
            args.append(participant)
        else:
            where.append(
                "NOT EXISTS (SELECT 1 FROM task_participants p "
                "WHERE p.task_id = task_index.task_id)"
            )
        if context_id:
            where.append("context_id = ?")
            args.append(context_id)
        if state:
            where.append("state = ?")
            args.append(state)
        if status_after is not None:
            where.append("status_at >= ?")
            args.append(status_after)
        clause = " AND ".join(where)
        page_clause = clause
        page_args = list(args)
        if cursor is not None:
            page_clause += " AND (status_at < ? OR (status_at = ? AND task_id < ?))"
            page_args += [cursor[0], cursor[0], cursor[1]]
        with self._lock, self._snapshot():
            total = int(
                self._db.execute(
                    f"SELECT COUNT(*) FROM task_index WHERE {clause}", args
                ).fetchone()[0]
            )
            rows = self._db.execute(
                f"SELECT {_ROW_COLUMNS} FROM task_index WHERE {page_clause} "
                "ORDER BY status_at DESC, task_id DESC LIMIT ?",
                [*page_args, limit],
            ).fetchall()
        return [_index_row(r, ()) for r in rows], total

    def count_open(self) -> int:
        """How many of the agent's tasks have not ended."""
        with self._lock:
            return int(
                self._db.execute("SELECT COUNT(*) FROM task_index WHERE closed = 0").fetchone()[0]
            )

    def sweep(self, ended_before: int, limit: int = 1000) -> list[str]:
        """Remove up to ``limit`` tasks that ended (were last written) before ``ended_before``
        (microseconds since the epoch): their record, messages, events and participants. Each
        leaves a tombstone in the index, so that reads answer not found instead of asking the
        task's workflow, which Temporal may keep longer; tombstones go after
        ``TOMBSTONE_SECONDS``. Returns the ids of the tasks removed."""
        with self._lock, self._transaction():
            ids = [
                str(row[0])
                for row in self._db.execute(
                    "SELECT task_id FROM task_index WHERE closed = 1 AND written_at < ? LIMIT ?",
                    (ended_before, limit),
                ).fetchall()
            ]
            rows = [(i,) for i in ids]
            for table in (
                "tasks",
                "task_messages",
                "task_events",
                "task_participants",
                "push_configs",
            ):
                self._db.executemany(f"DELETE FROM {table} WHERE task_id = ?", rows)
            self._db.executemany(
                "UPDATE task_index SET closed = 2, status = '{}', written_at = ? WHERE task_id = ?",
                [(_now_micros(), i) for i in ids],
            )
            self._db.execute(
                "DELETE FROM task_index WHERE closed = 2 AND written_at < ?",
                (_now_micros() - TOMBSTONE_SECONDS * 1_000_000,),
            )
        return ids

    # -- push notification configs -----------------------------------------------------------------

    def put_push_config(self, task_id: str, config_id: str, owner: str, body: ProtoJSON) -> None:
        """Keep (or replace) a client's webhook for a task."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO push_configs VALUES (?, ?, ?, ?)",
                (task_id, config_id, owner, _dumps(body)),
            )

    def push_configs(self, task_id: str) -> list[tuple[str, str, ProtoJSON]]:
        """The task's webhooks: (config id, owner, body), oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT config_id, owner, body FROM push_configs WHERE task_id = ? ORDER BY rowid",
                (task_id,),
            ).fetchall()
        return [(str(r[0]), str(r[1]), cast("ProtoJSON", json.loads(r[2]))) for r in rows]

    def put_push_token(self, standin_id: str, digest: str) -> None:
        """The digest of the token another agent's pushes to a delegation must carry."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO push_tokens VALUES (?, ?)", (standin_id, digest)
            )

    def push_token(self, standin_id: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT digest FROM push_tokens WHERE standin_id = ?", (standin_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def delete_push_config(self, task_id: str, config_id: str) -> bool:
        with self._lock:
            return bool(
                self._db.execute(
                    "DELETE FROM push_configs WHERE task_id = ? AND config_id = ?",
                    (task_id, config_id),
                ).rowcount
            )

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])


@attrs.frozen
class IndexRow:
    """One task in the listing index."""

    task_id: str
    context_id: str
    agent_id: str
    status: ProtoJSON
    #: The status time, in microseconds since the epoch (the listing's order).
    status_at: int
    #: The seq of the last event the store has for the task.
    last_seq: int
    #: How many messages the task has (all in the store).
    messages: int
    closed: bool
    busy: bool
    participants: tuple[str, ...]
    #: Removed after its retention: only its id is left, and it reads as not found.
    swept: bool = False
    #: When the row was last written (microseconds since the epoch).
    written_at: int = 0

    @property
    def unconfirmed(self) -> bool:
        """Written before its workflow started, and by nothing since (its start may have failed
        with its process)."""
        return self.last_seq == 0 and not self.closed

    @property
    def state(self) -> str:
        return str(self.status.get("state", ""))


_ROW_COLUMNS = (
    "task_id, context_id, agent_id, status, status_at, seq, messages, closed, busy, written_at"
)


def _index_row(row: Any, participants: tuple[str, ...]) -> IndexRow:
    return IndexRow(
        task_id=str(row[0]),
        context_id=str(row[1]),
        agent_id=str(row[2]),
        status=cast("ProtoJSON", json.loads(row[3])),
        status_at=int(row[4]),
        last_seq=int(row[5]),
        messages=int(row[6]),
        closed=bool(row[7]),
        busy=bool(row[8]),
        participants=participants,
        swept=int(row[7]) == 2,
        written_at=int(row[9]),
    )


def parse_timestamp(text: str) -> int | None:
    """An ISO 8601 time as microseconds since the epoch (UTC when it names no zone); None when it
    is no such time."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _status_micros(status: Mapping[str, Any]) -> int:
    return parse_timestamp(str(status.get("timestamp", ""))) or 0


def _now_micros() -> int:
    return int(time.time() * 1_000_000)


def _record(data: str) -> TaskRecord:
    return payload_converter.structure(json.loads(data), TaskRecord)
