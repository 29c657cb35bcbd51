"""Lifetimes (``[retention]``): idle tasks expire, ended ones are swept with their payloads, open streams
are capped, and a retried first message runs the model once while its record is kept.

Real Temporal timers and schedules, real HTTP on loopback, a real store and payload directory.
"""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from a2a.types import (
    GetTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from harness_core import ScriptedModel, TurnOutput
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import send_blocking

pytestmark = pytest.mark.anyio


async def test_a_task_waiting_for_input_expires_after_the_idle_timeout(make_harness):
    """Given idle_timeout = 2s, when a task asks for input and nobody answers, then it ends
    CANCELED with a message that says why; a task answered in time is not touched."""
    harness = make_harness(
        ScriptedModel(
            [TurnOutput("anyone?", action="ask"), TurnOutput("and?", action="ask"), "thanks"]
        ),
        retention={"idle_timeout": "2s"},
    )
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        waiting = await send_blocking(client, user_message("hello?"))
        answered = await send_blocking(client, user_message("hi"))
        done = await send_blocking(client, user_message("here", task_id=answered.id))
        with anyio.fail_after(30):
            while True:
                task = await client.get_task(GetTaskRequest(id=waiting.id))
                if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
                    break
                await anyio.sleep(0.2)
        kept = await client.get_task(GetTaskRequest(id=done.id))
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.status.state == TaskState.TASK_STATE_CANCELED
    assert "expired" in task.status.message.parts[0].text
    assert "[retention] idle_timeout" in task.status.message.parts[0].text
    assert kept.status.state == TaskState.TASK_STATE_COMPLETED


async def test_the_heartbeat_sweeps_ended_tasks_and_their_payloads_after_the_ttl(make_harness):
    """Given ended_ttl = 1s and a heartbeat every second, when a task with a 40 KB part ends, then
    it stays readable and a retry of its first message gets it with no second turn; after the TTL
    the heartbeat removes it (not found) and the claim check's payload files of it."""
    model = ScriptedModel(["noted"])
    harness = make_harness(model, retention={"ended_ttl": "1s"}, heartbeat={"interval": "1s"})
    big = "x" * 40_000
    first = user_message(big, message_id="kept-for-a-while")
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, first)
        retried = await send_blocking(client, first)
        blobs = harness.settings.payloads_path / "sha256"
        stored = [p for p in blobs.glob("*/*") if not p.name.startswith(".")]
        with anyio.fail_after(30):
            while True:
                try:
                    await client.get_task(GetTaskRequest(id=task.id))
                except TaskNotFoundError:
                    break
                await anyio.sleep(0.2)
            # Its payloads go once they are older than the TTL too.
            while [p for p in blobs.glob("*/*") if not p.name.startswith(".")]:
                await anyio.sleep(0.2)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert retried.id == task.id
    assert len(model.turns) == 1
    assert stored


async def test_open_streams_past_the_cap_get_503_and_a_freed_place_is_taken_again(make_harness):
    """Given max_streams = 1, when one subscription is open, a second gets 503 with Retry-After;
    once the first ends, a new one is served."""
    harness = make_harness(
        ScriptedModel([TurnOutput("more?", action="ask")]), retention={"max_streams": 1}
    )
    headers = {"A2A-Version": "1.0"}
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("open"))
        body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task.id}}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            async with http.stream("POST", "/", json=body) as first:
                assert first.status_code == 200
                second = await http.post("/", json=body)
                rest = await http.get(f"/tasks/{task.id}:subscribe")
            # The first stream's place is freed once the server has seen it close, a moment
            # after the client did: a new subscription is served then (bounded wait).
            again = ""
            with anyio.fail_after(10):
                while not again:
                    async with http.stream("POST", "/", json=body) as retry:
                        if retry.status_code == 200:
                            async for line in retry.aiter_lines():
                                if line.startswith("data:"):
                                    again = json.loads(line[5:])["result"]["task"]["id"]
                                    break
                            continue
                    await anyio.sleep(0.05)
    assert second.status_code == 503
    assert second.headers["retry-after"] == "5"
    assert "too many open streams (1)" in second.json()["error"]["message"]
    assert rest.status_code == 503
    assert again == task.id
