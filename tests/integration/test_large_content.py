"""Large content end to end: tool results, remote agents' files and client messages of megabytes.

Content of any size travels through the task and arrives whole (to the model, to the delegating
agent, back to the client), and none of it weighs on the task's Temporal history: a workflow holds
references to it, so its history per step stays flat however large the content.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from a2a.types import GetTaskRequest, Message, Task, TaskState
from google.protobuf.json_format import MessageToDict

from harness_core import (
    Artifact,
    Ask,
    Complete,
    Delegate,
    Delegation,
    FilePart,
    Harness,
    TextPart,
    TurnContext,
)
from harness_core.agents.turn import TurnResult
from tests.conftest import a2a_client, agent_settings, serving, unique_id, user_message
from tests.fakes.model_servers import FakeServer, serve_fake_openai, text_reply, tool_call_reply
from tests.integration import agent_tools_large
from tests.integration.agent_tools_large import (
    CHUNK_BYTES,
    REPORT_BYTES,
    chunk_text,
    numbered_text,
    report_text,
)
from tests.integration.test_a2a_methods import send_blocking

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

KEY_VARIABLE = "HARNESS_TEST_MODEL_KEY"
TOOLS = "tests.integration.agent_tools_large"
#: How long any of these tasks may take: ~30 s on a slow, shared 2-core machine.
DEADLINE = 90

STEPS = 40


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    """A scripted Chat Completions server on loopback."""
    monkeypatch.setenv(KEY_VARIABLE, "sk-test-large")
    with serve_fake_openai() as fake:
        yield fake


def llm_config(server: FakeServer, *tools: str, **more: Any) -> dict[str, Any]:
    return {
        "kind": "openai",
        "name": "test-model",
        "base_url": server.base_url,
        "api_key_env": KEY_VARIABLE,
        "tools": [f"{TOOLS}:{t}" for t in tools],
        **more,
    }


def tool_results(request_body: Any) -> list[str]:
    """The tool results a Chat Completions request carried, in order."""
    return [str(m["content"]) for m in request_body["messages"] if m.get("role") == "tool"]


async def history_event_sizes(harness: Harness, task_id: str) -> list[int]:
    """The size in bytes of every event of the task's workflow, across all its runs (a run that
    continued as new names the one before it), oldest first."""
    connection = harness.tasks.connection

    async def fetch() -> list[int]:
        client = connection.client
        sizes: list[int] = []
        run_id: str | None = None  # the latest run first
        while True:
            history = await client.get_workflow_handle(task_id, run_id=run_id).fetch_history()
            sizes[:0] = [event.ByteSize() for event in history.events]
            started = history.events[0].workflow_execution_started_event_attributes
            if not started.continued_execution_run_id:
                return sizes
            run_id = started.continued_execution_run_id

    return await connection.bridge.call(fetch)


def raw_parts(message: Message) -> list[bytes]:
    return [p.raw for p in message.parts if p.WhichOneof("content") == "raw"]


async def test_a_three_megabyte_tool_result_reaches_the_model_whole_and_the_tool_runs_once(
    make_harness, server: FakeServer
):
    """Given an LLM agent whose tool returns 3 MB of text
    When the model calls it and then answers
    Then the task completes with the answer, the model's next request carried the 3 MB result
    whole, and the tool ran exactly once."""
    agent_tools_large.CALLS.clear()
    server.push(
        tool_call_reply("full_report", {"name": "q3"}),
        text_reply("The q3 report ", "is long."),
    )
    harness = make_harness(model=llm_config(server, "full_report"))
    async with (
        serving(harness) as url,
        a2a_client(url, streaming=False, request_seconds=DEADLINE) as client,
    ):
        with anyio.fail_after(DEADLINE):
            task = await send_blocking(client, user_message("read me the q3 report"))
            read = await client.get_task(GetTaskRequest(id=task.id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert read.status.message.parts[0].text == "The q3 report is long."
    assert agent_tools_large.CALLS == [("full_report", "q3")]
    requests = server.requests
    assert len(requests) == 2
    [result] = tool_results(requests[1].body)
    assert len(result) == REPORT_BYTES
    assert result == report_text("q3")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # 41 model requests: one backend is enough
@pytest.mark.parametrize("local_activity", [True, False], ids=["local-steps", "activity-steps"])
async def test_forty_tool_steps_of_200_kb_complete_and_the_history_stays_flat(
    make_harness, server: FakeServer, local_activity: bool
):
    """Given an LLM agent whose model asks for a 200 KB tool result 40 times in one turn (one call
    per step), then answers; its model requests run as local activities (the default) or as
    regular ones (whose input, the turn's exchange so far, is recorded in the history)
    When the turn runs
    Then the task completes, each tool ran once, the last request carried all 40 results whole,
    and the task's workflow history (all its runs) is far smaller than the 8 MB of results, with
    no event over 64 KiB: the results are held by reference, not copied into each step."""
    agent_tools_large.CALLS.clear()
    server.push(
        *(tool_call_reply("archive_chunk", {"n": n}) for n in range(STEPS)),
        text_reply("Read all ", f"{STEPS} chunks."),
    )
    harness = make_harness(
        model=llm_config(
            server, "archive_chunk", max_steps=STEPS + 10, local_activity=local_activity
        )
    )
    async with (
        serving(harness) as url,
        a2a_client(url, streaming=False, request_seconds=DEADLINE) as client,
    ):
        with anyio.fail_after(DEADLINE):
            task = await send_blocking(client, user_message("read the whole archive"))
        sizes = await history_event_sizes(harness, task.id)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == f"Read all {STEPS} chunks."
    called = list(agent_tools_large.CALLS)
    assert called == [("archive_chunk", n) for n in range(STEPS)]
    requests = server.requests
    assert len(requests) == STEPS + 1
    assert tool_results(requests[-1].body) == [chunk_text(n) for n in range(STEPS)]
    total, largest = sum(sizes), max(sizes)
    print(f"\nhistory: {len(sizes)} events, {total} bytes, largest event {largest} bytes")
    assert STEPS * CHUNK_BYTES > 8_000_000
    assert total < 2_000_000, f"history holds {total} bytes for {STEPS} steps"
    assert largest < 64 * 1024, f"an event of {largest} bytes"


async def test_a_remote_agents_five_megabyte_file_arrives_whole_at_the_delegating_task(
    tmp_path: Path, temporal_address: str
):
    """Given agents a and b of one group, b answering with a 5 MB file (raw bytes)
    When a's participant asks a, and a delegates to b
    Then a's next turn gets b's file whole, a completes (forwarding the file as an artifact), and
    a's GetTask returns the file whole: in b's answer in a's history, and in a's artifact."""
    blob = random.Random(5).randbytes(5 * 1024 * 1024)  # 5 MiB, not compressible
    assert len(blob) == 5 * 1024 * 1024
    a_id, b_id = unique_id("a"), unique_id("b")
    received: list[bytes] = []

    async def a(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            return Delegate(Delegation(b_id, "send me the file"))
        files = [
            p
            for m in ctx.new_messages
            for p in m.parts
            if isinstance(p, FilePart) and p.data is not None
        ]
        received.extend(p.data for p in files if p.data is not None)
        if not files:
            return Complete("b sent no file")
        return Complete(
            f"b sent {len(files[0].data or b'')} bytes",
            artifacts=[Artifact((files[0],), name="forwarded")],
        )

    async def b(ctx: TurnContext) -> TurnResult:
        return Complete(
            (
                TextPart("here is the file"),
                FilePart(data=blob, name="big.bin", media_type="application/octet-stream"),
            )
        )

    binary = ["text/plain", "application/octet-stream"]
    # Agents on one Temporal connection share its payload directory (the claim check's).
    payloads = str(tmp_path / "temporal-payloads")
    harnesses = [
        Harness(
            agent_settings(
                tmp_path / name,
                temporal_address,
                agent_id,
                agent={"input_modes": binary, "output_modes": binary},
                temporal={"payloads": payloads},
            ),
            agent=agent,
            prefix=f"/agents/{agent_id}",
        )
        for name, agent_id, agent in (("a", a_id, a), ("b", b_id, b))
    ]
    async with (
        serving(*harnesses) as url,
        a2a_client(
            f"{url}/agents/{a_id}", streaming=False, headers={"X-Participant-Id": "carol"}
        ) as client,
    ):
        with anyio.fail_after(DEADLINE):
            sent = await send_blocking(client, user_message("get me b's file"))
            task = await client.get_task(GetTaskRequest(id=sent.id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == f"b sent {len(blob)} bytes"
    assert received == [blob]
    answers = [
        m for m in task.history if "harness.delegation" in MessageToDict(m).get("metadata", {})
    ]
    assert [raw_parts(m) for m in answers] == [[blob]]
    forwarded = [a for a in task.artifacts if a.name == "forwarded"]
    assert [p.raw for a in forwarded for p in a.parts] == [blob]


async def test_a_three_megabyte_message_is_read_back_whole_and_its_task_continues(make_harness):
    """Given an agent that accepts requests of up to 8 MiB
    When a client sends a 3 MB text message, the agent asks for more, and the client continues the
    task
    Then both turns saw the 3 MB text whole, the task completes, and GetTask's history returns the
    message whole."""
    big = numbered_text("client message", 3 * 1024 * 1024)
    seen: list[tuple[int, int]] = []  # (turn, length of the big text the turn saw)

    async def agent(ctx: TurnContext) -> TurnResult:
        whole = [m.text for m in ctx.history if m.text == big]
        seen.append((ctx.number, len(whole[0]) if whole else 0))
        if ctx.number == 1:
            return Ask(f"got {len(ctx.new_messages[-1].text)} characters; anything else?")
        return Complete("done")

    harness = make_harness(agent, server={"max_request_bytes": 8 * 1024 * 1024})
    async with (
        serving(harness) as url,
        a2a_client(url, streaming=False, request_seconds=DEADLINE) as client,
    ):
        with anyio.fail_after(DEADLINE):
            first = await send_blocking(client, user_message(big))
            second = await send_blocking(client, user_message("that is all", task_id=first.id))
            task: Task = await client.get_task(GetTaskRequest(id=first.id))
    assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert first.status.message.parts[0].text == f"got {len(big)} characters; anything else?"
    assert second.status.state == TaskState.TASK_STATE_COMPLETED
    assert seen == [(1, len(big)), (2, len(big))]
    users = [m for m in task.history if m.role == 1]
    assert [m.parts[0].text for m in users] == [big, "that is all"]
