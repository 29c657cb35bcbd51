"""The open SQLite file of one agent's store: one connection, shared under a lock.

The store is written by activities (in a worker thread) and read by the HTTP layer (through
``anyio.to_thread``), so one connection is shared under a lock; SQLite in WAL mode lets readers
proceed while a write commits. :class:`StoreConnection` opens the file (mode 0600) with its
tables, and gives the reads a snapshot and the writes a transaction.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Generator
from pathlib import Path

from harness_core.store.schema import SCHEMA

__all__ = ["StoreConnection"]


class StoreConnection:
    """The store's file and its one connection; the base of the reads and the writes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = path
        # SQLite gives the -wal and -shm files the database file's mode: make it 0600 before they
        # exist (and fix side files an older version left readable).
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        for side in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            with contextlib.suppress(FileNotFoundError):
                side.chmod(0o600)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _snapshot(self) -> Generator[None, None, None]:
        """Reads that see one state of the file (a count and its page agree)."""
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    @contextlib.contextmanager
    def exclusive(self) -> Generator[sqlite3.Connection, None, None]:
        """The connection, held under the lock, in a write transaction of its own: for the
        tables of plugins (``harness_core.plugins.tables``), which confine what runs in it."""
        with self._lock, self._transaction():
            yield self._db

    @contextlib.contextmanager
    def _transaction(self) -> Generator[None, None, None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
