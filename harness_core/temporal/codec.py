"""The claim check: one mechanism, at the Temporal boundary, for every payload over a threshold.

Temporal refuses payloads over 2 MB and keeps every payload in a workflow's history, so content (a
3 MB tool result, a 5 MB file from another agent, a long model exchange) must not travel inline.
Instead of marking parts of A2A content (which a client could forge), the harness hands Temporal's
``ExternalStorage`` (``temporalio.converter``) a :class:`PayloadStore`: every payload the data
converter produces that is over :data:`CLAIM_BYTES` (activity inputs and results, updates, signals,
queries, child workflow inputs, continue-as-new state, failures) is written to a directory by its
SHA-256 and replaced in history by a small reference, then read back wherever it is decoded. The
content is whatever Temporal would have carried; nothing in it is ever interpreted as a reference,
and nothing in the store is reachable through an agent's A2A face.

Layout of the directory (shared by every process that uses the same Temporal connection):

- ``sha256/<two hex>/<hex>``: a serialized ``Payload``, written once (a temporary file renamed in);
- ``refs/<task>/<hex>``: an empty file per (task, payload): the task's histories refer to it.

A payload lives while a task refers to it. The retention sweep :meth:`releases <release>` the tasks it
removes, then :meth:`collects <collect>` payloads that no task refers to and that were not stored in
the last ``grace`` seconds. A store racing a collection never loses its payload: the store writes its
reference before it looks for the file, and the collection moves a file aside, looks for references
again, and puts back any that gained one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import anyio.to_thread
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from harness_core.config import Settings
from harness_core.converter import data_converter
from harness_core.errors import HarnessError

__all__ = [
    "CLAIM_BYTES",
    "PayloadMissingError",
    "PayloadStore",
    "claim_check_converter",
    "data_converter_for",
    "payload_store_of",
    "task_of",
]

#: Payloads this large or larger (serialized) are stored by digest and travel as a reference.
CLAIM_BYTES = 16 * 1024
#: Files this large are read and written in a worker thread rather than on the event loop.
_THREAD_BYTES = 256 * 1024
#: References of payloads stored outside any task (a standalone activity): kept for ``grace``.
_UNOWNED = "_unowned"


class PayloadMissingError(HarnessError):
    """A history refers to a payload its claim-check directory does not have (a directory not
    shared by every process that uses the Temporal connection, or removed by hand)."""


def task_of(workflow_id: str) -> str:
    """The task a workflow belongs to: its id up to the first ``:`` (a delegation's stand-in
    ``<task>:delegate:<turn>:<n>`` belongs to its task)."""
    return workflow_id.partition(":")[0]


def _ref_dir_name(task: str) -> str:
    name = quote(task, safe="")
    if not task or len(name) > 200 or name.startswith("."):
        # Never a name the filesystem refuses; such ids are not ours (tasks are UUIDs).
        return "h-" + hashlib.sha256(task.encode()).hexdigest()
    return name


class PayloadStore(StorageDriver):
    """A content-addressed payload directory, as a Temporal ``StorageDriver``. Thread-safe; several
    processes may share the directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "sha256").mkdir(parents=True, exist_ok=True, mode=0o700)
        (directory / "refs").mkdir(parents=True, exist_ok=True, mode=0o700)

    def name(self) -> str:
        return "harness-payloads"

    def type(self) -> str:
        return "harness.payload-directory"

    # -- the driver -------------------------------------------------------------------------------

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        target = context.target
        task = (
            task_of(target.id)
            if isinstance(target, StorageDriverWorkflowInfo) and target.id
            else _UNOWNED
        )
        claims: list[StorageDriverClaim] = []
        for payload in payloads:
            data = payload.SerializeToString(deterministic=True)
            if len(data) >= _THREAD_BYTES:
                digest = await anyio.to_thread.run_sync(self.put, task, data)
            else:
                digest = self.put(task, data)
            claims.append(StorageDriverClaim(claim_data={"sha256": digest}))
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        payloads: list[Payload] = []
        for claim in claims:
            digest = claim.claim_data.get("sha256", "")
            path = self._path(digest)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size >= _THREAD_BYTES:
                data = await anyio.to_thread.run_sync(self.get, digest)
            else:
                data = self.get(digest)
            payloads.append(Payload.FromString(data))
        return payloads

    # -- files ------------------------------------------------------------------------------------

    def _path(self, digest: str) -> Path:
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise PayloadMissingError(f"{digest!r} is not a payload digest")
        return self.directory / "sha256" / digest[:2] / digest

    def _ref(self, task: str, digest: str) -> Path:
        return self.directory / "refs" / _ref_dir_name(task) / digest

    def put(self, task: str, data: bytes) -> str:
        """Store ``data`` for ``task`` (once, whatever the number of calls); returns its digest."""
        digest = hashlib.sha256(data).hexdigest()
        ref = self._ref(task, digest)
        # The reference first: a collection that moved the file aside before this point puts it
        # back when it sees the reference; one that moves it later finds this write done.
        if not ref.exists():
            ref.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            ref.touch()
        path = self._path(digest)
        if path.exists():
            with contextlib.suppress(FileNotFoundError):
                os.utime(path)
            if path.exists():
                return digest
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return digest

    def get(self, digest: str) -> bytes:
        """The payload stored under ``digest``; raises ``PayloadMissingError`` when it is gone."""
        path = self._path(digest)
        # A collection may hold it aside for a moment (and put it back if it is referred to).
        for candidate in (path, path.with_name(".doomed-" + digest), path):
            try:
                data = candidate.read_bytes()
                break
            except FileNotFoundError:
                continue
        else:
            raise PayloadMissingError(
                f"payload {digest} is not in {self.directory} (do all processes that use this "
                "Temporal connection share its payload directory?)"
            )
        if hashlib.sha256(data).hexdigest() != digest:
            raise PayloadMissingError(f"payload {digest} in {self.directory} is damaged")
        return data

    # -- lifetime ---------------------------------------------------------------------------------

    def release(self, tasks: Sequence[str]) -> None:
        """Forget what these tasks refer to (their histories and records are gone)."""
        for task in tasks:
            folder = self.directory / "refs" / _ref_dir_name(task)
            for ref in _listing(folder):
                ref.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()

    def _referenced(self, grace: float) -> set[str]:
        cutoff = time.time() - grace
        found: set[str] = set()
        for folder in _listing(self.directory / "refs"):
            unowned = folder.name == _UNOWNED
            for ref in _listing(folder):
                if unowned:
                    try:
                        if ref.stat().st_mtime < cutoff:
                            ref.unlink(missing_ok=True)
                            continue
                    except FileNotFoundError:
                        continue
                found.add(ref.name)
        return found

    def collect(self, grace: float) -> int:
        """Remove the payloads no task refers to that were not stored in the last ``grace``
        seconds; returns how many were removed."""
        cutoff = time.time() - grace
        referenced = self._referenced(grace)
        aside: list[tuple[Path, Path]] = []
        for shard in _listing(self.directory / "sha256"):
            for path in _listing(shard):
                if path.name.startswith(".") or path.name in referenced:
                    continue
                try:
                    if path.stat().st_mtime >= cutoff:
                        continue
                    doomed = path.with_name(".doomed-" + path.name)
                    path.rename(doomed)
                except FileNotFoundError:
                    continue
                aside.append((path, doomed))
        if not aside:
            return 0
        # A store may have referred to one of them meanwhile: it comes back.
        referenced = self._referenced(grace)
        removed = 0
        for path, doomed in aside:
            if path.name in referenced:
                with contextlib.suppress(FileNotFoundError):
                    os.replace(doomed, path)
            else:
                doomed.unlink(missing_ok=True)
                removed += 1
        return removed


def _listing(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def claim_check_converter(store: PayloadStore) -> DataConverter:
    """The harness's data converter with the claim check over ``store``."""
    return dataclasses.replace(
        data_converter,
        external_storage=ExternalStorage(drivers=[store], payload_size_threshold=CLAIM_BYTES),
    )


def data_converter_for(settings: Settings) -> DataConverter:
    """The data converter a Temporal client passed to ``Harness(client=...)`` must have: the
    harness's payloads, with the claim check over the agent's ``[temporal] payloads``."""
    return claim_check_converter(PayloadStore(settings.payloads_path))


def payload_store_of(converter: DataConverter) -> PayloadStore | None:
    """The claim check's directory of a data converter, if it has the harness's."""
    storage = converter.external_storage
    drivers = storage.drivers if storage is not None else ()
    return next((d for d in drivers if isinstance(d, PayloadStore)), None)
