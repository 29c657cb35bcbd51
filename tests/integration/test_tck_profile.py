"""The TCK agent (``[model] kind = "tck"``) over real A2A: rows of the A2A TCK's message-id scenario
table end to end, on both backends (docs/conformance.md)."""

from __future__ import annotations

import uuid

import pytest
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import ContentTypeNotSupportedError

from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import collect, send_blocking

pytestmark = pytest.mark.anyio

TCK = {"kind": "tck"}


def tck_message(prefix: str, *, task_id: str = "") -> Message:
    """A message as the TCK sends it: its scenario's prefix, then a suffix unique to the call."""
    return user_message("TCK test", task_id=task_id, message_id=f"{prefix}-{uuid.uuid4().hex}")


async def test_each_message_id_prefix_gets_the_outcome_its_tck_scenario_names(make_harness):
    harness = make_harness(model=TCK)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        completed = await send_blocking(client, tck_message("tck-complete-task"))
        url_file = await send_blocking(client, tck_message("tck-artifact-file-url"))
        data = await send_blocking(client, tck_message("tck-artifact-data"))
        rejected = await send_blocking(client, tck_message("tck-reject-task"))
        unknown = tck_message("tck-no-such-scenario")
        unhandled = await send_blocking(client, unknown)
        request = SendMessageRequest(message=tck_message("tck-message-response"))
        (direct,) = [event async for event in client.send_message(request)]
    assert completed.status.state == TaskState.TASK_STATE_COMPLETED
    assert completed.status.message.parts[0].text == "Hello from TCK"
    # The longest prefix wins: tck-artifact-file-url is not tck-artifact-file.
    (part,) = url_file.artifacts[0].parts
    assert (part.url, part.filename, part.media_type) == (
        "https://example.com/output.txt",
        "output.txt",
        "text/plain",
    )
    assert dict(data.artifacts[0].parts[0].data.struct_value) == {"key": "value", "count": 42}
    assert rejected.status.state == TaskState.TASK_STATE_REJECTED
    assert unhandled.status.state == TaskState.TASK_STATE_COMPLETED
    assert unhandled.status.message.parts[0].text == (
        f"Unhandled messageId prefix: {unknown.message_id}"
    )
    assert direct.HasField("message")
    assert direct.message.parts[0].text == "Direct message response"
    assert direct.message.role == Role.ROLE_AGENT


async def test_an_input_required_task_completes_with_the_next_message_of_the_task(make_harness):
    harness = make_harness(model=TCK)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        waiting = await send_blocking(client, tck_message("tck-input-required"))
        done = await send_blocking(client, tck_message("tck-complete-task", task_id=waiting.id))
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert done.id == waiting.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.status.message.parts[0].text == "Hello from TCK"


async def test_the_chunked_scenario_streams_working_two_chunks_of_one_artifact_then_completed(
    make_harness,
):
    harness = make_harness(model=TCK)
    async with serving(harness) as url, a2a_client(url) as client:
        request = SendMessageRequest(message=tck_message("tck-stream-artifact-chunked"))
        events = await collect(client.send_message(request))
        task = await client.get_task(GetTaskRequest(id=events[0].task.id))
    task_id = events[0].task.id
    statuses = [e.status_update.status for e in events if e.HasField("status_update")]
    # The runtime's WORKING when the turn starts and the scenario's own (their order on a live
    # stream may vary, see docs/conformance.md), then COMPLETED, last.
    assert sorted(s.state for s in statuses[:-1]) == [TaskState.TASK_STATE_WORKING] * 2
    assert f"{task_id}:working" in [s.message.message_id for s in statuses]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    chunks = [
        (
            e.artifact_update.artifact.parts[0].text,
            e.artifact_update.append,
            e.artifact_update.last_chunk,
        )
        for e in events
        if e.HasField("artifact_update")
    ]
    assert chunks == [("chunk-1 ", False, False), ("chunk-2", True, True)]
    (artifact,) = task.artifacts
    assert artifact.parts[0].text == "chunk-1 chunk-2"


async def test_a_part_of_a_type_the_tck_agent_does_not_declare_is_refused(make_harness):
    # CORE-SEND-003: the card declares text/plain; the TCK's unknown media type must be refused.
    harness = make_harness(model=TCK)
    message = tck_message("tck-send-003")
    del message.parts[:]
    message.parts.append(Part(raw=b"tck", media_type="application/x-unsupported-tck-type"))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        with pytest.raises(ContentTypeNotSupportedError):
            await send_blocking(client, message)
