"""The LLM agent's task workspace on a running agent (both backends): the model writes, lists and
attaches a file through its tools (each a durable tool call), the file comes back as an artifact of
the answer and stays readable after a restart; a plugin's backing keeps the files instead of the
store. Real dev server, real HTTP, the real a2a-sdk client; a fake Chat Completions server."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from a2a.types import GetTaskRequest, TaskState

from harness_core.plugins import Plugin
from tests.conftest import a2a_client, serving, user_message
from tests.fakes.model_servers import FakeServer, serve_fake_openai, text_reply, tool_call_reply
from tests.integration.test_a2a_methods import send_blocking
from tests.unit.test_workspace_caps import MemoryBacking

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with serve_fake_openai() as fake:
        yield fake


def llm(server: FakeServer, **more: Any) -> dict[str, Any]:
    return {"kind": "openai", "name": "test-model", "base_url": server.base_url, **more}


def script(server: FakeServer) -> None:
    server.push(
        tool_call_reply("workspace_write", {"path": "/notes/plan.md", "content": "step one €"}),
        tool_call_reply("workspace_list", {}),
        tool_call_reply("workspace_attach", {"path": "notes/plan.md"}),
        text_reply("The plan is attached."),
    )


def tool_results(server: FakeServer) -> list[str]:
    last = server.requests[-1].body["messages"]
    return [str(m["content"]) for m in last if m["role"] == "tool"]


async def test_the_model_keeps_a_file_and_attaches_it_to_its_answer(
    make_harness, server: FakeServer
):
    harness = make_harness(model=llm(server, workspace=True))
    script(server)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("write the plan"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    offered = {t["function"]["name"] for t in server.requests[0].body["tools"]}
    assert {"workspace_list", "workspace_read", "workspace_write", "workspace_attach"} <= offered
    assert tool_results(server) == [
        "wrote notes/plan.md (12 bytes)",
        "notes/plan.md (12 bytes)",
        "notes/plan.md is attached to the answer",
    ]
    # The answer's own text is an artifact too (streamed); the file is one of its own.
    [artifact] = [a for a in task.artifacts if a.name == "notes/plan.md"]
    assert artifact.parts[0].text == "step one €"
    assert artifact.parts[0].filename == "plan.md"
    with sqlite3.connect(harness.settings.store_path) as db:
        rows = db.execute("SELECT task_id, path, size FROM workspace_files").fetchall()
    assert rows == [(task.id, "notes/plan.md", 12)]

    again = make_harness(model=llm(server, workspace=True), agent_id=harness.agent_id)
    async with serving(again) as url, a2a_client(url, streaming=False) as client:
        read = await client.get_task(GetTaskRequest(id=task.id))
    assert [a.parts[0].text for a in read.artifacts if a.name == "notes/plan.md"] == ["step one €"]


async def test_a_plugins_backing_keeps_the_files_and_turns_the_workspace_on(
    make_harness, server: FakeServer
):
    shelf = MemoryBacking()
    harness = make_harness(
        model=llm(server), options={"plugins": [Plugin(key="shelf", workspace=shelf)]}
    )
    script(server)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("write the plan"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert shelf.files == {(task.id, "notes/plan.md"): "step one €"}
    with sqlite3.connect(harness.settings.store_path) as db:
        assert db.execute("SELECT count(*) FROM workspace_files").fetchone() == (0,)
    assert [a.parts[0].text for a in task.artifacts if a.name == "notes/plan.md"] == ["step one €"]
