"""Payload conversion, task ids, and the SQLite store (real files)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from harness_core.converter import data_converter
from harness_core.payloads import (
    Archive,
    Inbound,
    IndexEntry,
    TaskEvent,
    TaskRecord,
    TurnOutcome,
    may_access,
)
from harness_core.store import TaskStore, content_digest, parse_timestamp
from harness_core.store.connection import PostgresLocation
from harness_core.tasks.service import derive_task_id


class _Store(TaskStore):
    def put(self, record: TaskRecord) -> None:
        self.store_final(archive(record), record)


def archive(record: TaskRecord) -> Archive:
    return Archive(
        task_id=record.task_id,
        agent_id=record.agent_id,
        context_id=record.context_id,
        first_message=0,
        messages=({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},),
        events=(TaskEvent(seq=1, kind="status", body={"taskId": record.task_id}),),
        participants=record.participants,
    )


def record(
    task_id: str,
    *,
    context: str = "ctx",
    state: str = "TASK_STATE_COMPLETED",
    at: str = "2026-01-01T00:00:00Z",
    participants: tuple[str, ...] = ("alice",),
) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        context_id=context,
        agent_id="agent",
        state=state,
        status={"state": state, "timestamp": at},
        participants=participants,
        updated_at=at,
        messages=1,
        events=1,
    )


def test_payloads_round_trip_through_the_temporal_converter() -> None:
    values = [
        Inbound(message={"messageId": "m", "parts": [{"text": "hi"}]}, participant="p", wait=True),
        TurnOutcome(kind="ask", message=({"text": "which city?"},)),
        record("t1"),
    ]
    converter = data_converter.payload_converter
    payloads = converter.to_payloads(values)
    assert [p.metadata["encoding"] for p in payloads] == [b"json/plain"] * 3
    assert converter.from_payloads(payloads, [Inbound, TurnOutcome, TaskRecord]) == values


def test_a_retried_first_message_derives_the_same_task_id_and_another_message_does_not() -> None:
    hello = content_digest({"parts": [{"text": "hello"}]})
    first = derive_task_id("billing", "alice", "m-1", hello)
    assert derive_task_id("billing", "alice", "m-1", hello) == first
    assert derive_task_id("billing", "bob", "m-1", hello) != first
    assert derive_task_id("support", "alice", "m-1", hello) != first
    assert derive_task_id("billing", "alice", "m-2", hello) != first
    # The same message id with other content is another task (the TCK reuses ids).
    other = content_digest({"parts": [{"text": "other"}]})
    assert derive_task_id("billing", "alice", "m-1", other) != first


def test_the_store_keeps_records_across_reopening_and_lists_newest_first(
    store_location: Path | PostgresLocation,
) -> None:
    path = store_location
    store = _Store(path)
    store.put(record("old", at="2026-01-01T00:00:00Z"))
    store.put(record("new", context="other", at="2026-01-02T00:00:00Z"))
    store.put(record("failed", state="TASK_STATE_FAILED", at="2026-01-03T00:00:00Z"))
    store.close()

    reopened = TaskStore(path)
    try:
        assert reopened.get("old") == record("old", at="2026-01-01T00:00:00Z")
        listing = reopened.list_index
        assert reopened.messages("old", 0, 1) == list(archive(record("old")).messages)
        assert [e.seq for e in reopened.events("old", 0)] == [1]
        assert reopened.get("missing") is None
        everything, total = listing(participant="alice")
        assert [r.task_id for r in everything] == ["failed", "new", "old"]
        assert total == 3
        by_context, _ = listing(participant="alice", context_id="other")
        assert [r.task_id for r in by_context] == ["new"]
        completed, completed_total = listing(
            participant="alice", state="TASK_STATE_COMPLETED", limit=1
        )
        assert [r.task_id for r in completed] == ["new"]
        assert completed_total == 2
        after = everything[0]
        page, page_total = listing(participant="alice", limit=1, cursor=(after.status_at, "failed"))
        assert ([r.task_id for r in page], page_total) == (["new"], 3)
        since = parse_timestamp("2026-01-02T00:00:00Z")
        recent, _ = listing(participant="alice", status_after=since)
        assert [r.task_id for r in recent] == ["failed", "new"]
        if isinstance(path, Path):
            # The side files of WAL mode hold the same data: owner only, like the database.
            sides = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
            assert [side.stat().st_mode & 0o777 for side in sides] == [0o600, 0o600]
    finally:
        reopened.close()
    if isinstance(path, Path):
        assert path.stat().st_mode & 0o777 == 0o600


def test_the_access_policy_admits_members_and_anonymous_callers_to_anonymous_tasks_only() -> None:
    assert may_access(("alice", "bob"), "bob")
    assert not may_access(("alice",), "mallory")
    assert not may_access(("alice",), None)
    assert may_access((), None)
    assert not may_access((), "alice")


def test_the_store_lists_only_the_tasks_a_participant_is_on(
    store_location: Path | PostgresLocation,
) -> None:
    store = _Store(store_location)
    try:
        store.put(record("alices", participants=("alice",)))
        store.put(record("shared", participants=("alice", "bob"), at="2026-01-02T00:00:00Z"))
        store.put(record("anonymous", participants=()))
        assert [r.task_id for r in store.list_index(participant="alice")[0]] == ["shared", "alices"]
        assert [r.task_id for r in store.list_index(participant="bob")[0]] == ["shared"]
        assert store.list_index(participant="mallory") == ([], 0)
        assert [r.task_id for r in store.list_index(participant=None)[0]] == ["anonymous"]
    finally:
        store.close()


def test_a_store_from_before_the_participants_table_is_migrated_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    # The version-0 layout: records only.
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE tasks (task_id TEXT PRIMARY KEY, context_id TEXT NOT NULL, "
        "agent_id TEXT NOT NULL, state TEXT NOT NULL, updated_at TEXT NOT NULL, record TEXT NOT NULL)"
    )
    # A version-0 record held the whole task: history, artifacts and events.
    old = {
        "task_id": "old",
        "context_id": "ctx",
        "agent_id": "agent",
        "state": "TASK_STATE_COMPLETED",
        "task": {
            "id": "old",
            "contextId": "ctx",
            "status": {"state": "TASK_STATE_COMPLETED"},
            "history": [{"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}],
        },
        "events": [{"seq": 1, "kind": "status", "body": {"taskId": "old"}}],
        "message_ids": ["m1"],
        "participants": ["alice"],
        "updated_at": "2026-01-01T00:00:00Z",
    }
    db.execute(
        "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?)",
        ("old", "ctx", "agent", old["state"], old["updated_at"], json.dumps(old)),
    )
    db.commit()
    db.close()

    store = TaskStore(path)
    try:
        assert [r.task_id for r in store.list_index(participant="alice")[0]] == ["old"]
        assert store.list_index(participant=None) == ([], 0)
        migrated = store.get("old")
        assert migrated is not None and (migrated.messages, migrated.events) == (1, 1)
        assert store.messages("old", 0, 1)[0]["parts"] == [{"text": "hi"}]
        assert store.message_digest("old", "m1") == content_digest({"parts": [{"text": "hi"}]})
    finally:
        store.close()


def entry(seq: int, state: str, *, messages: int = 1, busy: bool = False) -> IndexEntry:
    return IndexEntry(
        archive=Archive(
            task_id="t",
            agent_id="agent",
            context_id="ctx",
            first_message=0,
            messages=({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},),
            events=tuple(TaskEvent(seq=n, kind="status", body={"n": n}) for n in range(1, seq + 1)),
            participants=("alice",),
        ),
        status={"state": state, "timestamp": f"2026-01-01T00:00:0{seq}Z"},
        last_seq=seq,
        messages=messages,
        busy=busy,
    )


def test_the_index_keeps_the_latest_state_whatever_order_its_writers_arrive_in(
    store_location: Path | PostgresLocation,
) -> None:
    """A turn's write and a sender's receipt race: a stale entry never moves a task back, a
    message accepted at the same event makes it busy, and an ended task stays ended."""
    store = _Store(store_location)
    try:
        store.checkpoint(entry(3, "TASK_STATE_INPUT_REQUIRED"))
        store.checkpoint(entry(2, "TASK_STATE_WORKING", busy=True), partial=True)
        row = store.index_row("t")
        assert row is not None
        assert (row.state, row.last_seq, row.busy, row.participants) == (
            "TASK_STATE_INPUT_REQUIRED",
            3,
            False,
            ("alice",),
        )
        store.checkpoint(entry(3, "TASK_STATE_INPUT_REQUIRED", messages=2, busy=True))
        row = store.index_row("t")
        assert row is not None and (row.messages, row.busy) == (2, True)
        store.put(record("t", state="TASK_STATE_CANCELED"))
        store.checkpoint(entry(9, "TASK_STATE_WORKING"))
        row = store.index_row("t")
        assert row is not None and (row.state, row.closed) == ("TASK_STATE_CANCELED", True)
        assert store.count_open() == 0
        assert not store.cancel_requested("t")
        store.request_cancel("t")
        assert store.cancel_requested("t")
    finally:
        store.close()
