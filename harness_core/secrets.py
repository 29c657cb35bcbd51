"""The process-wide registry of secret values, and masking them out of text and JSON-like data.

Several agents share one process, one root logger and possibly one store, so masking cannot be per
agent: a log line written for agent ``a`` must mask agent ``b``'s key too. Every agent registers its
secrets (API keys, tokens) under its own id in :data:`SECRETS`, and the log formatters
(:mod:`harness_core.logs`) and anything that persists messages pass their output through it.

Masking is thread-safe: activities run in worker threads and logging happens from any thread.
Changes take a lock and publish an immutable snapshot (the values and one compiled pattern); masking
reads that snapshot with a single attribute read and never takes the lock.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import TypeVar, cast

import attrs

__all__ = ["MASK", "MIN_SECRET_LENGTH", "SECRETS", "SecretRegistry"]

MASK = "[redacted]"
"""What a secret value is replaced with."""

T = TypeVar("T")

MIN_SECRET_LENGTH = 4
"""Shorter values are not registered: masking every ``"a"`` or ``"01"`` would garble all output."""


@attrs.frozen
class _Snapshot:
    """What masking reads: the registered values, and a pattern that finds them (None if none)."""

    version: int
    values: frozenset[str]
    pattern: re.Pattern[str] | None


def _compile(values: frozenset[str]) -> re.Pattern[str] | None:
    if not values:
        return None
    # Longest first: at one position the alternation takes the first alternative that matches, so a
    # value that contains another is found whole. The lookahead makes the match zero-width, so
    # ``finditer`` reports a match at every position where a value starts, overlapping ones included.
    ordered = sorted(values, key=lambda value: (-len(value), value))
    return re.compile("(?=(" + "|".join(re.escape(value) for value in ordered) + "))")


def _mask(pattern: re.Pattern[str], text: str) -> str:
    # Mask the union of all matches, so two overlapping secrets ("abcdef", "defghi" in "abcdefghi")
    # leave no tail of either one; a plain ``pattern.sub`` would leave "ghi" behind.
    spans: list[list[int]] = []
    for match in pattern.finditer(text):
        start, end = match.span(1)
        if spans and start < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    if not spans:
        return text
    pieces: list[str] = []
    position = 0
    for start, end in spans:
        pieces.append(text[position:start])
        pieces.append(MASK)
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


class SecretRegistry:
    """Secret values by owner (an agent id, usually), masked together wherever any of them appears."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_owner: dict[str, frozenset[str]] = {}
        self._snapshot = _Snapshot(version=0, values=frozenset(), pattern=None)

    def register(self, owner: str, values: Iterable[str]) -> None:
        """Make ``values`` the secrets of ``owner``, replacing the ones it registered before.

        Empty values and values shorter than :data:`MIN_SECRET_LENGTH` are ignored.
        """
        kept = frozenset(value for value in values if len(value) >= MIN_SECRET_LENGTH)
        with self._lock:
            if kept:
                self._by_owner[owner] = kept
            else:
                self._by_owner.pop(owner, None)
            self._publish()

    def unregister(self, owner: str) -> None:
        """Forget the secrets of ``owner`` (an owner that registered nothing is ignored)."""
        with self._lock:
            if self._by_owner.pop(owner, None) is not None:
                self._publish()

    def _publish(self) -> None:
        # Called with the lock held. Compiling here, not lazily in redact(), keeps redact() lock-free:
        # changes are rare (an agent starting or stopping), masking happens on every log line.
        values = frozenset[str]().union(*self._by_owner.values())
        self._snapshot = _Snapshot(
            version=self._snapshot.version + 1, values=values, pattern=_compile(values)
        )

    @property
    def version(self) -> int:
        """A number that grows on every change, so callers can tell a cached masking is stale."""
        return self._snapshot.version

    def values(self) -> frozenset[str]:
        """Every registered value, of every owner."""
        return self._snapshot.values

    def redact(self, text: str) -> str:
        """``text`` with every registered value, of every owner, replaced by :data:`MASK`.

        Returns ``text`` itself when nothing is registered or nothing matches.
        """
        pattern = self._snapshot.pattern
        if pattern is None:
            return text
        return _mask(pattern, text)

    def redact_json(self, value: object) -> object:
        """JSON-like data (dicts, lists, tuples, scalars) with every string masked, as a copy; the
        input is never changed. Returns ``value`` itself when nothing is registered (the send path
        pays nothing then).

        Dict keys are masked too; two keys that both mask to :data:`MASK` collapse into one (the
        later one wins). Values of other types are returned as they are, not copied.
        """
        pattern = self._snapshot.pattern
        if pattern is None:
            return value

        def walk(item: object) -> object:
            if isinstance(item, str):
                return _mask(pattern, item)
            if isinstance(item, dict):
                mapping = cast("dict[object, object]", item)
                return {walk(key): walk(child) for key, child in mapping.items()}
            if isinstance(item, list):
                return [walk(child) for child in cast("list[object]", item)]
            if isinstance(item, tuple):
                return tuple(walk(child) for child in cast("tuple[object, ...]", item))
            return item

        return walk(value)

    def redact_attrs(self, value: T) -> T:
        """A Temporal payload (an attrs value) with every string in it masked; ``value`` itself when
        nothing is registered or nothing matches."""
        if self._snapshot.pattern is None:
            return value
        from harness_core.converter import payload_converter

        raw = payload_converter.unstructure(value)
        masked = self.redact_json(raw)
        if masked == raw:
            return value
        return payload_converter.structure(masked, type(value))


SECRETS = SecretRegistry()
"""The registry of this process; every agent registers its secrets here."""
