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

The payloads are in a directory (``[temporal] payloads``, the default) or an object store
(``[store] blobs``: ``s3://bucket/prefix``, ``gs://...``, ``az://...``, through obstore, with the
credentials in the environment); every process that uses the same Temporal connection, on one
machine or many, shares it. Its layout:

- ``sha256/<two hex>/<hex>``: a serialized ``Payload``, written once (whole: a temporary file
  renamed in, or one object put); two hosts storing the same content write the same key;
- ``refs/<task>/<hex>``: an empty file (object) per (task, payload): the task's histories refer
  to it.

A payload lives while a task refers to it. The retention sweep :meth:`releases <release>` the tasks it
removes, then :meth:`collects <collect>` payloads that no task refers to and that were not stored in
the last ``grace`` seconds. A store racing a collection never loses its payload: the store writes its
reference before it looks for the file, and the collection moves a file aside (an object store:
copies it aside and deletes it), looks for references again, and puts back any that gained one. A
store whose reference came after that second look found the file gone, and wrote it again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol
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
from harness_core.errors import ConfigError, HarnessError

__all__ = [
    "CLAIM_BYTES",
    "PayloadMissingError",
    "PayloadStore",
    "PayloadStoreUnavailableError",
    "claim_check_converter",
    "data_converter_for",
    "payload_store_of",
    "task_of",
]

log = logging.getLogger("harness.payloads")

#: Payloads this large or larger (serialized) are stored by digest and travel as a reference.
CLAIM_BYTES = 16 * 1024
#: Files this large are read and written in a worker thread rather than on the event loop.
_THREAD_BYTES = 256 * 1024
#: References of payloads stored outside any task (a standalone activity): kept for ``grace``.
_UNOWNED = "_unowned"


class PayloadStoreUnavailableError(HarnessError):
    """The object store named for the payloads cannot be used (no such bucket, credentials
    refused, unreachable); the text names the URL and what to check, never a credential."""


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
    """A content-addressed payload store, as a Temporal ``StorageDriver``: a directory (the
    default) or an object store (``[store] blobs``, e.g. ``s3://bucket/prefix``). Thread-safe;
    several processes, on one machine or many, may share it."""

    def __init__(self, location: Path | str, *, clock: Callable[[], float] = time.time) -> None:
        self.location = location
        self.clock = clock
        self._blobs: _Blobs = (
            _ObjectBlobs(location) if isinstance(location, str) else _LocalBlobs(location)
        )

    @property
    def remote(self) -> bool:
        """Whether the payloads are in an object store (every call is a network call)."""
        return isinstance(self._blobs, _ObjectBlobs)

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
            if self.remote or len(data) >= _THREAD_BYTES:
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
            key = self._key(digest)
            if self.remote or self._blobs.size(key) >= _THREAD_BYTES:
                data = await anyio.to_thread.run_sync(self.get, digest)
            else:
                data = self.get(digest)
            payloads.append(Payload.FromString(data))
        return payloads

    # -- payloads ---------------------------------------------------------------------------------

    @staticmethod
    def _key(digest: str) -> str:
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise PayloadMissingError(f"{digest!r} is not a payload digest")
        return f"sha256/{digest[:2]}/{digest}"

    @staticmethod
    def _aside(key: str, collector: str = "") -> str:
        """Where a collection holds a payload aside: a name of its own per collection, so that
        two collections (two agents sharing the payloads, two hosts) never take each other's."""
        folder, _, name = key.rpartition("/")
        return f"{folder}/.doomed-{name}-{collector}" if collector else f"{folder}/.doomed-{name}"

    def put(self, task: str, data: bytes) -> str:
        """Store ``data`` for ``task`` (once, whatever the number of calls); returns its digest."""
        digest = hashlib.sha256(data).hexdigest()
        ref = f"refs/{_ref_dir_name(task)}/{digest}"
        # The reference first: a collection that moved the payload aside before this point puts
        # it back when it sees the reference; one that moves it later finds this write done.
        if not self._blobs.exists(ref):
            self._blobs.write(ref, b"")
        key = self._key(digest)
        if self._blobs.touch(key):
            return digest
        self._blobs.write(key, data)
        return digest

    def get(self, digest: str) -> bytes:
        """The payload stored under ``digest``; raises ``PayloadMissingError`` when it is gone."""
        key = self._key(digest)
        data = self._blobs.read(key)
        if data is None:
            # A collection may hold it aside for a moment (and put it back if it is referred to).
            folder = key.rpartition("/")[0]
            held = [
                k for k, _ in self._blobs.listing(f"{folder}/") if k.startswith(self._aside(key))
            ]
            for candidate in (*held, key):
                data = self._blobs.read(candidate)
                if data is not None:
                    break
        if data is None:
            raise PayloadMissingError(
                f"payload {digest} is not in {self._blobs.where} (do all processes that use this "
                "Temporal connection share its payload directory?)"
            )
        if hashlib.sha256(data).hexdigest() != digest:
            raise PayloadMissingError(f"payload {digest} in {self._blobs.where} is damaged")
        return data

    # -- lifetime ---------------------------------------------------------------------------------

    def release(self, tasks: Sequence[str]) -> None:
        """Forget what these tasks refer to (their histories and records are gone)."""
        for task in tasks:
            folder = f"refs/{_ref_dir_name(task)}/"
            for ref, _ in self._blobs.listing(folder):
                self._blobs.delete(ref)
            self._blobs.forget_folder(folder)

    def _referenced(self, grace: float) -> set[str]:
        cutoff = self.clock() - grace
        found: set[str] = set()
        unowned = f"refs/{_UNOWNED}/"
        for ref, modified in self._blobs.listing("refs/"):
            if ref.startswith(unowned) and modified < cutoff:
                self._blobs.delete(ref)
                continue
            found.add(ref.rpartition("/")[2])
        return found

    def collect(self, grace: float) -> int:
        """Remove the payloads no task refers to that were not stored in the last ``grace``
        seconds; returns how many were removed."""
        cutoff = self.clock() - grace
        collector = uuid.uuid4().hex[:12]
        referenced = self._referenced(grace)
        aside: list[tuple[str, str]] = []
        for key, modified in self._blobs.listing("sha256/"):
            name = key.rpartition("/")[2]
            if name.startswith(".") or name in referenced or modified >= cutoff:
                continue
            doomed = self._aside(key, collector)
            if self._blobs.move(key, doomed):
                aside.append((key, doomed))
        if not aside:
            return 0
        # A store may have referred to one of them meanwhile: it comes back.
        referenced = self._referenced(grace)
        removed = 0
        for key, doomed in aside:
            if key.rpartition("/")[2] in referenced:
                if not self._blobs.move(doomed, key) and not self._blobs.exists(key):
                    log.error("payload %s was held aside and is gone: it cannot be put back", key)
            else:
                self._blobs.delete(doomed)
                removed += 1
        return removed


