"""The claim check's payload directory: content by digest, kept while a task refers to it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from harness_core.temporal.codec import PayloadMissingError, PayloadStore, task_of


def _age(store: PayloadStore, digest: str, seconds: float = 3600) -> None:
    path = store.directory / "sha256" / digest[:2] / digest
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_a_payload_is_stored_once_and_read_back_whole(tmp_path: Path) -> None:
    store = PayloadStore(tmp_path)
    data = os.urandom(100_000)
    first = store.put("task-1", data)
    again = store.put("task-2", data)
    assert first == again
    assert store.get(first) == data
    assert len(list((tmp_path / "sha256").glob("*/*"))) == 1


def test_a_payload_stays_while_any_task_refers_to_it(tmp_path: Path) -> None:
    store = PayloadStore(tmp_path)
    digest = store.put("task-1", b"shared content")
    store.put("task-2", b"shared content")
    _age(store, digest)
    store.release(["task-1"])
    assert store.collect(grace=60) == 0
    assert store.get(digest) == b"shared content"
    store.release(["task-2"])
    assert store.collect(grace=60) == 1
    with pytest.raises(PayloadMissingError, match="share its payload directory"):
        store.get(digest)


def test_a_fresh_payload_outlives_a_collection_even_unreferenced(tmp_path: Path) -> None:
    store = PayloadStore(tmp_path)
    digest = store.put("task-1", b"just written")
    store.release(["task-1"])
    assert store.collect(grace=60) == 0
    assert store.get(digest) == b"just written"


def test_a_store_racing_a_collection_never_loses_its_payload(tmp_path: Path) -> None:
    """The collection has moved the file aside when a new task stores the same content: the
    collection sees the new reference and puts the file back."""

    class Racing(PayloadStore):
        scans = 0

        def _referenced(self, grace: float) -> set[str]:
            self.scans += 1
            if self.scans == 2:  # after the move aside, before the second look
                assert self.get(digest) == b"content"  # readable while aside
                self.put("task-2", b"content")
            return super()._referenced(grace)

    store = Racing(tmp_path)
    digest = store.put("task-1", b"content")
    _age(store, digest)
    store.release(["task-1"])
    assert store.collect(grace=60) == 0
    assert store.get(digest) == b"content"


def test_stores_and_collections_in_threads_never_lose_a_referenced_payload(tmp_path: Path) -> None:
    store = PayloadStore(tmp_path)
    data = b"x" * 20_000
    done = threading.Event()
    failures: list[str] = []

    def collect() -> None:
        while not done.is_set():
            store.collect(grace=0)

    collector = threading.Thread(target=collect)
    collector.start()
    try:
        for n in range(300):
            task = f"task-{n}"
            digest = store.put(task, data)
            try:
                store.get(digest)
            except PayloadMissingError:
                failures.append(task)
            store.release([task])
    finally:
        done.set()
        collector.join()
    assert failures == []


def test_a_damaged_or_forged_digest_is_refused(tmp_path: Path) -> None:
    store = PayloadStore(tmp_path)
    digest = store.put("task-1", b"original")
    (tmp_path / "sha256" / digest[:2] / digest).write_bytes(b"tampered")
    with pytest.raises(PayloadMissingError, match="damaged"):
        store.get(digest)
    with pytest.raises(PayloadMissingError, match="not a payload digest"):
        store.get("../../etc/passwd")


def test_a_stand_in_workflow_belongs_to_its_task() -> None:
    assert task_of("0f7c:delegate:2:1") == "0f7c"
    assert task_of("0f7c") == "0f7c"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_driver_keys_payloads_by_content_and_files_them_under_the_workflows_task(
    tmp_path: Path, anyio_backend: str
) -> None:
    store = PayloadStore(tmp_path)
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"y" * 300_000 + b'"')
    target = StorageDriverWorkflowInfo(namespace="default", id="task-9:delegate:1:1")
    [claim] = await store.store(StorageDriverStoreContext(target=target), [payload])
    assert set(claim.claim_data) == {"sha256"}
    assert list((tmp_path / "refs").iterdir()) == [tmp_path / "refs" / "task-9"]
    [back] = await store.retrieve(
        StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data=claim.claim_data)]
    )
    assert back == payload
