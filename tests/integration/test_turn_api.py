"""The turn API over real A2A: parts in, progress, artifacts and outcomes out (both backends)."""

from __future__ import annotations

import threading
import uuid

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.helpers import new_data_part
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import ContentTypeNotSupportedError

from harness_core import (
    Artifact,
    Ask,
    AuthRequired,
    Complete,
    DataPart,
    FilePart,
    Reject,
    Reply,
    TextPart,
    TurnContext,
)
from harness_core.agents.turn import TurnResult
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import HELD, collect, kinds, send_blocking, send_immediately

pytestmark = pytest.mark.anyio


def parts_message(*parts: Part) -> Message:
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=list(parts))


async def test_a_turn_sees_text_file_and_data_parts_with_metadata_and_sender(make_harness):
    seen: list[TurnContext] = []

    async def agent(ctx: TurnContext) -> TurnResult:
        seen.append(ctx)
        return Complete("got it")

    modes = ["text/plain", "image/*", "application/pdf", "application/json"]
    harness = make_harness(agent, agent={"input_modes": modes})
    message = parts_message(
        Part(text="look at these"),
        Part(raw=b"\x89PNG\r\n", filename="pic.png", media_type="image/png"),
        Part(url="https://example.com/doc.pdf", filename="doc.pdf", media_type="application/pdf"),
        new_data_part({"order": 4326}),
    )
    message.metadata.update({"trace": "abc"})
    headers = {"X-Participant-Id": "alice"}
    async with serving(harness) as url, a2a_client(url, streaming=False, headers=headers) as client:
        task = await send_blocking(client, message)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    (ctx,) = seen
    (turn_message,) = ctx.new_messages
    assert turn_message.sender == "alice"
    assert turn_message.metadata == {"trace": "abc"}
    text, image, link, data = turn_message.parts
    assert text == TextPart("look at these")
    assert image == FilePart(data=b"\x89PNG\r\n", name="pic.png", media_type="image/png")
    assert link == FilePart(
        url="https://example.com/doc.pdf", name="doc.pdf", media_type="application/pdf"
    )
    assert isinstance(data, DataPart) and data.data == {"order": 4326}
    assert ctx.history == (turn_message,)


async def test_progress_chunked_artifacts_and_files_stream_with_semantic_ids(make_harness):
    report = bytes(range(256)) * 400  # 100 KiB: stored by the claim check, by reference

    async def agent(ctx: TurnContext) -> TurnResult:
        await ctx.progress("step:1", "reading the order")
        await ctx.artifact("part one, ", name="notes", artifact_id="notes", last_chunk=False)
        await ctx.artifact("part two", artifact_id="notes", append=True, last_chunk=True)
        await ctx.progress("step:2", "writing the report")
        report_part = FilePart(
            data=report, name="report.bin", media_type="application/octet-stream"
        )
        return Complete(
            "done",
            artifacts=[
                Artifact((report_part,), name="report"),
                Artifact((DataPart({"total": 42}),), name="summary"),
            ],
        )

    harness = make_harness(agent, model=HELD)
    async with serving(harness) as url, a2a_client(url) as client:
        events = await collect(
            client.send_message(SendMessageRequest(message=user_message("report please")))
        )
        task_id = events[0].task.id
        async with a2a_client(url, streaming=False) as reader:
            task = await reader.get_task(GetTaskRequest(id=task_id))
    assert kinds(events)[0] == "task"
    progress = [
        e.status_update.status.message.message_id
        for e in events
        if e.HasField("status_update") and e.status_update.status.message.message_id
    ]
    assert progress == [f"{task_id}:step:1", f"{task_id}:step:2", f"{task_id}:final"]
    chunks = [
        (e.artifact_update.append, e.artifact_update.last_chunk)
        for e in events
        if e.HasField("artifact_update") and e.artifact_update.artifact.artifact_id == "notes"
    ]
    assert chunks == [(False, False), (True, True)]
    by_name = {a.name: a for a in task.artifacts}
    assert by_name["notes"].parts[0].text == "part one, part two"
    assert by_name["report"].parts[0].raw == report
    assert by_name["report"].parts[0].filename == "report.bin"
    assert by_name["summary"].parts[0].data.struct_value["total"] == 42
    streamed = [
        e.artifact_update.artifact
        for e in events
        if e.HasField("artifact_update") and e.artifact_update.artifact.name == "report"
    ]
    assert streamed[0].parts[0].raw == report
    assert task.status.state == TaskState.TASK_STATE_COMPLETED