class _Blobs(Protocol):
    """Where the payloads are: keys like ``sha256/ab/<digest>`` and ``refs/<task>/<digest>``."""

    #: How errors name it: the directory, or the object store's URL.
    where: str

    def read(self, key: str) -> bytes | None: ...
    def size(self, key: str) -> int: ...
    def exists(self, key: str) -> bool: ...
    def write(self, key: str, data: bytes) -> None: ...
    def touch(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...
    def move(self, key: str, to: str) -> bool: ...
    def listing(self, prefix: str) -> list[tuple[str, float]]: ...
    def forget_folder(self, prefix: str) -> None: ...


class _LocalBlobs:
    """A directory: files written whole (a temporary file renamed in), moved by rename."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.where = str(directory)
        (directory / "sha256").mkdir(parents=True, exist_ok=True, mode=0o700)
        (directory / "refs").mkdir(parents=True, exist_ok=True, mode=0o700)

    def read(self, key: str) -> bytes | None:
        try:
            return (self.directory / key).read_bytes()
        except FileNotFoundError:
            return None

    def size(self, key: str) -> int:
        try:
            return (self.directory / key).stat().st_size
        except FileNotFoundError:
            return 0

    def exists(self, key: str) -> bool:
        return (self.directory / key).exists()

    def write(self, key: str, data: bytes) -> None:
        path = self.directory / key
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not data:
            path.touch()
            return
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def touch(self, key: str) -> bool:
        """Mark an existing file as just stored (a collection's ``grace`` counts from then)."""
        path = self.directory / key
        with contextlib.suppress(FileNotFoundError):
            os.utime(path)
        return path.exists()

    def delete(self, key: str) -> None:
        (self.directory / key).unlink(missing_ok=True)

    def move(self, key: str, to: str) -> bool:
        try:
            os.replace(self.directory / key, self.directory / to)
        except FileNotFoundError:
            return False
        return True

    def listing(self, prefix: str) -> list[tuple[str, float]]:
        """Files two levels under ``prefix`` (``sha256/<shard>/<file>``) or one (``refs/<task>/``
        lists that task's), with their modification times."""
        root = self.directory / prefix
        depth = prefix.rstrip("/").count("/")
        folders = [root] if depth else _listing(root)
        found: list[tuple[str, float]] = []
        for folder in folders:
            for path in _listing(folder):
                try:
                    modified = path.stat().st_mtime
                except FileNotFoundError:
                    continue
                found.append((str(path.relative_to(self.directory)), modified))
        return found

    def forget_folder(self, prefix: str) -> None:
        with contextlib.suppress(OSError):
            (self.directory / prefix).rmdir()


class _ObjectBlobs:
    """An object store (S3, Google Cloud Storage, Azure) through obstore, its credentials from
    the environment (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``). A move is a copy and a delete."""

    def __init__(self, url: str) -> None:
        try:
            import obstore
            from obstore.store import from_url
        except ImportError:
            raise ConfigError(
                f"[store] blobs is {url!r}, but obstore is not installed: "
                "pip install 'a2a-harness[objectstore]'"
            ) from None
        self._obstore = obstore
        self.where = url
        try:
            self._store = from_url(url)
            # One listing now, so that a wrong bucket or credentials fail the start, not a turn.
            listing = obstore.list(  # pyright: ignore[reportUnknownMemberType]
                self._store, prefix="refs/", chunk_size=1, return_arrow=False
            )
            next(iter(listing), None)
        except Exception as error:
            raise PayloadStoreUnavailableError(
                f"cannot use the object store {url} for payloads: {_object_store_reason(error)} "
                "(check [store] blobs and the credentials in the environment)"
            ) from None

    def read(self, key: str) -> bytes | None:
        try:
            return bytes(self._obstore.get(self._store, key).bytes())
        except FileNotFoundError:
            return None

    def size(self, key: str) -> int:
        try:
            return int(self._obstore.head(self._store, key)["size"])
        except FileNotFoundError:
            return 0

    def exists(self, key: str) -> bool:
        try:
            self._obstore.head(self._store, key)
        except FileNotFoundError:
            return False
        return True

    def write(self, key: str, data: bytes) -> None:
        self._obstore.put(self._store, key, data)

    def touch(self, key: str) -> bool:
        # An object's time cannot be changed without writing it again: a payload stored again
        # keeps its first time (its new reference is what keeps it).
        return self.exists(key)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._obstore.delete(self._store, key)

    def move(self, key: str, to: str) -> bool:
        try:
            self._obstore.copy(self._store, key, to)
        except FileNotFoundError:
            return False
        self.delete(key)
        return True

    def listing(self, prefix: str) -> list[tuple[str, float]]:
        found: list[tuple[str, float]] = []
        chunks = self._obstore.list(  # pyright: ignore[reportUnknownMemberType]
            self._store, prefix=prefix, return_arrow=False
        )
        for chunk in chunks:
            for meta in chunk:
                found.append((str(meta["path"]), meta["last_modified"].timestamp()))
        return found

    def forget_folder(self, prefix: str) -> None:
        """Object stores have no folders."""


def _object_store_reason(error: Exception) -> str:
    """Why an object store refused the first listing, in a few words where its status says it;
    else the client's first line, without the XML body a server sent."""
    text = str(error)
    for status, reason in (
        ("404", "no such bucket or container (404)"),
        ("403", "the credentials were refused (403)"),
        ("401", "the credentials were refused (401)"),
    ):
        if (
            f"{status} Not Found" in text
            or f"status code: {status}" in text
            or f" {status} " in text
        ):
            return reason
    if "builder error" in text and "http://" in text:
        return "a plain-HTTP endpoint needs AWS_ALLOW_HTTP=true"
    first = (text.strip().splitlines() or [type(error).__name__])[0]
    return first.split("<?xml")[0].strip()[:300]


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
    harness's payloads, with the claim check over the agent's ``[temporal] payloads`` (or
    ``[store] blobs``)."""
    return claim_check_converter(PayloadStore(settings.payloads_location))


def payload_store_of(converter: DataConverter) -> PayloadStore | None:
    """The claim check's directory of a data converter, if it has the harness's."""
    storage = converter.external_storage
    drivers = storage.drivers if storage is not None else ()
    return next((d for d in drivers if isinstance(d, PayloadStore)), None)
