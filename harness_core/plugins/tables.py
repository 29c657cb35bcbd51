"""Plugin-owned tables in the agent's store, and the narrow handle plugin code reaches them through.

The runtime's own tables have their own versions (``harness_core.store.schema``); a plugin's tables
are outside them, versioned per plugin in ``plugin_migrations`` (plugin, version, updated_at). At
every start, for each plugin with a :class:`~harness_core.plugins.contract.PluginStore`, the store
reads the version it last saw (0 the first time), refuses a downgrade, calls
``ensure_tables(tables, last_seen_version)`` and records the new version when it changed, all in one
transaction: a setup that raises leaves nothing behind and stops the start.

Every statement of a plugin runs under a SQLite authorizer that lets it touch only tables and
indexes named ``<name>_...`` (its store's name): a guard against a plugin reading or changing the
tasks, messages or push tokens by mistake, not a sandbox (plugin code is Python in the agent's
process). Transactions are the handle's: a plugin's statements cannot begin or commit one, attach a
database, run a pragma, or create triggers and views.
"""

from __future__ import annotations

import inspect
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from temporalio import activity

from harness_core.errors import ConfigError
from harness_core.plugins.contract import PluginError, TableSetup
from harness_core.store.schema import SCHEMA

if TYPE_CHECKING:
    from harness_core.store import TaskStore

__all__ = ["PluginDb", "PluginTables", "StoreEntry", "ensure_plugin_tables"]

T = TypeVar("T")

#: Tables SQLite itself reads and writes while a plugin creates or alters its own.
_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_sequence", "sqlite_stat1"})
#: The runtime's own tables: no plugin store's prefix may reach them.
_RUNTIME_TABLES = (
    *re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA),
    "plugin_migrations",
)
_STORE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")

_MIGRATIONS = """
CREATE TABLE IF NOT EXISTS plugin_migrations (
    plugin TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    updated_at TEXT NOT NULL
)
"""


