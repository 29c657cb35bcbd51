"""``TaskStore``: the store's write path, on top of its reads (``reads``), webhooks
(``push_configs``) and the LLM agent's memory (``agent_memory``), and the migration of files an
older version wrote.

Writes are idempotent (rows at absolute positions), so a retried activity changes nothing. A
running task's checkpoints and an ended task's summary also keep its row in the listing index;
the retention sweep removes ended tasks and leaves tombstones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from harness_core.converter import payload_converter
from harness_core.payloads import Archive, IndexEntry, ProtoJSON, TaskEvent, TaskRecord
from harness_core.store.agent_memory import AgentMemoryStore
from harness_core.store.connection import PostgresLocation, Session
from harness_core.store.push_configs import PushConfigStore
from harness_core.store.reads import TaskStoreReads
from harness_core.store.rows import (
    content_digest,
    dumps,
    now_micros,
    record_from_json,
    status_micros,
)
from harness_core.store.schema import VERSION, schema_for, statements

__all__ = ["TOMBSTONE_SECONDS", "TaskStore"]

#: How long the id of a removed task is remembered (reads of it answer not found).
TOMBSTONE_SECONDS = 30 * 86400


class TaskStore(TaskStoreReads, PushConfigStore, AgentMemoryStore):
    """One agent's archived tasks, in a SQLite file or a PostgreSQL schema. Thread-safe; open it
    once per agent in a process (several processes may share it)."""

    def __init__(self, location: Path | PostgresLocation) -> None:
        super().__init__(location)
        try:
            self._migrate()
        except BaseException:
            self.close()
            raise
        if self.path is not None:
            self.path.chmod(0o600)

    def _migrate(self) -> None:
        """Create the tables, and bring a store an older version wrote up to :data:`VERSION`.

        A store already at :data:`VERSION` (every start but the first) runs no DDL at all: on
        PostgreSQL, ``CREATE INDEX IF NOT EXISTS`` locks its table even when the index exists, and
        a host starting while the others write would hold up their writes, or deadlock with
        them."""
        with self._read() as db:
            if self._version(db) >= VERSION:
                return
        with self._write() as db:
            if isinstance(self.location, PostgresLocation):
                # Hosts that start together: one creates and migrates, the others wait and see
                # it done. The key is the schema's name (the connection names the database),
                # not the URL, which two hosts may spell differently.
                db.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(?))",
                    (f"harness:{self.location.schema}",),
                )
                exists = db.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = ?", (self.location.schema,)
                ).fetchone()
                if exists is None:  # a role that owns it needs no CREATE on the database
                    db.execute(f"CREATE SCHEMA {quote_identifier(self.location.schema)}")
            version = self._version(db)
            if version >= VERSION:
                return
            for statement in statements(schema_for(postgres=db.postgres)):
                db.execute(statement)
            if version < 2:
                for (data,) in db.execute("SELECT record FROM tasks").fetchall():
                    raw = cast("dict[str, Any]", json.loads(data))
                    if "task" in raw:
                        self._split_old_record(db, raw)
                    else:
                        self._put_participants(
                            db, str(raw["task_id"]), raw.get("participants") or []
                        )
            if version < 3:
                for (data,) in db.execute("SELECT record FROM tasks").fetchall():
                    self._index_record(db, record_from_json(data))
            if version < 4 and not db.postgres:
                info = db.execute("PRAGMA table_info(push_configs)").fetchall()
                columns = {str(row[1]) for row in info}
                if "added_at" not in columns:
                    db.execute(
                        "ALTER TABLE push_configs ADD COLUMN added_at BIGINT NOT NULL DEFAULT 0"
                    )
                    db.execute("UPDATE push_configs SET added_at = rowid")
            db.execute("DELETE FROM schema_version")
            db.execute("INSERT INTO schema_version (version) VALUES (?)", (VERSION,))

    @staticmethod
    def _version(db: Session) -> int:
        """The layout's version; 0 for an empty database or schema."""
        if db.postgres:
            table = db.execute("SELECT to_regclass('schema_version')").fetchone()
            if table is None or table[0] is None:
                return 0
        else:
            table = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
        if table is not None:
            row = db.execute("SELECT max(version) FROM schema_version").fetchone()
            if row is not None and row[0] is not None:
                return int(row[0])
        if db.postgres:
            return 0
        # SQLite files up to version 3 kept it here.
        return int(db.execute("PRAGMA user_version").fetchone()[0])

    def _split_old_record(self, db: Session, raw: dict[str, Any]) -> None:
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
        self._write_archive(db, archive)
        self._write_record(db, record)

    @staticmethod
    def _put_participants(db: Session, task_id: str, participants: Any) -> None:
        db.executemany(
            "INSERT INTO task_participants VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(task_id, str(p)) for p in participants],
        )

    # -- writes -----------------------------------------------------------------------------------

    @staticmethod
    def _write_messages(
        db: Session,
        task_id: str,
        first: int,
        messages: tuple[ProtoJSON, ...],
        senders: tuple[tuple[str, str], ...],
        replace: bool = True,
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
                    dumps(message),
                )
            )
        db.executemany(
            "INSERT INTO task_messages VALUES (?, ?, ?, ?, ?, ?) "
            + (_REPLACE_MESSAGE if replace else "ON CONFLICT DO NOTHING"),
            rows,
        )

    def _write_archive(self, db: Session, archive: Archive, replace: bool = True) -> None:
        self._write_messages(
            db, archive.task_id, archive.first_message, archive.messages, archive.senders, replace
        )
        db.executemany(
            "INSERT INTO task_events VALUES (?, ?, ?) "
            "ON CONFLICT (task_id, seq) DO UPDATE SET body = excluded.body",
            [
                (archive.task_id, event.seq, dumps(payload_converter.unstructure(event)))
                for event in archive.events
            ],
        )
        self._put_participants(db, archive.task_id, archive.participants)

    def _write_record(self, db: Session, record: TaskRecord) -> None:
        row = (
            record.task_id,
            record.context_id,
            record.agent_id,
            record.state,
            record.updated_at,
            dumps(payload_converter.unstructure(record)),
        )
        db.execute(
            "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET "
            "context_id = excluded.context_id, agent_id = excluded.agent_id, "
            "state = excluded.state, updated_at = excluded.updated_at, record = excluded.record",
            row,
        )
        self._put_participants(db, record.task_id, record.participants)
        self._index_record(db, record)
        # Messages a last turn never took (the task ended first) are no part of it.
        db.execute(
            "DELETE FROM task_messages WHERE task_id = ? AND position >= ?",
            (record.task_id, record.messages),
        )

    @staticmethod
    def _index_record(db: Session, record: TaskRecord) -> None:
        """An ended task in the index: it replaces whatever the index had (nothing moves it on)."""
        db.execute(
            "INSERT INTO task_index VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, 0, 0, ?) "
            "ON CONFLICT (task_id) DO UPDATE SET context_id = excluded.context_id, "
            "agent_id = excluded.agent_id, state = excluded.state, status = excluded.status, "
            "status_at = excluded.status_at, seq = excluded.seq, messages = excluded.messages, "
            "closed = 1, busy = 0, cancel_requested = 0, written_at = excluded.written_at",
            (
                record.task_id,
                record.context_id,
                record.agent_id,
                record.state,
                dumps(record.status),
                status_micros(record.status),
                record.events,
                record.messages,
                now_micros(),
            ),
        )

    @staticmethod
    def _index_entry(db: Session, entry: IndexEntry) -> None:
        """A running task's state in the index, unless the index has it at a later point already
        (or ended): writers race (a turn's activity, the sender's receipt), and the latest event
        wins."""
        archive = entry.archive
        db.execute(
            "INSERT INTO task_index VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 0, ?) "
            "ON CONFLICT (task_id) DO UPDATE SET state = excluded.state, "
            "status = excluded.status, status_at = excluded.status_at, seq = excluded.seq, "
            "messages = CASE WHEN excluded.messages > task_index.messages "
            "THEN excluded.messages ELSE task_index.messages END, busy = excluded.busy, "
            "written_at = excluded.written_at "
            "WHERE task_index.closed = 0 AND (excluded.seq > task_index.seq OR "
            "(excluded.seq = task_index.seq AND (excluded.messages > task_index.messages "
            "OR excluded.busy > task_index.busy)))",
            (archive.task_id, archive.context_id, archive.agent_id, *_entry_state(entry)),
        )

    def put_messages(
        self,
        task_id: str,
        first: int,
        messages: tuple[ProtoJSON, ...],
        senders: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Keep messages at positions ``first`` on (a turn's new ones, before it reads its history)."""
        with self._write() as db:
            self._write_messages(db, task_id, first, messages, senders)

    def archive(self, archive: Archive) -> None:
        """Keep a run's messages and events (a task about to continue as new)."""
        with self._write() as db:
            self._write_archive(db, archive)

    def checkpoint(self, entry: IndexEntry, *, partial: bool = False) -> None:
        """Keep what a running task has reached: its new messages and events, and its state in
        the listing index, in one transaction. A ``partial`` entry (a sender's receipt: it knows
        no senders) adds only the rows the store lacks."""
        with self._write() as db:
            self._write_archive(db, entry.archive, replace=not partial)
            if entry.reopen:
                _reopen(db, entry)
            else:
                self._index_entry(db, entry)

    def touch_index(self, task_id: str) -> None:
        """Note that the task's row was looked at (its workflow runs): the reconciliation's next
        batch takes others first (``harness_core.tasks.reconcile``)."""
        with self._read() as db:
            db.execute(
                "UPDATE task_index SET written_at = ? WHERE task_id = ? AND closed = 0",
                (now_micros(), task_id),
            )

    def forget_unstarted(self, task_id: str) -> None:
        """Drop a task the index learned of before its workflow started, if nothing since has
        written over it (its start failed)."""
        with self._write() as db:
            removed = db.execute(
                "DELETE FROM task_index WHERE task_id = ? AND seq = 0 AND closed = 0 "
                "AND NOT EXISTS (SELECT 1 FROM task_events e WHERE e.task_id = task_index.task_id)",
                (task_id,),
            ).rowcount
            if removed:
                db.execute("DELETE FROM task_messages WHERE task_id = ?", (task_id,))
                db.execute("DELETE FROM task_participants WHERE task_id = ?", (task_id,))

    def note_progress(self, task_id: str, status: ProtoJSON) -> None:
        """A running turn's latest progress as the task's status in the listing index, so that
        GetTask and ListTasks in any process show it at once. The turn's durable write at its end
        (or rest) replaces it; an ended task's row is left alone.

        The status is kept as the turn emitted it, without a timestamp, so that a reader who saw
        it live (another agent's stand-in following this task) knows it for the same status; the
        row is ordered by the time of the write."""
        now = now_micros()
        with self._read() as db:
            db.execute(
                "UPDATE task_index SET status = ?, status_at = ?, written_at = ? "
                "WHERE task_id = ? AND closed = 0 AND state = 'TASK_STATE_WORKING'",
                (dumps(status), now, now, task_id),
            )

    def request_cancel(self, task_id: str) -> None:
        """Note that a client asked to cancel the task: its running turn (in any process serving
        the agent) stops at its next look (``cancel_requested``)."""
        with self._read() as db:
            db.execute("UPDATE task_index SET cancel_requested = 1 WHERE task_id = ?", (task_id,))

    def store_final(self, archive: Archive, record: TaskRecord) -> None:
        """Keep an ended task: its last run and its summary, in one transaction."""
        with self._write() as db:
            self._write_archive(db, archive)
            self._write_record(db, record)

    def sweep(self, ended_before: int, limit: int = 1000) -> list[str]:
        """Remove up to ``limit`` tasks that ended (were last written) before ``ended_before``
        (microseconds since the epoch): their record, messages, events, participants, webhooks
        and their delegations' tokens and remote task ids. Each
        leaves a tombstone in the index, so that reads answer not found instead of asking the
        task's workflow, which Temporal may keep longer; tombstones go after
        ``TOMBSTONE_SECONDS``. Returns the ids of the tasks removed."""
        with self._write() as db:
            ids = [
                str(row[0])
                for row in db.execute(
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
                "workspace_files",
                "task_exchanges",
                "task_folds",
            ):
                db.executemany(f"DELETE FROM {table} WHERE task_id = ?", rows)
            # The task's delegations (stand-ins are named <task id>:delegate:...): a range of
            # their keys, in byte order on both databases (PostgreSQL's column is COLLATE "C").
            spans = [(f"{i}:delegate:", f"{i}:delegate;") for i in ids]
            for table in ("push_tokens", "remote_tasks"):
                db.executemany(
                    f"DELETE FROM {table} WHERE standin_id >= ? AND standin_id < ?", spans
                )
            db.executemany(
                "UPDATE task_index SET closed = 2, status = '{}', written_at = ? WHERE task_id = ?",
                [(now_micros(), i) for i in ids],
            )
            db.execute(
                "DELETE FROM task_index WHERE closed = 2 AND written_at < ?",
                (now_micros() - TOMBSTONE_SECONDS * 1_000_000,),
            )
        return ids

    def take_lease(self, name: str, holder: str, seconds: float) -> bool:
        """Hold the lease ``name`` for ``seconds`` if nobody else holds it (or theirs ran out): the
        work it names runs in one process of the many that share the store. True when ``holder``
        has it (a holder may renew its own)."""
        now = now_micros()
        with self._read() as db:
            return (
                db.execute(
                    "INSERT INTO leases VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                    "holder = excluded.holder, until_at = excluded.until_at "
                    "WHERE leases.holder = excluded.holder OR leases.until_at < ?",
                    (name, holder, now + int(seconds * 1_000_000), now),
                ).rowcount
                == 1
            )

    def release_lease(self, name: str, holder: str) -> None:
        with self._read() as db:
            db.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))

    def set_meta(self, key: str, value: str) -> None:
        with self._read() as db:
            db.execute(
                "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )


#: A message written again at its position (a retried activity, a run's archive) replaces it.
_REPLACE_MESSAGE = (
    "ON CONFLICT (task_id, position) DO UPDATE SET message_id = excluded.message_id, "
    "digest = excluded.digest, sender = excluded.sender, body = excluded.body"
)


def quote_identifier(name: str) -> str:
    """A PostgreSQL identifier, quoted (a schema named after an agent id may hold ``-``)."""
    return '"' + name.replace('"', '""') + '"'


def _reopen(db: Session, entry: IndexEntry) -> None:
    """A task whose turn may have stored an end it did not reach (``IndexEntry.reopen``): the
    index takes its state as it is, whatever it had; the record goes, and so do events past the
    task's last (the stored end's)."""
    archive = entry.archive
    db.execute(
        "INSERT INTO task_index VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 0, ?) "
        "ON CONFLICT (task_id) DO UPDATE SET state = excluded.state, status = excluded.status, "
        "status_at = excluded.status_at, seq = excluded.seq, messages = excluded.messages, "
        "closed = 0, busy = excluded.busy, written_at = excluded.written_at",
        (archive.task_id, archive.context_id, archive.agent_id, *_entry_state(entry)),
    )
    db.execute("DELETE FROM tasks WHERE task_id = ?", (archive.task_id,))
    db.execute(
        "DELETE FROM task_events WHERE task_id = ? AND seq > ?", (archive.task_id, entry.last_seq)
    )


def _entry_state(entry: IndexEntry) -> tuple[str, str, int, int, int, int, int]:
    """An index entry's columns: state, status, status time, seq, messages, busy, written."""
    status = entry.status
    return (
        str(status.get("state", "")),
        dumps(status),
        status_micros(status),
        entry.last_seq,
        max(entry.messages, 0),
        int(entry.busy),
        now_micros(),
    )
