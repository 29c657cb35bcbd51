"""The mounting examples, served by the real ``hypercorn`` command (asyncio and Trio workers).

Each example is copied to a temporary directory with its configurations pointed at the session's dev
server and a free port, then run exactly as its docstring says.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import TaskState
from google.protobuf.json_format import MessageToDict

from harness_core import Harness, settings_from_mapping
from tests.conftest import a2a_client, free_port, serving, user_message
from tests.fakes.model_servers import serve_fake_openai, text_reply, tool_call_reply
from tests.integration.test_a2a_methods import send_blocking
from tests.servers import STARTUP_SECONDS

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).parents[2] / "examples" / "mounting"


def copy_example(tmp_path: Path, temporal_address: str, port: int, name: str = "mounting") -> Path:
    """A copy of ``examples/<name>`` on a free port and the session's dev server."""
    target = tmp_path / name
    shutil.copytree(
        EXAMPLES.parent / name, target, ignore=shutil.ignore_patterns(".harness", "__pycache__")
    )
    for config in target.glob("*.toml"):
        text = config.read_text().replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        text += f'\n[temporal]\nmode = "remote"\naddress = "{temporal_address}"\n'
        config.write_text(text)
    return target


def _wait_until_serving(process: subprocess.Popen[bytes], log: Path, url: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:  # an external process: polling it is the only signal
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{process.args!r} did not start:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/", timeout=1).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)


@contextmanager
def hypercorn(directory: Path, app: str, port: int, backend: str) -> Iterator[str]:
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "hypercorn", app, "--bind", f"127.0.0.1:{port}"]
    command += ["--worker-class", "trio" if backend == "trio" else "asyncio"]
    log = directory / "hypercorn.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=directory, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ)
        )
    try:
        _wait_until_serving(process, log, url)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()


async def get_json(url: str) -> object:
    async with httpx.AsyncClient() as http:
        return (await http.get(url)).json()


async def ask(url: str) -> str:
    async with a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("hello"))
    return task.history[-1].parts[0].text


async def test_the_starlette_example_serves_two_agents_and_its_own_page(
    tmp_path: Path, temporal_address: str, anyio_backend: str
):
    port = free_port()
    directory = copy_example(tmp_path, temporal_address, port)
    with hypercorn(directory, "starlette_app:app", port, anyio_backend) as url:
        home = await get_json(f"{url}/")
        answers = [await ask(f"{url}/agents/a"), await ask(f"{url}/agents/b")]
    assert home == {"agents": [f"{url}/agents/a", f"{url}/agents/b"]}
    assert answers == ["a here", "b here"]


async def test_the_fastapi_example_serves_the_agent_and_documents_it(
    tmp_path: Path, temporal_address: str, anyio_backend: str
):
    port = free_port()
    directory = copy_example(tmp_path, temporal_address, port)
    with hypercorn(directory, "fastapi_app:app", port, anyio_backend) as url:
        answer = await ask(f"{url}/agents/a")
        openapi = await get_json(f"{url}/openapi.json")
    assert answer == "a here"
    assert isinstance(openapi, dict)
    assert "/agents/a/message:send" in openapi["paths"]


async def test_a_lone_agent_app_starts_its_agent_from_the_hypercorn_lifespan(
    tmp_path: Path, temporal_address: str, anyio_backend: str
):
    port = free_port()
    directory = copy_example(tmp_path, temporal_address, port)
    # single.py serves agent a at the root; its base_url has no path, so its card says so.
    with hypercorn(directory, "single:app", port, anyio_backend) as url:
        card = await get_json(f"{url}/.well-known/agent-card.json")
        answer = await ask(url)
    assert isinstance(card, dict)
    assert card["supportedInterfaces"][0]["url"] == f"{url}/"
    assert answer == "a here"


TOOLS_AGENT = Path(__file__).parents[2] / "examples" / "tools_agent"


async def test_the_tools_agent_example_answers_with_its_tool_through_a_model_server(
    tmp_path: Path, temporal_address: str, monkeypatch: pytest.MonkeyPatch
):
    """The example's own TOML and tool module, its model server replaced by the fake one."""
    monkeypatch.syspath_prepend(str(TOOLS_AGENT.parent))
    data = tomllib.loads((TOOLS_AGENT / "agent.toml").read_text())
    with serve_fake_openai(
        [tool_call_reply("lookup_order", {"order_id": 42}), text_reply("It shipped on Monday.")]
    ) as server:
        data["model"]["base_url"] = server.base_url
        data["server"]["bind"] = "127.0.0.1:0"
        data["temporal"] = {"mode": "remote", "address": temporal_address}
        harness = Harness(settings_from_mapping(data, base_dir=tmp_path))
        async with serving(harness) as url, a2a_client(url, streaming=False) as client:
            task = await send_blocking(client, user_message("where is order 42?"))
        second = server.requests[1].body
    assert task.status.message.parts[0].text == "It shipped on Monday."
    assert "shipped on Monday" in str(second["messages"])
    assert "Use lookup_order" in str(server.requests[0].body["messages"])