class _Guard:
    """The authorizer of a plugin's statements: its own tables and indexes, nothing else. It
    remembers that it refused something (SQLite's error wording differs by action)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.refused = False
        #: What the latest refusal was about: a table, an index, or the kind of statement.
        self.what = ""

    def __call__(self, action: int, arg1: str | None, arg2: str | None, *_: object) -> int:
        verdict = _verdict(self.prefix, action, arg1, arg2)
        if verdict != sqlite3.SQLITE_OK:
            self.refused = True
            named = (arg2,) if action == sqlite3.SQLITE_ALTER_TABLE else (arg1, arg2)
            names = [n for n in named if n and not n.startswith(self.prefix)]
            if action in _ON_TABLES and names:
                self.what = f"'{names[0]}'"
            else:
                self.what = _ACTIONS.get(action, "a statement of its kind")
        return verdict


_ON_TABLES = frozenset(
    {
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_INSERT,
        sqlite3.SQLITE_UPDATE,
        sqlite3.SQLITE_DELETE,
        sqlite3.SQLITE_CREATE_TABLE,
        sqlite3.SQLITE_DROP_TABLE,
        sqlite3.SQLITE_CREATE_INDEX,
        sqlite3.SQLITE_DROP_INDEX,
        sqlite3.SQLITE_ALTER_TABLE,
        sqlite3.SQLITE_REINDEX,
        sqlite3.SQLITE_ANALYZE,
    }
)
_ACTIONS = {
    sqlite3.SQLITE_CREATE_TRIGGER: "a trigger",
    sqlite3.SQLITE_CREATE_VIEW: "a view",
    sqlite3.SQLITE_TRANSACTION: "a transaction",
    sqlite3.SQLITE_SAVEPOINT: "a savepoint",
    sqlite3.SQLITE_PRAGMA: "a pragma",
    sqlite3.SQLITE_ATTACH: "an attached database",
    sqlite3.SQLITE_DETACH: "an attached database",
}


def _verdict(prefix: str, action: int, arg1: str | None, arg2: str | None) -> int:
    def own(*names: str | None) -> int:
        for name in names:
            if not name or name.startswith(prefix) or name.lower() in _SCHEMA_TABLES:
                continue
            # The index SQLite makes for a primary key or a unique constraint of its table.
            if name.startswith(f"sqlite_autoindex_{prefix}"):
                continue
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_ALTER_TABLE:
        return own(arg2)  # arg1 is the database's name
    if action in (sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_DROP_INDEX):
        return own(arg1, arg2)
    if action in _ON_TABLES:
        return own(arg1)
    # Transactions, savepoints, pragmas, attach/detach, triggers, views, temporary and virtual
    # tables: the handle's business, or a way around the guard.
    return sqlite3.SQLITE_DENY


class PluginTables:
    """A plugin's statements inside one transaction, confined to its own tables (synchronous)."""

    def __init__(self, db: sqlite3.Connection, key: str, guard: _Guard) -> None:
        self._db = db
        self._key = key
        self._prefix = guard.prefix
        self._guard = guard
        self._closed = False

    @property
    def prefix(self) -> str:
        """What the plugin's tables and indexes must be named with: ``<store name>_``."""
        return self._prefix

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed (-1 for DDL)."""
        return self._run(lambda: self._db.execute(sql, params).rowcount)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run one statement for each row of parameters; the rows changed in all."""
        return self._run(lambda: self._db.executemany(sql, rows).rowcount)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one query."""
        return self._run(lambda: [tuple(row) for row in self._db.execute(sql, params).fetchall()])

    def close(self) -> None:
        """The transaction is over: later statements through this handle are refused."""
        self._closed = True

    def _run(self, work: Callable[[], T]) -> T:
        if self._closed:
            raise PluginError(
                f"plugin {self._key!r}: its tables handle is used after its transaction ended "
                "(keep it only inside the function it was given to)"
            )
        try:
            return work()
        except sqlite3.DatabaseError:
            if self._guard.refused:
                raise PluginError(
                    f"plugin {self._key!r}: a statement touching {self._guard.what} was "
                    "refused: plugin code may use only "
                    f"its own tables and indexes (named {self._prefix}...), without "
                    "transactions, pragmas, attached databases, triggers or views"
                ) from None
            raise


def _confined(store: TaskStore, key: str, prefix: str, work: Callable[[PluginTables], T]) -> T:
    with store.exclusive() as db:
        guard = _Guard(prefix)
        tables = PluginTables(db, key, guard)
        db.set_authorizer(guard)
        try:
            return work(tables)
        finally:
            tables.close()
            db.set_authorizer(None)


class PluginDb:
    """A plugin's tables, from its tools and hooks: in activities only, each call in a transaction
    of its own, run in a worker thread."""

    def __init__(self, store: TaskStore, key: str, name: str) -> None:
        self._store = store
        self._key = key
        self._prefix = f"{name}_"

    @property
    def prefix(self) -> str:
        """What the plugin's tables and indexes are named with: ``<store name>_``."""
        return self._prefix

    async def run(self, work: Callable[[PluginTables], T]) -> T:
        """``work(tables)`` in one transaction: what it returns, or what it raises (then
        nothing it did is kept)."""
        if not activity.in_activity():
            raise PluginError(
                f"plugin {self._key!r}: its tables are reached from its tools and hooks only "
                "(they run in activities; workflow code must not do I/O)"
            )
        result: T = await anyio.to_thread.run_sync(
            partial(_confined, self._store, self._key, self._prefix, work)
        )
        return result

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """One statement in a transaction of its own; the rows it changed."""
        return await self.run(lambda tables: tables.execute(sql, params))

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one query."""
        return await self.run(lambda tables: tables.query(sql, params))


class StoreEntry:
    """One plugin store as the start sees it: its plugin, name, version and setup."""

    def __init__(self, key: str, name: str, version: int, setup: TableSetup) -> None:
        self.key = key
        self.name = name
        self.version = version
        self.setup = setup


def check_store_entries(entries: Sequence[StoreEntry], label: str) -> None:
    """Refuse, naming the plugins: a store name that is not an identifier, reaches the runtime's
    tables or another store's, and a version that is not an integer of at least 1."""
    for index, entry in enumerate(entries):
        if _STORE_NAME.fullmatch(entry.name) is None:
            raise ConfigError(
                f"{label}: plugin {entry.key!r}: its store name {entry.name!r} must match "
                f"{_STORE_NAME.pattern} (set PluginStore(name=...))"
            )
        prefix = f"{entry.name}_"
        reached = next((t for t in _RUNTIME_TABLES if t.startswith(prefix)), None)
        if reached is not None or entry.name in _RUNTIME_TABLES:
            raise ConfigError(
                f"{label}: plugin {entry.key!r}: its store name {entry.name!r} would reach the "
                f"runtime's table {reached or entry.name!r}; choose another (PluginStore(name=...))"
            )
        version = entry.version
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigError(
                f"{label}: plugin {entry.key!r}: its store's version must be an integer >= 1, "
                f"not {version!r}"
            )
        for other in entries[:index]:
            if other.name == entry.name:
                raise ConfigError(
                    f"{label}: plugins {other.key!r} and {entry.key!r} both declare the plugin "
                    f"store {entry.name!r}; each store needs a name of its own"
                )
            if prefix.startswith(f"{other.name}_") or f"{other.name}_".startswith(prefix):
                raise ConfigError(
                    f"{label}: the plugin stores {other.name!r} (plugin {other.key!r}) and "
                    f"{entry.name!r} (plugin {entry.key!r}) overlap: one's tables would be named "
                    "like the other's; rename one"
                )


