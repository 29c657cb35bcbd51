"""The values the store keeps, as they go into rows and come out of them.

Bodies are compact JSON (``dumps``); a message's content has a digest (``content_digest``) that a
retry shares; a row of the listing index reads as an :class:`IndexRow`; times in the index are
microseconds since the epoch (``parse_timestamp``, ``status_micros``, ``now_micros``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import attrs

from harness_core.converter import payload_converter
from harness_core.payloads import ProtoJSON, TaskRecord

__all__ = [
    "ROW_COLUMNS",
    "IndexRow",
    "content_digest",
    "dumps",
    "index_row_from",
    "now_micros",
    "parse_timestamp",
    "record_from_json",
    "status_micros",
]


def content_digest(message: Mapping[str, Any]) -> str:
    """A digest of a message's content (its parts, large ones by reference): a retry has the same."""
    parts = json.dumps(message.get("parts") or [], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(parts.encode()).hexdigest()[:32]


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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


ROW_COLUMNS = (
    "task_id, context_id, agent_id, status, status_at, seq, messages, closed, busy, written_at"
)


def index_row_from(row: Any, participants: tuple[str, ...]) -> IndexRow:
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


def status_micros(status: Mapping[str, Any]) -> int:
    return parse_timestamp(str(status.get("timestamp", ""))) or 0


def now_micros() -> int:
    return int(time.time() * 1_000_000)


def record_from_json(data: str) -> TaskRecord:
    return payload_converter.structure(json.loads(data), TaskRecord)
