"""MCP servers as the LLM agent's tools (both backends): a stdio server the agent runs and a
streamable-HTTP one, each listed at start; every call is a durable tool call with the usual retry
rules (a tool that must not run twice gets a regular activity and one attempt); a failing tool is a
failed call the model sees; a server that cannot start stops the agent's start, or not when it is
optional. Real dev server, real HTTP, the real a2a-sdk client, a real MCP server (tests/fakes); the
model is a fake Chat Completions server."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.types import TaskState

from harness_core.errors import ConfigError
from harness_core.temporal.names import TOOL_CALL
from tests.conftest import a2a_client, free_port, serving, user_message
from tests.fakes.model_servers import FakeServer, serve_fake_openai, text_reply, tool_call_reply
from tests.integration.test_a2a_methods import send_blocking
from tests.integration.test_llm_agent import _history_of, _scheduled_activities
from tests.servers import STARTUP_SECONDS

pytestmark = pytest.mark.anyio

SERVER = str(Path(__file__).parents[1] / "fakes" / "mcp_server.py")


@pytest.fixture
def model() -> Iterator[FakeServer]:
    with serve_fake_openai() as fake:
        yield fake


def llm(model: FakeServer) -> dict[str, Any]:
    return {"kind": "openai", "name": "test-model", "base_url": model.base_url}


def stdio(**more: Any) -> dict[str, Any]:
    return {"id": "tools", "command": sys.executable, "args": [SERVER], **more}


def tool_messages(model: FakeServer) -> list[str]:
    return [str(m["content"]) for m in model.requests[-1].body["messages"] if m["role"] == "tool"]


async def test_a_stdio_servers_tools_are_called_as_durable_tool_calls(
    make_harness, model: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    notes = tmp_path / "notes.txt"
    monkeypatch.setenv("MCP_NOTES", str(notes))
    monkeypatch.setenv("MCP_GREETING", "hello from the agent's environment")
    server = stdio(
        prefix="calc_", env=["MCP_NOTES", "MCP_GREETING"], not_idempotent=["note"], timeout="20s"
    )
    harness = make_harness(model=llm(model), mcp=[server])
    model.push(
        tool_call_reply("calc_add", {"a": 2, "b": 3}),
        tool_call_reply("calc_note", {"text": "remember the milk"}),
        tool_call_reply("calc_whoami", {}),
        tool_call_reply("calc_broken", {}),
        text_reply("Done."),
    )
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("use the tools"))
        history = await _history_of(harness, task.id)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    offered = {t["function"]["name"]: t["function"] for t in model.requests[0].body["tools"]}
    assert set(offered) == {"calc_add", "calc_note", "calc_whoami", "calc_broken"}
    assert offered["calc_add"]["description"] == "Add two whole numbers."
    results = tool_messages(model)
    # The variable reached the server; its value, like every value an MCP server is given from
    # the environment, is a secret, masked wherever it would appear.
    assert results[:3] == ["5", "noted", "[redacted]"]
    assert "the tool calc_broken failed: Error executing tool broken" in results[3]
    assert notes.read_text() == "remember the milk\n"
    # The idempotent calls ran as local activities in the turn's workflow task; the one that
    # must not run twice got a regular activity (a local one reruns with its workflow task).
    assert _scheduled_activities(history) == [TOOL_CALL]


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:  # an external process: polling its port is the only signal
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError("the MCP HTTP server did not start")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)


@pytest.fixture
def http_server() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, SERVER, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)


async def test_a_streamable_http_servers_tools_are_called(
    make_harness, model: FakeServer, http_server: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("HARNESS_TEST_MCP_TOKEN", "mcp-5ecret-token")
    server = {"id": "remote", "url": http_server, "headers": ["X-Token=HARNESS_TEST_MCP_TOKEN"]}
    harness = make_harness(model=llm(model), mcp=[server])
    model.push(tool_call_reply("add", {"a": 40, "b": 2}), text_reply("42."))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("add"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert tool_messages(model) == ["42"]


async def test_a_server_that_cannot_start_stops_the_start_unless_it_is_optional(
    make_harness, model: FakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    missing = {"id": "gone", "command": str(tmp_path / "no-such-program")}
    harness = make_harness(model=llm(model), mcp=[missing])
    with pytest.raises(BaseException) as caught:  # a group on some backends
        async with harness:
            pass
    [error] = _leaves(caught.value)
    assert isinstance(error, ConfigError)
    assert str(error) == (
        f"<settings>: MCP server gone ({missing['command']}) could not be reached: "
        f"FileNotFoundError: [Errno 2] No such file or directory: '{missing['command']}' "
        "(required = true; set required = false to start without it and try again later)"
    )
    assert harness.state.value == "failed"

    optional = make_harness(model=llm(model), mcp=[{**missing, "required": False}])
    model.push(text_reply("No tools today."))
    async with serving(optional) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("hi"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert "tools" not in model.requests[-1].body or not model.requests[-1].body["tools"]
    assert any("MCP server gone" in r.getMessage() for r in caplog.records)