def ensure_plugin_tables(store: TaskStore, entries: Sequence[StoreEntry], *, label: str) -> None:
    """Bring every plugin store's tables to its version (see the module's docstring).

    Raises :class:`ConfigError` naming the plugin for a downgrade or a setup that raised (and for
    what :func:`check_store_entries` refuses).
    """
    check_store_entries(entries, label)
    if not entries:
        return
    if store.postgres:
        names = ", ".join(repr(entry.key) for entry in entries)
        raise ConfigError(
            f"{label}: plugin {names} keeps tables of its own, which need the SQLite store for "
            "now ([store] url names PostgreSQL)"
        )
    with store.exclusive() as db:
        db.execute(_MIGRATIONS)
    for entry in entries:
        _ensure_one(store, entry, label)


def _ensure_one(store: TaskStore, entry: StoreEntry, label: str) -> None:
    prefix = f"{entry.name}_"
    with store.exclusive() as db:
        row = db.execute(
            "SELECT version FROM plugin_migrations WHERE plugin = ?", (entry.name,)
        ).fetchone()
        seen = int(row[0]) if row is not None else 0
        if seen > entry.version:
            raise ConfigError(
                f"{label}: plugin {entry.key!r}: its store {entry.name!r} is at version {seen}, "
                f"and the plugin's code needs version {entry.version}: a downgrade is not "
                "supported (run the newer plugin, or restore the store)"
            )
        guard = _Guard(prefix)
        tables = PluginTables(db, entry.key, guard)
        db.set_authorizer(guard)
        try:
            made = entry.setup(tables, seen)
            if inspect.isawaitable(made):
                close = getattr(made, "close", None)
                if callable(close):
                    close()  # never awaited: say so instead of a RuntimeWarning
                raise ConfigError(
                    f"{label}: plugin {entry.key!r}: its ensure_tables is async; it must be a "
                    "plain function (it runs in a worker thread, in the store's transaction)"
                )
        except ConfigError:
            raise
        except PluginError as error:
            raise ConfigError(f"{label}: {error}") from None
        except Exception as error:
            raise ConfigError(
                f"{label}: plugin {entry.key!r}: setting up its tables (from version {seen} to "
                f"{entry.version}) raised {type(error).__name__}: {error}"
            ) from error
        finally:
            tables.close()
            db.set_authorizer(None)
        if seen != entry.version:
            db.execute(
                "INSERT INTO plugin_migrations (plugin, version, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (plugin) DO UPDATE SET version = excluded.version, "
                "updated_at = excluded.updated_at",
                (entry.name, entry.version, datetime.now(UTC).isoformat()),
            )