@pytest.mark.parametrize(
    ("result", "state"),
    [
        (Ask("which order?"), TaskState.TASK_STATE_INPUT_REQUIRED),
        (AuthRequired("sign in at https://example.com/login"), TaskState.TASK_STATE_AUTH_REQUIRED),
        (Reject("I only handle orders"), TaskState.TASK_STATE_REJECTED),
    ],
)
async def test_a_turn_can_ask_require_auth_or_reject(make_harness, result, state):
    async def agent(ctx: TurnContext) -> TurnResult:
        return result

    harness = make_harness(agent)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("hello"))
    assert task.status.state == state
    assert task.status.message.parts[0].text == result.message[0].text
    assert task.status.message.role == Role.ROLE_AGENT


async def test_a_first_message_may_get_a_direct_reply_and_later_ones_complete(make_harness):
    async def agent(ctx: TurnContext) -> TurnResult:
        return Reply(f"hi, you said {ctx.new_messages[0].text}")

    harness = make_harness(agent)
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False) as client:
            request = SendMessageRequest(message=user_message("yo"))
            events = [e async for e in client.send_message(request)]
        async with a2a_client(url) as streaming:
            request = SendMessageRequest(message=user_message("s"))
            streamed = await collect(streaming.send_message(request))
    (event,) = events
    assert event.HasField("message")
    assert event.message.parts[0].text == "hi, you said yo"
    assert event.message.role == Role.ROLE_AGENT
    # A stream has already shown a task, so there the reply completes it.
    assert streamed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_the_card_shows_the_declared_modes_and_a_part_of_another_type_is_refused(
    make_harness,
):
    class Images:
        input_modes = ("text/plain", "image/*")
        output_modes = ("text/plain", "application/json")

        async def turn(self, ctx: TurnContext) -> TurnResult:
            return Complete("seen")

    harness = make_harness(Images())
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        async with httpx.AsyncClient() as http:
            card = await A2ACardResolver(http, url).get_agent_card()
        fine = await send_blocking(
            client, parts_message(Part(raw=b"GIF89a", filename="a.gif", media_type="image/gif"))
        )
        with pytest.raises(ContentTypeNotSupportedError) as refused:
            await send_blocking(
                client,
                parts_message(Part(raw=b"%PDF", filename="a.pdf", media_type="application/pdf")),
            )
        listed = await client.list_tasks(ListTasksRequest())
    assert list(card.default_input_modes) == ["text/plain", "image/*"]
    assert list(card.default_output_modes) == ["text/plain", "application/json"]
    assert fine.status.state == TaskState.TASK_STATE_COMPLETED
    assert "does not accept application/pdf" in str(refused.value)
    assert [t.id for t in listed.tasks] == [fine.id]  # the refused message started no task


async def test_a_retried_message_gets_the_same_answer_a_reply_or_the_whole_task(make_harness):
    async def agent(ctx: TurnContext) -> TurnResult:
        text = ctx.new_messages[-1].text
        if text == "hi":
            return Reply("hello")
        return Complete("made", artifacts=[Artifact((TextPart("the thing"),), name="thing")])

    harness = make_harness(agent)
    greeting, order = user_message("hi"), user_message("make it")
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        answers = []
        for message in (greeting, greeting, order, order):
            (answer,) = [e async for e in client.send_message(SendMessageRequest(message=message))]
            answers.append(answer)
    first, retried, made, made_again = answers
    assert first.message.parts[0].text == retried.message.parts[0].text == "hello"
    assert made_again.task.id == made.task.id
    assert [a.name for a in made_again.task.artifacts] == ["thing"]


async def test_cancelling_a_task_cancels_its_running_turn(make_harness):
    started, cancelled = threading.Event(), threading.Event()

    async def agent(ctx: TurnContext) -> TurnResult:
        started.set()
        try:
            await anyio.sleep(60)
        except BaseException:
            cancelled.set()
            raise
        return Complete("too late")

    harness = make_harness(agent, model=HELD)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_immediately(client, user_message("take a minute"))
        with anyio.fail_after(30):
            while not started.is_set():
                await anyio.sleep(0.01)
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        with anyio.fail_after(30):
            while not cancelled.is_set():
                await anyio.sleep(0.02)
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
