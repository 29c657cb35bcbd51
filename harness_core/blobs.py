"""The claim check: content over a threshold is stored once, in the agent's blob store, and travels by
reference, so no file, long reply or large artifact a client or model can produce reaches Temporal's
payloads (2 MB each) or a workflow's memory.

A blob store is a directory of content-addressed files (``sha256/<first two hex>/<hex>``), written
atomically (a temporary file renamed into place) and readable by every process that serves the agent
(point ``[store] blobs`` of each at the same directory). A part whose content is stored keeps its name,
media type and metadata; its content field (``raw``, ``text`` or ``data``) is replaced by
``metadata["harness.blob"] = {"ref", "field", "size"}`` until it is restored at the edge.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from harness_core.errors import HarnessError

__all__ = ["BLOB_KEY", "OFFLOAD_BYTES", "BlobMissingError", "BlobStore", "has_blobs"]

#: The part metadata key that marks content kept in the blob store.
BLOB_KEY = "harness.blob"
#: Parts whose content is larger than this (bytes, decoded) go to the blob store.
OFFLOAD_BYTES = 16 * 1024


class BlobMissingError(HarnessError):
    """A part refers to a blob the store does not have (a blob directory not shared by every process
    that serves the agent, or removed by hand)."""


class BlobStore:
    """Content-addressed files in one directory. Thread-safe: files are written whole and renamed."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, digest: str) -> Path:
        return self.directory / "sha256" / digest[:2] / digest

    def put(self, data: bytes) -> str:
        """Store ``data`` (once, whatever the number of calls) and return its reference."""
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if path.exists():
            # Referred to again: the sweep keeps blobs by when they were last stored.
            with contextlib.suppress(OSError):
                os.utime(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(temp, path)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
        return f"sha256:{digest}"

    def unreferenced(self, older_than: float, keep: set[str]) -> set[str]:
        """References of the blobs stored (or stored again) more than ``older_than`` seconds ago
        that are not in ``keep``."""
        cutoff = time.time() - older_than
        found: set[str] = set()
        root = self.directory / "sha256"
        if not root.is_dir():
            return found
        for path in root.glob("*/*"):
            ref = f"sha256:{path.name}"
            if path.name.startswith(".") or ref in keep:
                continue
            try:
                if path.stat().st_mtime < cutoff:
                    found.add(ref)
            except FileNotFoundError:
                continue
        return found

    def remove(self, refs: set[str]) -> int:
        """Remove these blobs; returns how many were there."""
        removed = 0
        for ref in refs:
            digest = ref.removeprefix("sha256:")
            try:
                self._path(digest).unlink()
                removed += 1
            except FileNotFoundError:
                continue
        return removed

    def get(self, ref: str) -> bytes:
        """The content of ``ref``; raises ``BlobMissingError`` when the store does not have it."""
        kind, _, digest = ref.partition(":")
        if (
            kind != "sha256"
            or len(digest) != 64
            or not all(c in "0123456789abcdef" for c in digest)
        ):
            raise BlobMissingError(f"{ref!r} is not a blob reference")
        try:
            return self._path(digest).read_bytes()
        except FileNotFoundError:
            raise BlobMissingError(
                f"blob {ref} is not in {self.directory} (do all processes serving the agent "
                "share its [store] blobs directory?)"
            ) from None

    # -- parts ------------------------------------------------------------------------------------

    def offload_part(self, part: dict[str, Any], threshold: int = OFFLOAD_BYTES) -> dict[str, Any]:
        """The part with its content in the store when it is larger than ``threshold``."""
        for field in ("raw", "text", "data"):
            if field not in part:
                continue
            value = part[field]
            if field == "raw":
                content = base64.b64decode(str(value))
            elif field == "text":
                content = str(value).encode()
            else:
                content = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
            if len(content) <= threshold:
                return part
            ref = self.put(content)
            stored = {k: v for k, v in part.items() if k != field}
            metadata = dict(cast("dict[str, Any]", stored.get("metadata") or {}))
            metadata[BLOB_KEY] = {"ref": ref, "field": field, "size": len(content)}
            stored["metadata"] = metadata
            return stored
        return part

    def offload(self, value: Any, threshold: int = OFFLOAD_BYTES) -> Any:
        """A ProtoJSON message, artifact or event with every large part offloaded."""

        def offload(part: dict[str, Any]) -> dict[str, Any]:
            return self.offload_part(part, threshold)

        return _map_parts(value, offload)

    def restore_part(self, part: dict[str, Any]) -> dict[str, Any]:
        """The part with its stored content back in place."""
        metadata = cast("dict[str, Any]", part.get("metadata") or {})
        marker = metadata.get(BLOB_KEY)
        if not isinstance(marker, dict):
            return part
        marker = cast("dict[str, Any]", marker)
        content = self.get(str(marker.get("ref", "")))
        field = str(marker.get("field", "raw"))
        restored = dict(part)
        rest = {k: v for k, v in metadata.items() if k != BLOB_KEY}
        if rest:
            restored["metadata"] = rest
        else:
            restored.pop("metadata", None)
        if field == "raw":
            restored["raw"] = base64.b64encode(content).decode()
        elif field == "text":
            restored["text"] = content.decode()
        else:
            restored["data"] = json.loads(content)
        return restored

    def restore(self, value: Any) -> Any:
        """A ProtoJSON message, artifact, event or task with every stored part restored."""
        return _map_parts(value, self.restore_part)


def has_blobs(value: Any) -> bool:
    """Whether any part under ``value`` keeps its content in the blob store (no I/O)."""
    found = False

    def look(part: dict[str, Any]) -> dict[str, Any]:
        nonlocal found
        metadata = part.get("metadata")
        if isinstance(metadata, dict) and BLOB_KEY in metadata:
            found = True
        return part

    _map_parts(value, look)
    return found


def _map_parts(value: Any, fn: Any) -> Any:
    """Apply ``fn`` to every part under ``value`` (lists named ``parts``), copying only what changes."""
    if isinstance(value, dict):
        mapping = cast("dict[str, Any]", value)
        changed: dict[str, Any] | None = None
        for key, item in mapping.items():
            if key == "parts" and isinstance(item, list):
                parts = cast("list[Any]", item)
                new: Any = [fn(p) if isinstance(p, dict) else p for p in parts]
            elif isinstance(item, dict | list):
                new = _map_parts(item, fn)
            else:
                continue
            if new is not item and any(a is not b for a, b in _pairs(new, item)):
                changed = dict(mapping) if changed is None else changed
                changed[key] = new
        return mapping if changed is None else changed
    if isinstance(value, list):
        items = cast("list[Any]", value)
        mapped = [_map_parts(item, fn) for item in items]
        return items if all(a is b for a, b in zip(mapped, items, strict=True)) else mapped
    return value


def _pairs(new: Any, old: Any) -> list[tuple[Any, Any]]:
    if isinstance(new, list) and isinstance(old, list):
        return list(zip(cast("list[Any]", new), cast("list[Any]", old), strict=True))
    return [(new, old)]
