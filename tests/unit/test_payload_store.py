"""The claim check's payload store: content by digest, kept while a task refers to it; in a
directory, and in an object store (a real S3-compatible server on loopback, moto's)."""

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

from harness_core.temporal.codec import (
    PayloadMissingError,
    PayloadStore,
    PayloadStoreUnavailableError,
    task_of,
)


@pytest.fixture(params=["directory", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    if request.param == "directory":
        return tmp_path
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/payloads"


def later(store: PayloadStore, seconds: float = 3600) -> None:
    """Move the store's clock on: what it holds is that much older."""
    store.clock = lambda: time.time() + seconds


def keys(store: PayloadStore, prefix: str) -> list[str]:
    return sorted(key for key, _ in store._blobs.listing(prefix))  # pyright: ignore[reportPrivateUsage]


def test_a_payload_is_stored_once_and_read_back_whole(location: Path | str) -> None:
    store = PayloadStore(location)
    data = os.urandom(100_000)
    first = store.put("task-1", data)
    again = store.put("task-2", data)
    assert first == again
    assert store.get(first) == data
    assert keys(store, "sha256/") == [f"sha256/{first[:2]}/{first}"]


def test_two_hosts_storing_the_same_content_agree(location: Path | str) -> None:
    """Two stores on one location (two hosts): the same content is one payload, which each reads."""
    one, two = PayloadStore(location), PayloadStore(location)
    digest = one.put("task-1", b"the same bytes")
    assert two.put("task-2", b"the same bytes") == digest
    assert one.get(digest) == two.get(digest) == b"the same bytes"
    assert len(keys(one, "sha256/")) == 1


def test_a_payload_stays_while_any_task_refers_to_it(location: Path | str) -> None:
    store = PayloadStore(location)
    digest = store.put("task-1", b"shared content")
    store.put("task-2", b"shared content")
    later(store)
    store.release(["task-1"])
    assert store.collect(grace=60) == 0
    assert store.get(digest) == b"shared content"
    store.release(["task-2"])
    assert store.collect(grace=60) == 1
    with pytest.raises(PayloadMissingError, match="share its payload directory"):
        store.get(digest)


def test_a_fresh_payload_outlives_a_collection_even_unreferenced(location: Path | str) -> None:
    store = PayloadStore(location)
    digest = store.put("task-1", b"just written")
    store.release(["task-1"])
    assert store.collect(grace=60) == 0
    assert store.get(digest) == b"just written"


def test_a_store_racing_a_collection_never_loses_its_payload(location: Path | str) -> None:
    """The collection has moved the payload aside when a new task stores the same content: the
    collection sees the new reference and puts the payload back."""

    class Racing(PayloadStore):
        scans = 0

        def _referenced(self, grace: float) -> set[str]:
            self.scans += 1
            if self.scans == 2:  # after the move aside, before the second look
                assert self.get(digest) == b"content"  # readable while aside
                self.put("task-2", b"content")
            return super()._referenced(grace)

    store = Racing(location)
    digest = store.put("task-1", b"content")
    later(store)
    store.release(["task-1"])
    assert store.collect(grace=60) == 0
    assert store.get(digest) == b"content"


def test_a_store_after_a_collection_writes_the_payload_again(location: Path | str) -> None:
    """A new reference after the collection's last look: the collection removed the payload, and
    the store, which looks for it after writing its reference, writes it again."""
    store = PayloadStore(location)
    digest = store.put("task-1", b"content")
    later(store)
    store.release(["task-1"])
    assert store.collect(grace=60) == 1
    assert store.put("task-2", b"content") == digest
    assert store.get(digest) == b"content"


def test_stores_and_two_hosts_collections_never_lose_a_referenced_payload(
    location: Path | str,
) -> None:
    """Two collections at once (two hosts, or two agents sharing the payloads) and a stream of
    stores of one content: every store can read its payload back."""
    stores = [PayloadStore(location) for _ in range(3)]
    data = b"x" * 20_000
    done = threading.Event()
    failures: list[str] = []
    rounds = 300 if isinstance(location, Path) else 60  # each call a request to the server

    def collect(store: PayloadStore) -> None:
        while not done.is_set():
            store.collect(grace=0)

    collectors = [threading.Thread(target=collect, args=(s,)) for s in stores[1:]]
    for collector in collectors:
        collector.start()
    try:
        for n in range(rounds):
            task = f"task-{n}"
            digest = stores[0].put(task, data)
            try:
                stores[0].get(digest)
            except PayloadMissingError:
                failures.append(task)
            stores[0].release([task])
    finally:
        done.set()
        for collector in collectors:
            collector.join()
    assert failures == []


def test_a_damaged_or_forged_digest_is_refused(location: Path | str) -> None:
    store = PayloadStore(location)
    digest = store.put("task-1", b"original")
    store._blobs.write(f"sha256/{digest[:2]}/{digest}", b"tampered")  # pyright: ignore[reportPrivateUsage]
    with pytest.raises(PayloadMissingError, match="damaged"):
        store.get(digest)
    with pytest.raises(PayloadMissingError, match="not a payload digest"):
        store.get("../../etc/passwd")


def test_a_bucket_that_does_not_exist_fails_at_once_naming_the_url(s3_bucket: str) -> None:
    with pytest.raises(PayloadStoreUnavailableError) as caught:
        PayloadStore(f"s3://{s3_bucket}-missing/payloads")
    text = str(caught.value)
    assert f"s3://{s3_bucket}-missing/payloads" in text
    assert "no such bucket or container (404)" in text
    assert "check [store] blobs" in text
    assert "test-secret" not in text and "<?xml" not in text


def test_a_plain_http_endpoint_without_its_switch_says_which_variable_it_needs(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    with pytest.raises(PayloadStoreUnavailableError, match="needs AWS_ALLOW_HTTP=true"):
        PayloadStore(f"s3://{s3_bucket}/payloads")


def test_a_stand_in_workflow_belongs_to_its_task() -> None:
    assert task_of("0f7c:delegate:2:1") == "0f7c"
    assert task_of("0f7c") == "0f7c"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_driver_keys_payloads_by_content_and_files_them_under_the_workflows_task(
    location: Path | str, anyio_backend: str
) -> None:
    store = PayloadStore(location)
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"y" * 300_000 + b'"')
    target = StorageDriverWorkflowInfo(namespace="default", id="task-9:delegate:1:1")
    [claim] = await store.store(StorageDriverStoreContext(target=target), [payload])
    assert set(claim.claim_data) == {"sha256"}
    assert keys(store, "refs/") == [f"refs/task-9/{claim.claim_data['sha256']}"]
    [back] = await store.retrieve(
        StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data=claim.claim_data)]
    )
    assert back == payload
