"""Plugins on a running agent (both backends): a plugin named in the agent's configuration adds a
table, a tool and a capability line to the built-in LLM agent and a gate before each turn; its data
survives a restart; a declined turn leaves the task as it was and says why; a missing secret stops
the start before any worker runs. Real dev server, real HTTP, the real a2a-sdk client; the model is a
fake Chat Completions server on loopback."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from a2a.types import GetTaskRequest, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict

from harness_core.agents.turn import Complete
from harness_core.errors import ConfigError
from harness_core.plugins import Plugin, PluginStore
from tests.conftest import a2a_client, serving, user_message
from tests.fakes.model_servers import FakeServer, serve_fake_openai, text_reply, tool_call_reply
from tests.integration import plugin_notes
from tests.integration.test_a2a_methods import collect, send_blocking

pytestmark = pytest.mark.anyio

NOTES = "tests.integration.plugin_notes:make"


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with serve_fake_openai() as fake:
        yield fake


def llm(server: FakeServer) -> dict[str, Any]:
    return {
        "kind": "openai",
        "name": "test-model",
        "base_url": server.base_url,
        "system": "You are the desk.",
        "tools": ["tests.integration.agent_tools:lookup_order"],
    }


def _notes(path: Any) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT task_id, text FROM notes_items ORDER BY id").fetchall()


async def test_a_plugin_adds_a_table_a_tool_a_capability_and_a_gate_and_keeps_its_data(
    make_harness, server: FakeServer
):
    agent = {"plugins": [NOTES]}
    options = {"notes": {"silent_word": "shh"}}
    harness = make_harness(model=llm(server), agent=agent, plugins=options)
    setups = len(plugin_notes.SETUPS)
    server.push(tool_call_reply("remember", {"text": "buy milk"}), text_reply("Noted."))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("please remember: buy milk"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.status.message.parts[0].text == "Noted."
        asked = len(server.requests)
        # The gate declines (the option's word): no model request, the task as it was.
        quiet = await send_blocking(client, user_message("shh, not for you"))
        assert len(server.requests) == asked
        assert quiet.status.state == TaskState.TASK_STATE_SUBMITTED
        assert not quiet.status.HasField("message")
        assert MessageToDict(quiet.metadata) == {
            "harness.declined": {"turn": 1.0, "plugins": ["notes"]}
        }
        read = await client.get_task(GetTaskRequest(id=quiet.id))
        assert read.status.state == TaskState.TASK_STATE_SUBMITTED
        assert "harness.declined" in MessageToDict(read.metadata)
    first = server.requests[0].body
    system = first["messages"][0]
    assert system["role"] == "system"
    assert system["content"] == f"You are the desk.\n\n{plugin_notes.CAPABILITY}"
    assert {t["function"]["name"] for t in first["tools"]} == {"lookup_order", "remember"}
    assert _notes(harness.settings.store_path) == [(task.id, "buy milk")]
    assert (task.id, "please remember: buy milk") in plugin_notes.GATED
    assert plugin_notes.SETUPS[setups:] == [0]

    # A restart: the tables are set up again from the version they are at, and the note is there.
    again = make_harness(model=llm(server), agent=agent, plugins=options, agent_id=harness.agent_id)
    server.push(tool_call_reply("remember", {"text": "eggs"}), text_reply("Noted too."))
    async with serving(again) as url, a2a_client(url, streaming=False) as client:
        task2 = await send_blocking(client, user_message("and eggs"))
    assert task2.status.state == TaskState.TASK_STATE_COMPLETED
    assert plugin_notes.SETUPS[setups:] == [0, 1]
    assert _notes(harness.settings.store_path) == [(task.id, "buy milk"), (task2.id, "eggs")]
    tool_result = server.requests[-1].body["messages"][-1]
    assert tool_result["role"] == "tool"
    assert tool_result["content"] == "noted; 2 note(s) kept"


class Counter:
    """A turn agent that counts its turns (a gate decides whether it is asked at all)."""

    def __init__(self) -> None:
        self.turns = 0

    async def turn(self, ctx: Any) -> Complete:
        self.turns += 1
        return Complete(f"turn {self.turns}")


async def test_a_declined_turn_ends_a_stream_and_the_next_message_is_answered(make_harness):
    counter = Counter()

    async def gate(ctx: Any, history: Any) -> bool:
        return "hush" not in json.dumps([p.text for p in history[-1].parts])

    plugin = Plugin(key="quiet", gate=gate)
    harness = make_harness(counter, options={"plugins": [plugin]})
    async with serving(harness) as url, a2a_client(url) as client:
        events = await collect(
            client.send_message(SendMessageRequest(message=user_message("hush")))
        )
        task_id = events[0].task.id
        states = [e.status_update.status.state for e in events if e.HasField("status_update")]
        assert states[-1] == TaskState.TASK_STATE_SUBMITTED
        last = [e.status_update for e in events if e.HasField("status_update")][-1]
        assert MessageToDict(last.metadata)["harness.declined"]["plugins"] == ["quiet"]
        assert counter.turns == 0
        answered = await collect(
            client.send_message(
                SendMessageRequest(message=user_message("now then", task_id=task_id))
            )
        )
    final = [e.status_update for e in answered if e.HasField("status_update")][-1]
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert "harness.declined" not in MessageToDict(final.metadata)
    assert counter.turns == 1


async def test_a_missing_plugin_secret_stops_the_start_before_any_worker(
    make_harness, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("HARNESS_TEST_NOTES_KEY", raising=False)
    plugin = Plugin(key="vault", secrets=("HARNESS_TEST_NOTES_KEY",))
    harness = make_harness(options={"plugins": [plugin]})
    with pytest.raises(ConfigError) as caught:
        async with harness:
            pass
    assert "environment variable HARNESS_TEST_NOTES_KEY is not set; plugin 'vault'" in str(
        caught.value
    )
    assert harness.state.value == "failed"
    # Nothing was opened: not even the store.
    assert not harness.settings.store_path.exists()


async def peek() -> str:
    """Look at the runtime's own tasks (which a plugin may not)."""
    from harness_core.plugins import plugin_context

    ctx = plugin_context()
    assert ctx.db is not None
    rows = await ctx.db.query("SELECT count(*) FROM tasks")
    return str(rows)


async def test_a_refused_statement_in_a_tool_fails_the_call_once_and_says_why(
    make_harness, server: FakeServer, caplog: pytest.LogCaptureFixture
):
    nosy = Plugin(
        key="nosy",
        tools=(peek,),
        store=PluginStore(1, lambda tables, seen: None),
    )
    harness = make_harness(model=llm(server), options={"plugins": [nosy]})
    server.push(tool_call_reply("peek", {}), text_reply("Could not look."))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("peek at the tasks"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(server.requests) == 2  # the call was not tried again
    tool = [m for m in server.requests[-1].body["messages"] if m["role"] == "tool"]
    assert "the tool peek failed (PluginError)" in tool[0]["content"]
    said = [r.getMessage() for r in caplog.records if "the tool peek failed" in r.getMessage()]
    assert len(said) == 1
    assert "a statement touching 'tasks' was refused" in said[0]
