"""The open database of one agent's store: a SQLite file (the default) or a PostgreSQL schema.

The store is written by activities (in a worker thread) and read by the HTTP layer (through
``anyio.to_thread``): every call blocks, and runs in a thread, so the same code serves asyncio
and Trio. The SQL is one dialect both databases understand (``?`` placeholders, which the
PostgreSQL session turns into ``%s``; ``INSERT ... ON CONFLICT``); a statement goes through a
:class:`Session`, which one of three context managers hands out:

- ``_read()``: single statements, each its own transaction;
- ``_snapshot()``: several reads that see one state (a count and its page agree);
- ``_write()``: a transaction; an exception rolls it back.

**SQLite**: one connection, shared under a lock; WAL mode lets readers in other processes go on
while a write commits. The file is made mode 0600 with its side files.

**PostgreSQL** (``[store] url``): a pool of connections (psycopg 3's synchronous API, in the same
worker threads), each with the agent's schema first on its ``search_path``, so the SQL names no
schema and several agents share one database without sharing a table. psycopg is an optional
dependency (``pip install 'a2a-harness[postgresql]'``), imported only when a store uses it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from harness_core.errors import ConfigError, StoreUnavailableError

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = [
    "STORE_BUSY_ERRORS",
    "STORE_ERRORS",
    "PostgresLocation",
    "Session",
    "StoreConnection",
    "store_errors",
]


class _Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


@attrs.frozen
class PostgresLocation:
    """Where a PostgreSQL store is: a libpq URL (without a password), the schema that holds the
    agent's tables, the password (from the environment; never in the URL) and the pool's size."""

    url: str
    schema: str
    password: str | None = attrs.field(default=None, repr=False)
    pool_size: int = 8


def store_errors(*, operational: bool = False) -> tuple[type[Exception], ...]:
    """The exceptions a failing database raises: sqlite3's, and psycopg's when it is installed;
    ``operational``: only those of a database that cannot take the statement now (locked, full,
    unreachable), not those of a wrong statement."""
    errors: list[type[Exception]] = [sqlite3.OperationalError if operational else sqlite3.Error]
    with contextlib.suppress(ImportError):
        import psycopg

        errors.append(psycopg.OperationalError if operational else psycopg.Error)
    with contextlib.suppress(ImportError):
        import psycopg_pool

        errors.append(psycopg_pool.PoolTimeout)
    return tuple(errors)


#: What a failing store raises, whichever database it is.
STORE_ERRORS = store_errors()
#: What a store that cannot take a statement now raises (locked, full, unreachable).
STORE_BUSY_ERRORS = store_errors(operational=True)


@functools.lru_cache(maxsize=512)
def _postgres_sql(sql: str) -> str:
    """The statement with psycopg's placeholders (the store's SQL holds no ``%`` or literal ``?``)."""
    return sql.replace("%", "%%").replace("?", "%s")


class Session:
    """Statements on one connection: ``execute`` and ``executemany``, in the store's dialect."""

    def __init__(self, connection: Any, postgres: bool) -> None:
        self._connection = connection
        self.postgres = postgres

    def execute(self, sql: str, args: Sequence[object] = ()) -> _Cursor:
        if self.postgres:
            return self._connection.execute(_postgres_sql(sql), tuple(args))
        return self._connection.execute(sql, tuple(args))

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> None:
        batch = [tuple(row) for row in rows]
        if not batch:
            return
        if self.postgres:
            with self._connection.cursor() as cursor:
                cursor.executemany(_postgres_sql(sql), batch)
        else:
            self._connection.executemany(sql, batch)


