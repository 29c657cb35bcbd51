"""The per-agent SQLite store: each task's archived messages and events, and ended tasks' summaries.

A task's workflow holds only its current run; earlier runs are archived here (``archive``) before it
continues as new, and the last run with the task's summary when it ends (``store_final``). Reads of a
task combine this store with the workflow's tail. Writes are idempotent (rows at absolute positions), so
a retried activity changes nothing.

The store is written by activities (in a worker thread) and read by the HTTP layer (through
``anyio.to_thread``), so one connection is shared under a lock; SQLite in WAL mode lets readers proceed
while a write commits. Every process serving an agent must use the same file.

One class, :class:`TaskStore`, is the store; its parts live in the modules named by what they hold:
``schema`` (the tables and their version), ``connection`` (the open file, its lock, snapshots and
transactions), ``reads`` (records, messages, events, the listing index), ``push_configs`` (webhooks
and push tokens), ``agent_memory`` (the LLM agent's exchanges, folds and workspaces), ``writes``
(``TaskStore`` itself: the write path, the sweep, the migration of older files) and ``rows``
(values to rows and back: ``IndexRow``, digests, timestamps).
"""

from __future__ import annotations

from harness_core.store.rows import IndexRow, content_digest, parse_timestamp
from harness_core.store.writes import TOMBSTONE_SECONDS, TaskStore

__all__ = ["TOMBSTONE_SECONDS", "IndexRow", "TaskStore", "content_digest", "parse_timestamp"]