async def test_the_multi_agent_example_app_serves_the_team_under_hypercorn(
    tmp_path: Path, temporal_address: str, anyio_backend: str
):
    """Given examples/multi_agent's Starlette app under the real hypercorn command, when a is
    asked, then the team answers through delegations (e by URL, with pushes)."""
    port = free_port()
    copy_example(tmp_path, temporal_address, port, "multi_agent")
    with hypercorn(tmp_path, "multi_agent.app:app", port, anyio_backend) as url:
        home = await get_json(f"{url}/")
        async with a2a_client(f"{url}/agents/a", streaming=False) as client:
            task = await send_blocking(client, user_message("how do we build it?"))
    assert home == {"agents": {name: f"{url}/agents/{name}" for name in "abcde"}}
    assert task.status.message.parts[0].text == (
        "the team says: b found: d says 42 | c drew it in blue | e waves from afar"
    )


def _serve_tutorial(directory: Path, port: int, *configs: str) -> subprocess.Popen[bytes]:
    """``harness serve <configs>`` run in ``directory``, as docs/tutorial.md has you run it."""
    script = Path(sys.executable).parent / "harness"
    log = (directory / "serve.log").open("wb")
    with log:
        return subprocess.Popen(
            [str(script), "serve", *configs, "--bind", f"127.0.0.1:{port}"],
            cwd=directory,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def test_the_tutorials_agents_answer_as_the_tutorial_says(tmp_path, temporal_address):
    """docs/tutorial.md steps 2 and 4: the writer alone, then the editor asking the writer,
    each run with `harness serve` from examples/tutorial (its own modules found there)."""
    directory = copy_example(tmp_path, temporal_address, free_port(), "tutorial")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = _serve_tutorial(directory, port, "writer.toml", "editor.toml")
    try:
        _wait_until_serving(process, directory / "serve.log", url)
        async with a2a_client(f"{url}/agents/writer", streaming=False) as writer:
            note = await send_blocking(writer, user_message("durable agents"))
        async with a2a_client(f"{url}/agents/editor", streaming=False) as editor:
            edited = await send_blocking(editor, user_message("durable agents"))
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    log = (directory / "serve.log").read_text()
    assert code == 0, log
    assert "Traceback" not in log
    assert note.status.message.parts[0].text == "Here is a note on durable agents."
    [artifact] = [a for a in note.artifacts if a.name == "note.md"]
    assert artifact.parts[0].text.startswith("# durable agents")
    # The writer's answer reached the editor whole: its message and its note.
    edited_text = edited.status.message.parts[0].text
    assert edited_text.startswith("Edited: Here is a note on durable agents.")
    assert "# durable agents" in edited_text


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the served process runs its own
async def test_the_plugin_example_keeps_its_journal_across_a_restart(tmp_path, temporal_address):
    """examples/plugin: `harness serve scribe.toml` run in its directory, as its README says: the
    journal plugin's tools write its own table, its gate keeps the scribe silent for a message to
    another, and the entries are there after the process is stopped and served again."""
    directory = copy_example(tmp_path, temporal_address, free_port(), "plugin")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    answers: list[Any] = []
    for message in ("hello", "hello again"):
        process = _serve_tutorial(directory, port, "scribe.toml")
        try:
            _wait_until_serving(process, directory / "serve.log", url)
            async with a2a_client(url, streaming=False) as client:
                answers.append(await send_blocking(client, user_message(message)))
                if message == "hello":
                    answers.append(await send_blocking(client, user_message("@mia lunch?")))
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=60)
        log = (directory / "serve.log").read_text()
        assert code == 0, log
        assert "Traceback" not in log
    first, silent, second = answers
    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    assert "1 entries" in first.status.message.parts[0].text
    assert silent.status.state == TaskState.TASK_STATE_SUBMITTED
    assert MessageToDict(silent.metadata)["harness.declined"]["plugins"] == ["journal"]
    # Served again: the table kept the first entry, and the second joined it.
    assert "2 entries" in second.status.message.parts[0].text
    with sqlite3.connect(directory / ".harness" / "scribe.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM journal_entries").fetchone() == (2,)
        assert db.execute("SELECT plugin, version FROM plugin_migrations").fetchall() == [
            ("journal", 2)
        ]
