"""Payload conversion, task ids, and the SQLite store (real files)."""

from __future__ import annotations

from pathlib import Path

from harness_core.converter import data_converter
from harness_core.payloads import Inbound, TaskEvent, TaskRecord, TurnOutput
from harness_core.store import TaskStore
from harness_core.tasks import derive_task_id


def record(
    task_id: str,
    *,
    context: str = "ctx",
    state: str = "TASK_STATE_COMPLETED",
    at: str = "2026-01-01T00:00:00Z",
) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        context_id=context,
        agent_id="agent",
        state=state,
        task={"id": task_id, "contextId": context, "status": {"state": state}},
        events=(TaskEvent(seq=1, kind="status", body={"taskId": task_id}),),
        message_ids=("m1",),
        participants=("alice",),
        updated_at=at,
    )


def test_payloads_round_trip_through_the_temporal_converter() -> None:
    values = [
        Inbound(message={"messageId": "m", "parts": [{"text": "hi"}]}, participant="p", wait=True),
        TurnOutput("which city?", action="ask"),
        record("t1"),
    ]
    converter = data_converter.payload_converter
    payloads = converter.to_payloads(values)
    assert [p.metadata["encoding"] for p in payloads] == [b"json/plain"] * 3
    assert converter.from_payloads(payloads, [Inbound, TurnOutput, TaskRecord]) == values


def test_a_retried_first_message_derives_the_same_task_id_and_another_message_does_not() -> None:
    first = derive_task_id("billing", "alice", "m-1")
    assert derive_task_id("billing", "alice", "m-1") == first
    assert derive_task_id("billing", "bob", "m-1") != first
    assert derive_task_id("support", "alice", "m-1") != first
    assert derive_task_id("billing", "alice", "m-2") != first


def test_the_store_keeps_records_across_reopening_and_lists_newest_first(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite3"
    store = TaskStore(path)
    store.put(record("old", at="2026-01-01T00:00:00Z"))
    store.put(record("new", context="other", at="2026-01-02T00:00:00Z"))
    store.put(record("failed", state="TASK_STATE_FAILED", at="2026-01-03T00:00:00Z"))
    store.close()

    reopened = TaskStore(path)
    try:
        assert reopened.get("old") == record("old", at="2026-01-01T00:00:00Z")
        assert reopened.get("missing") is None
        everything, total = reopened.list()
        assert [r.task_id for r in everything] == ["failed", "new", "old"]
        assert total == 3
        by_context, _ = reopened.list(context_id="other")
        assert [r.task_id for r in by_context] == ["new"]
        completed, completed_total = reopened.list(state="TASK_STATE_COMPLETED", limit=1)
        assert [r.task_id for r in completed] == ["new"]
        assert completed_total == 2
        page, _ = reopened.list(limit=1, offset=1)
        assert [r.task_id for r in page] == ["new"]
    finally:
        reopened.close()
    assert path.stat().st_mode & 0o777 == 0o600
