"""A2A 1.0 to the letter: the answers the review found off, each checked against its section.

Real HTTP on loopback, the real a2a-sdk client where it can say the thing, raw HTTP where it cannot,
and real Temporal; only the model is scripted.
"""

from __future__ import annotations

import sqlite3

import anyio
import httpx
import pytest
from a2a.types import (
    GetTaskRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError

from harness_core import ScriptedModel, TurnOutput
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import send_blocking

pytestmark = pytest.mark.anyio

HEADERS = {"A2A-Version": "1.0"}


def rpc(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def test_refusals_of_the_review_get_the_errors_the_spec_names(make_harness):
    """3.1.11 extended card not declared, 3.4.2 a contextId that is not the task's, 3.2.4 a
    negative historyLength, and a tenant this agent does not have: each refused, nothing changed."""
    harness = make_harness(ScriptedModel([TurnOutput("more?", action="ask")]))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("hi"))
        stray = user_message("elsewhere", task_id=task.id)
        stray.context_id = "another-conversation"
        with pytest.raises(InvalidParamsError, match="is not the context of task"):
            await send_blocking(client, stray)
        with pytest.raises(InvalidParamsError, match="historyLength"):
            await client.get_task(GetTaskRequest(id=task.id, history_length=-1))
        async with httpx.AsyncClient(base_url=url, headers=HEADERS, timeout=30) as http:
            tenant = (
                await http.post("/", json=rpc("GetTask", {"id": task.id, "tenant": "t"}))
            ).json()
            rest_tenant = await http.get(f"/t/tasks/{task.id}")
            # The SDK's client does not ask for a card its agent card does not declare.
            extended = (await http.post("/", json=rpc("GetExtendedAgentCard", {}))).json()
        after = await client.get_task(GetTaskRequest(id=task.id))
    assert extended["error"]["code"] == -32004  # UnsupportedOperationError
    assert "extended agent card" in extended["error"]["message"]
    assert tenant["error"]["code"] == -32602
    assert "tenant" in tenant["error"]["message"] and "only" in tenant["error"]["message"]
    assert rest_tenant.status_code == 400
    assert [m.parts[0].text for m in after.history] == ["hi", "more?"]


async def test_the_card_is_cacheable_and_rest_speaks_json_with_415_for_refused_media(make_harness):
    """8.6.1: the card carries Cache-Control with max-age and an ETag; 11.1: REST answers are
    application/json; 5.4: ContentTypeNotSupported is 415 on REST."""
    harness = make_harness(ScriptedModel(["ok"]))
    async with serving(harness) as url, httpx.AsyncClient(base_url=url, headers=HEADERS) as http:
        card = await http.get("/.well-known/agent-card.json")
        again = await http.get(
            "/.well-known/agent-card.json", headers={"If-None-Match": card.headers["etag"]}
        )
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
        sent = await http.post("/message:send", json={"message": message})
        refused = await http.post(
            "/message:send",
            json={
                "message": {
                    "messageId": "m2",
                    "role": "ROLE_USER",
                    "parts": [{"raw": "AAAA", "mediaType": "application/x-unknown"}],
                }
            },
        )
    assert card.headers["cache-control"] == "public, max-age=300"
    assert again.status_code == 304
    assert sent.status_code == 200
    assert sent.headers["content-type"] == "application/json"
    assert sent.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert refused.status_code == 415
    assert refused.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"


async def test_a_subscription_lasts_until_the_task_ends_and_resumes_after_its_last_event(
    make_harness,
):
    """3.1.6: a subscription to a task waiting for input stays open through the next turn and
    ends at the terminal state; a client that lost it resumes with Last-Event-ID and gets only
    the events after it, then the rest until the end."""
    harness = make_harness(ScriptedModel([TurnOutput("which?", action="ask"), "that one"]))
    async with (
        serving(harness) as url,
        a2a_client(url) as client,
        a2a_client(url, streaming=False) as sender,
    ):
        task = await send_blocking(sender, user_message("pick"))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        seen: list[StreamResponse] = []
        answers: list[Task] = []
        async with a2a_client(url, headers={"Last-Event-ID": "1"}) as resumer:
            resumed: list[StreamResponse] = []
            async with anyio.create_task_group() as tg:

                async def follow() -> None:
                    async for event in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                        seen.append(event)

                async def resume() -> None:
                    async for event in resumer.subscribe(SubscribeToTaskRequest(id=task.id)):
                        resumed.append(event)

                tg.start_soon(follow)
                tg.start_soon(resume)
                with anyio.fail_after(30):
                    while len(seen) < 1 or len(resumed) < 1:
                        await anyio.sleep(0.01)
                    answers.append(
                        await send_blocking(sender, user_message("the blue one", task_id=task.id))
                    )
    assert answers[0].status.state == TaskState.TASK_STATE_COMPLETED
    states = [e.status_update.status.state for e in seen if e.HasField("status_update")]
    assert seen[0].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    resumed_seqs = [
        float(e.status_update.metadata["harness.seq"])  # pyright: ignore[reportArgumentType]
        for e in resumed
        if e.HasField("status_update")
    ]
    assert resumed_seqs and min(resumed_seqs) > 1
    assert resumed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_stream_survives_a_read_that_fails_once(make_harness):
    """Given a subscription whose second read of the task fails (a store locked past its
    timeout, as under heavy load), when the task then completes, then the stream retries the read
    and ends with COMPLETED instead of an internal error."""
    harness = make_harness(ScriptedModel([TurnOutput("which?", action="ask"), "that one"]))
    async with (
        serving(harness) as url,
        a2a_client(url) as client,
        a2a_client(url, streaming=False) as sender,
    ):
        task = await send_blocking(sender, user_message("pick"))
        tasks = harness.tasks
        real_poll = tasks.poll
        calls = 0

        async def flaky_poll(task_id: str, after: int, participant: str | None):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            if calls == 2:
                raise sqlite3.OperationalError("database is locked")
            return await real_poll(task_id, after, participant)

        tasks.poll = flaky_poll  # type: ignore[method-assign]
        events: list[StreamResponse] = []
        async with anyio.create_task_group() as tg:

            async def follow() -> None:
                async for event in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                    events.append(event)

            tg.start_soon(follow)
            with anyio.fail_after(30):
                while calls < 3:
                    await anyio.sleep(0.01)
                await send_blocking(sender, user_message("the red one", task_id=task.id))
    assert calls >= 3
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
