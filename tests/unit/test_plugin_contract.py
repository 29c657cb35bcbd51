"""The plugin contract without a server: loading and the start-up refusals, plugin-owned tables and
their guard, and the fan-out of gates and compaction listeners (the seed's pinned cases)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from harness_core.agents.turn import TextPart, TurnMessage
from harness_core.config import settings_from_mapping
from harness_core.errors import ConfigError
from harness_core.harness import Harness
from harness_core.plugins import (
    PLUGIN_CONTRACT_VERSION,
    Plugin,
    PluginContext,
    PluginError,
    PluginStore,
    PluginTables,
    load_plugins,
)
from harness_core.plugins.runtime import AgentPlugins
from harness_core.store import TaskStore

SECRET_VARIABLE = "HARNESS_TEST_PLUGIN_SECRET"

#: Loaded by path in these tests.
AUDIT = Plugin(key="audit")
OTHER_AUDIT = Plugin(key="audit", capability="another")


def make_audit() -> Plugin:
    return Plugin(key="audit", capability="Audited.")


def make_nothing() -> object:
    return {"key": "x"}


def settings(tmp_path: Path, **sections: Any):
    data: dict[str, Any] = {"agent": {"id": "a"}}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return settings_from_mapping(data, base_dir=tmp_path)


# -- loading and start-up refusals -----------------------------------------------------------------


def test_plugins_load_from_the_file_and_from_code_in_that_order(tmp_path: Path):
    s = settings(
        tmp_path,
        agent={"plugins": ["tests.unit.test_plugin_contract:make_audit"]},
        plugins={"audit": {"level": 2}},
    )
    loaded = load_plugins(s, [Plugin(key="notes")])
    assert [p.key for p in loaded.plugins] == ["audit", "notes"]
    assert loaded.context("audit").options == {"level": 2}
    assert loaded.context("notes").options == {}
    assert loaded.capabilities() == "Audited."
    assert load_plugins(s.__class__(), [Plugin(key="plain")]).capabilities() == ""


def test_a_key_used_twice_is_refused_naming_both(tmp_path: Path):
    s = settings(tmp_path, agent={"plugins": ["tests.unit.test_plugin_contract:AUDIT"]})
    with pytest.raises(ConfigError) as caught:
        load_plugins(s, [OTHER_AUDIT])
    message = str(caught.value)
    assert "plugin key 'audit' is used twice" in message
    assert "agent.plugins[0] = 'tests.unit.test_plugin_contract:AUDIT'" in message
    assert "Harness(plugins=[...]) item 0" in message


def test_a_plugin_of_another_contract_version_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError) as caught:
        load_plugins(settings(tmp_path), [Plugin(key="future", contract_version=2)])
    message = str(caught.value)
    assert "plugin 'future'" in message
    assert "contract version 2" in message
    assert f"speaks version {PLUGIN_CONTRACT_VERSION}" in message


def test_a_factory_that_does_not_make_a_plugin_is_refused(tmp_path: Path):
    s = settings(tmp_path, agent={"plugins": ["tests.unit.test_plugin_contract:make_nothing"]})
    with pytest.raises(ConfigError, match=r"agent.plugins\[0\].*is a dict, not a"):
        load_plugins(s)


def test_options_for_a_plugin_that_is_not_loaded_are_refused(tmp_path: Path):
    s = settings(tmp_path, plugins={"notez": {"x": 1}})
    with pytest.raises(ConfigError, match=r"\[plugins.notez\] holds options for a plugin 'notez'"):
        load_plugins(s, [Plugin(key="notes")])


async def _tool_a() -> str:
    return "a"


async def lookup_order(order_id: int) -> str:
    return str(order_id)


def test_tools_need_the_llm_agent_and_a_name_of_their_own(tmp_path: Path):
    with pytest.raises(ConfigError, match="only the built-in LLM agent calls"):
        load_plugins(settings(tmp_path), [Plugin(key="t", tools=(_tool_a,))])
    llm = settings(tmp_path, model={"kind": "test"})
    with pytest.raises(ConfigError) as caught:
        load_plugins(
            llm, [Plugin(key="one", tools=(_tool_a,)), Plugin(key="two", tools=(_tool_a,))]
        )
    assert "the tool '_tool_a' is given twice" in str(caught.value)
    assert "plugin 'one'" in str(caught.value) and "plugin 'two'" in str(caught.value)
    # A plugin's tool named like one of [model] tools: refused when the model loop is built.
    clash = settings(
        tmp_path, model={"kind": "test", "tools": ["tests.integration.agent_tools:lookup_order"]}
    )
    with pytest.raises(ConfigError, match="of plugin 'shop' has the name of"):
        Harness(clash, plugins=[Plugin(key="shop", tools=(lookup_order,))])


def test_a_missing_or_empty_secret_is_refused_naming_it_and_never_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    loaded = load_plugins(settings(tmp_path), [Plugin(key="vault", secrets=(SECRET_VARIABLE,))])
    monkeypatch.delenv(SECRET_VARIABLE, raising=False)
    with pytest.raises(ConfigError) as caught:
        loaded.check_secrets("a.toml")
    assert str(caught.value) == (
        f"a.toml: environment variable {SECRET_VARIABLE} is not set; plugin 'vault' "
        "(Harness(plugins=[...]) item 0) requires it"
    )
    monkeypatch.setenv(SECRET_VARIABLE, "  ")
    with pytest.raises(ConfigError, match=f"{SECRET_VARIABLE} is empty"):
        loaded.check_secrets("a.toml")
    monkeypatch.setenv(SECRET_VARIABLE, "s3cret-value")
    loaded.check_secrets("a.toml")
    assert loaded.context("vault").secret(SECRET_VARIABLE) == "s3cret-value"
    with pytest.raises(PluginError, match="does not declare"):
        loaded.context("vault").secret("HOME")


# -- plugin-owned tables ----------------------------------------------------------------------------


class Recorder:
    """An ``ensure_tables`` that records the versions it was called from."""

    def __init__(self, statements: Sequence[str] = ()) -> None:
        self.calls: list[int] = []
        self.statements = statements or (
            "CREATE TABLE IF NOT EXISTS notes_items (id INTEGER PRIMARY KEY, text TEXT)",
        )

    def __call__(self, tables: PluginTables, seen: int) -> None:
        self.calls.append(seen)
        for statement in self.statements:
            tables.execute(statement)


def _open(tmp_path: Path, *plugins: Plugin) -> tuple[AgentPlugins, TaskStore]:
    store = TaskStore(tmp_path / "a.sqlite3")
    loaded = load_plugins(settings(tmp_path), plugins)
    loaded.open(store, "a.toml")
    return loaded, store


def _migrations(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT plugin, version, updated_at FROM plugin_migrations").fetchall()


def test_tables_are_set_up_at_every_start_and_the_version_recorded_when_it_changes(
    tmp_path: Path,
):
    setup = Recorder()
    plugin = Plugin(key="notes", store=PluginStore(version=1, ensure_tables=setup))
    _, store = _open(tmp_path, plugin)
    store.close()
    [first] = _migrations(tmp_path / "a.sqlite3")
    assert first[:2] == ("notes", 1)
    _, store = _open(tmp_path, plugin)
    store.close()
    # Called again (idempotent), from the version it left; the row did not change.
    assert setup.calls == [0, 1]
    assert _migrations(tmp_path / "a.sqlite3") == [first]
    upgraded = Recorder(
        (
            "CREATE TABLE IF NOT EXISTS notes_items (id INTEGER PRIMARY KEY, text TEXT)",
            "CREATE INDEX IF NOT EXISTS notes_by_text ON notes_items (text)",
            # A composite key and a unique column: SQLite's own indexes for them.
            "CREATE TABLE IF NOT EXISTS notes_tags (a TEXT, b TEXT UNIQUE, PRIMARY KEY (a, b))",
        )
    )
    plugin_v2 = Plugin(key="notes", store=PluginStore(version=2, ensure_tables=upgraded))
    _, store = _open(tmp_path, plugin_v2)
    store.close()
    assert upgraded.calls == [1]
    [(name, version, _)] = _migrations(tmp_path / "a.sqlite3")
    assert (name, version) == ("notes", 2)


def test_a_downgrade_a_duplicate_store_and_a_version_below_one_are_refused(tmp_path: Path):
    _, store = _open(tmp_path, Plugin(key="notes", store=PluginStore(2, Recorder())))
    store.close()
    with pytest.raises(ConfigError, match="a downgrade is not supported"):
        _open(tmp_path, Plugin(key="notes", store=PluginStore(1, Recorder())))
    with pytest.raises(ConfigError, match="both declare the plugin store 'shared'"):
        load_plugins(
            settings(tmp_path),
            [
                Plugin(key="one", store=PluginStore(1, Recorder(), name="shared")),
                Plugin(key="two", store=PluginStore(1, Recorder(), name="shared")),
            ],
        )
    with pytest.raises(ConfigError, match="must be an integer >= 1, not 0"):
        load_plugins(settings(tmp_path), [Plugin(key="zero", store=PluginStore(0, Recorder()))])


def test_a_store_name_that_would_reach_the_runtimes_tables_is_refused(tmp_path: Path):
    with pytest.raises(ConfigError, match="would reach the runtime's table 'task_participants'"):
        load_plugins(settings(tmp_path), [Plugin(key="task", store=PluginStore(1, Recorder()))])
    # Every table of the runtime's schema counts, the newest too.
    with pytest.raises(ConfigError, match="would reach the runtime's table 'workspace_files'"):
        load_plugins(
            settings(tmp_path), [Plugin(key="workspace", store=PluginStore(1, Recorder()))]
        )


def test_an_async_setup_and_a_handle_kept_past_its_transaction_are_refused(tmp_path: Path):
    async def later(tables: PluginTables, seen: int) -> None:
        tables.execute("CREATE TABLE notes_items (x)")

    with pytest.raises(ConfigError, match="its ensure_tables is async"):
        _open(tmp_path, Plugin(key="notes", store=PluginStore(1, later)))  # pyright: ignore[reportArgumentType]
    kept: list[PluginTables] = []
    _, store = _open(
        tmp_path, Plugin(key="notes", store=PluginStore(1, lambda t, _: kept.append(t)))
    )
    with pytest.raises(PluginError, match="used after its transaction ended"):
        kept[0].query("SELECT count(*) FROM notes_items")
    store.close()


def test_a_setup_that_raises_keeps_nothing_and_stops_the_start(tmp_path: Path):
    failing = Recorder(
        (
            "CREATE TABLE notes_items (id INTEGER PRIMARY KEY)",
            "CREATE TABLE notes_items (id INTEGER PRIMARY KEY)",
        )
    )
    with pytest.raises(ConfigError, match=r"setting up its tables .* raised OperationalError"):
        _open(tmp_path, Plugin(key="notes", store=PluginStore(1, failing)))
    with sqlite3.connect(tmp_path / "a.sqlite3") as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert "notes_items" not in names
        assert db.execute("SELECT count(*) FROM plugin_migrations").fetchone() == (0,)


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM task_messages",
        "SELECT * FROM push_tokens",
        "DELETE FROM task_index",
        "CREATE TABLE stolen (x)",
        "CREATE INDEX notes_x ON tasks (task_id)",
        "PRAGMA user_version = 99",
        "ATTACH DATABASE ':memory:' AS other",
        "CREATE TRIGGER notes_t AFTER INSERT ON notes_items BEGIN DELETE FROM tasks; END",
        "COMMIT",
    ],
)
def test_plugin_statements_are_confined_to_its_own_tables(tmp_path: Path, statement: str):
    setup = Recorder(("CREATE TABLE IF NOT EXISTS notes_items (id INTEGER PRIMARY KEY)", statement))
    with pytest.raises(ConfigError, match="may use only its own tables and indexes"):
        _open(tmp_path, Plugin(key="notes", store=PluginStore(1, setup)))
    # The runtime's own statements are not confined afterwards.
    store = TaskStore(tmp_path / "a.sqlite3")
    assert store.get_meta("missing") is None
    store.close()


@pytest.mark.anyio
async def test_plugin_tables_are_reached_only_from_activities(tmp_path: Path):
    loaded, store = _open(tmp_path, Plugin(key="notes", store=PluginStore(1, Recorder())))
    db = loaded.context("notes").db
    assert db is not None and db.prefix == "notes_"
    with pytest.raises(PluginError, match="from its tools and hooks only"):
        await db.query("SELECT count(*) FROM notes_items")
    store.close()


# -- hooks -------------------------------------------------------------------------------------------


def _history(text: str) -> tuple[TurnMessage, ...]:
    return (TurnMessage(message_id="m1", role="user", parts=(TextPart(text),)),)


def _gate(answer: bool | Exception, seen: list[str]):
    async def gate(ctx: PluginContext, history: Sequence[TurnMessage]) -> bool:
        seen.append(ctx.key)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return gate


@pytest.mark.anyio
async def test_gates_are_all_asked_and_anded_and_a_failing_one_says_yes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    seen: list[str] = []
    none = load_plugins(settings(tmp_path), [Plugin(key="plain")])
    assert await none.gate(_history("hi"), task_id="t", context_id="c") == ()
    plugins = load_plugins(
        settings(tmp_path),
        [
            Plugin(key="yes", gate=_gate(True, seen)),
            Plugin(key="broken", gate=_gate(RuntimeError("down"), seen)),
            Plugin(key="no", gate=_gate(False, seen)),
            Plugin(key="also-no", gate=_gate(False, seen)),
        ],
    )
    with caplog.at_level(logging.WARNING, logger="harness.plugins"):
        declined = await plugins.gate(_history("hi"), task_id="t1", context_id="c")
    assert declined == ("no", "also-no")
    assert sorted(seen) == ["also-no", "broken", "no", "yes"]
    [warning] = [r.getMessage() for r in caplog.records]
    assert "turn gate of plugin broken raised RuntimeError" in warning
    assert "down" not in warning
    failing_only = load_plugins(
        settings(tmp_path), [Plugin(key="broken", gate=_gate(ValueError("x"), seen))]
    )
    assert await failing_only.gate(_history("hi"), task_id="t", context_id="c") == ()

    def throws_at_once(ctx: PluginContext, history: Sequence[TurnMessage]) -> Any:
        raise RuntimeError("before any await")

    # A gate that throws before it awaits anything fails open too, and a later gate still says no.
    sync = load_plugins(
        settings(tmp_path),
        [Plugin(key="sync", gate=throws_at_once), Plugin(key="no", gate=_gate(False, seen))],
    )
    assert await sync.gate(_history("hi"), task_id="t", context_id="c") == ("no",)


@pytest.mark.anyio
async def test_every_listener_hears_a_compaction_even_when_one_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    heard: dict[str, list[str]] = {}

    def listener(key: str, fail: bool):
        async def on_displaced(ctx: PluginContext, messages: Sequence[TurnMessage]) -> None:
            if fail:
                raise OSError("side store down")
            heard[key] = [m.message_id for m in messages]

        return on_displaced

    plugins = load_plugins(
        settings(tmp_path),
        [
            Plugin(key="first", on_displaced=listener("first", True)),
            Plugin(key="second", on_displaced=listener("second", False)),
            Plugin(key="deaf"),
        ],
    )
    assert plugins.listens
    older = TurnMessage(message_id="m2", role="agent", parts=(TextPart("older answer"),))
    messages = (*_history("old"), older)
    with caplog.at_level(logging.ERROR, logger="harness.plugins"):
        await plugins.displaced(messages, task_id="t", context_id="c")
    assert heard == {"second": ["m1", "m2"]}
    assert [
        "compaction listener of plugin first raised OSError" in r.getMessage()
        for r in caplog.records
    ] == [True]
    assert not load_plugins(settings(tmp_path), [Plugin(key="deaf")]).listens
    # No listeners: nothing to tell, and nothing fails.
    await load_plugins(settings(tmp_path), [Plugin(key="deaf")]).displaced(
        messages, task_id="t", context_id="c"
    )

    def throws_at_once(ctx: PluginContext, messages: Sequence[TurnMessage]) -> Any:
        raise RuntimeError("before any await")

    heard.clear()
    sync = load_plugins(
        settings(tmp_path),
        [
            Plugin(key="sync", on_displaced=throws_at_once),
            Plugin(key="second", on_displaced=listener("second", False)),
        ],
    )
    await sync.displaced(messages, task_id="t", context_id="c")
    assert heard == {"second": ["m1", "m2"]}


def test_two_workspace_backings_are_refused_naming_both(tmp_path: Path):
    from tests.unit.test_workspace_caps import MemoryBacking

    llm = settings(tmp_path, model={"kind": "test"})
    one, two = MemoryBacking(), MemoryBacking()
    loaded = load_plugins(llm, [Plugin(key="one", workspace=one)])
    assert loaded.workspace() is one
    with pytest.raises(ConfigError) as caught:
        load_plugins(llm, [Plugin(key="one", workspace=one), Plugin(key="two", workspace=two)])
    assert str(caught.value) == (
        "<settings>: plugin 'one' (Harness(plugins=[...]) item 0) and plugin 'two' "
        "(Harness(plugins=[...]) item 1) both supply a workspace backing; at most one plugin of "
        "an agent may"
    )
    with pytest.raises(ConfigError, match="workspace backing, which only the built-in LLM agent"):
        load_plugins(settings(tmp_path), [Plugin(key="one", workspace=one)])
    with pytest.raises(ConfigError, match=r"'model\.workspace' is only used when model\.kind"):
        settings(tmp_path, model={"workspace": True})


def test_one_plugin_at_most_summarizes_and_its_context_is_its_own(tmp_path: Path):
    async def summarize(ctx: PluginContext, previous: str | None, messages: Any) -> str:
        return f"{ctx.key}:{ctx.task_id}:{previous}:{len(messages)}"

    one = Plugin(key="one", summarize=summarize)
    loaded = load_plugins(settings(tmp_path), [one, Plugin(key="two")])
    made = loaded.summarizer()
    assert made is not None
    assert anyio.run(lambda: made("before", [1, 2], task_id="t1", context_id="c")) == (
        "one:t1:before:2"
    )
    assert load_plugins(settings(tmp_path), [Plugin(key="two")]).summarizer() is None
    with pytest.raises(ConfigError, match="both summarize compactions"):
        load_plugins(settings(tmp_path), [one, Plugin(key="two", summarize=summarize)])


@pytest.mark.parametrize(
    ("statement", "what"),
    [
        ("SELECT * FROM task_messages", "'task_messages'"),
        ("ALTER TABLE tasks ADD COLUMN y", "'tasks'"),
        ("PRAGMA user_version = 99", "a pragma"),
        ("COMMIT", "a transaction"),
    ],
)
def test_a_refusal_says_what_the_statement_touched(tmp_path: Path, statement: str, what: str):
    setup = Recorder(("CREATE TABLE IF NOT EXISTS notes_items (id INTEGER PRIMARY KEY)", statement))
    with pytest.raises(ConfigError, match=f"a statement touching {what} was refused"):
        _open(tmp_path, Plugin(key="notes", store=PluginStore(1, setup)))