class StoreConnection:
    """The store's database and its sessions; the base of the reads and the writes."""

    def __init__(self, location: Path | PostgresLocation) -> None:
        self.location = location
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Connection[Any]] | None = None
        self._db: sqlite3.Connection | None = None
        if isinstance(location, PostgresLocation):
            self._pool = _open_pool(location)
        else:
            self._db = _open_sqlite(location)

    @property
    def postgres(self) -> bool:
        """Whether the store is in PostgreSQL."""
        return self._pool is not None

    @property
    def path(self) -> Path | None:
        """The SQLite file, or None for a PostgreSQL store."""
        return None if isinstance(self.location, PostgresLocation) else self.location

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        else:
            with self._lock:
                assert self._db is not None
                self._db.close()

    @contextlib.contextmanager
    def _read(self) -> Generator[Session, None, None]:
        """A session whose statements each commit on their own."""
        if self._pool is not None:
            with self._pool.connection() as connection:
                yield Session(connection, True)
        else:
            with self._lock:
                yield Session(self._db, False)

    @contextlib.contextmanager
    def _snapshot(self) -> Generator[Session, None, None]:
        """Reads that see one state of the database (a count and its page agree)."""
        begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if self.postgres else "BEGIN"
        with self._read() as session:
            session.execute(begin)
            try:
                yield session
            finally:
                session.execute("COMMIT")

    @contextlib.contextmanager
    def _write(self) -> Generator[Session, None, None]:
        """A write transaction: committed when the block ends, rolled back when it raises."""
        with self._read() as session:
            session.execute("BEGIN" if self.postgres else "BEGIN IMMEDIATE")
            try:
                yield session
            except BaseException:
                session.execute("ROLLBACK")
                raise
            session.execute("COMMIT")

    @contextlib.contextmanager
    def exclusive(self) -> Generator[sqlite3.Connection, None, None]:
        """The SQLite connection, held under the lock, in a write transaction of its own: for the
        tables of plugins (``harness_core.plugins.tables``), which confine what runs in it."""
        if self._db is None:
            raise ConfigError("plugin tables need the SQLite store for now ([store] url is set)")
        with self._write():
            yield self._db


def _open_sqlite(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # SQLite gives the -wal and -shm files the database file's mode: make it 0600 before they
    # exist (and fix side files an older version left readable).
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    for side in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            side.chmod(0o600)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def _open_pool(location: PostgresLocation) -> ConnectionPool[Connection[Any]]:
    try:
        import psycopg
        from psycopg import sql
        from psycopg_pool import ConnectionPool
    except ImportError:
        raise ConfigError(
            "[store] url names PostgreSQL, but psycopg is not installed: "
            "pip install 'a2a-harness[postgresql]'"
        ) from None

    search_path = sql.SQL("SET search_path TO {}").format(sql.Identifier(location.schema))

    def configure(connection: Any) -> None:
        connection.execute(search_path)

    kwargs: dict[str, Any] = {"autocommit": True}
    if location.password is not None:
        kwargs["password"] = location.password
    # One connection first, for an error in a few seconds that says why (the pool would retry
    # for its whole timeout and say only that it timed out).
    try:
        psycopg.connect(location.url, connect_timeout=10, **kwargs).close()
    except psycopg.Error as error:
        raise StoreUnavailableError(
            f"cannot reach the PostgreSQL store at {_server_of(location.url)}: "
            f"{_first_line(error, location.password)} (check [store] url and password_env)"
        ) from None
    pool: ConnectionPool[Connection[Any]] = ConnectionPool(
        location.url,
        kwargs=kwargs,
        min_size=1,
        max_size=location.pool_size,
        configure=configure,
        open=False,
        name=f"harness-store-{location.schema}",
    )
    pool.open(wait=True, timeout=30)
    return pool


def _server_of(url: str) -> str:
    """The URL's host, port and database, without user or password, for error text."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{host}:{parts.port or 5432}{parts.path or '/'}"


def _first_line(error: BaseException, password: str | None) -> str:
    """The server's reason, one line, with the password masked should it appear."""
    text = (str(error).strip().splitlines() or ["the connection failed"])[-1].strip()
    if password:
        text = text.replace(password, "***")
    return text
