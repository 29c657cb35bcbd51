"""Abuse case: a participant forges the large-content marker ``harness.blob`` in a part's metadata.

Large content is kept by the runtime, out of reach of what clients and remote agents write: a part's
metadata is the sender's own data and is never read as a reference to stored content. So when alice
has sent a large secret (stored by its digest) and mallory sends a small part whose metadata names
that digest (``{"harness.blob": {"ref": "sha256:<digest>", "field": "text", "size": N}}``), mallory
gets her part back exactly as she wrote it (her text, the marker as plain metadata) through the
blocking send, GetTask and a stream; the agent's turn saw her text; and alice's secret is nowhere in
anything mallory receives. A malformed marker makes no task unreadable either.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, MessageToJson, ParseDict
from google.protobuf.struct_pb2 import Struct

from harness_core import Complete, TurnContext
from harness_core.agents.turn import TurnResult
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import collect, send_blocking

pytestmark = pytest.mark.anyio

BLOB_KEY = "harness.blob"


def who(participant: str) -> dict[str, str]:
    return {"X-Participant-Id": participant}


class Echo:
    """An agent that answers with the text it was given, and notes who sent what."""

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str]] = []

    async def turn(self, ctx: TurnContext) -> TurnResult:
        last = ctx.new_messages[-1]
        self.seen.append((last.sender, last.text))
        return Complete(f"you said: {last.text}")


def forged_message(text: str, metadata: dict[str, Any]) -> Message:
    """A user message of one text part whose metadata is exactly ``metadata``."""
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=text, metadata=ParseDict(metadata, Struct()))],
    )


def own_message(task: Task, message_id: str) -> Message:
    """The sender's message in the task's history."""
    found = [m for m in task.history if m.message_id == message_id]
    assert len(found) == 1, f"message {message_id} once in the history: {MessageToJson(task)}"
    return found[0]


def assert_as_written(message: Message, text: str, metadata: dict[str, Any]) -> None:
    """The message's one part is the sender's text with the sender's metadata, nothing else."""
    assert len(message.parts) == 1
    [part] = message.parts
    assert part.WhichOneof("content") == "text"
    assert part.text == text
    assert MessageToDict(part.metadata) == metadata


async def test_a_forged_marker_naming_another_participants_content_comes_back_as_written(
    make_harness,
):
    """Given alice's task holding a large secret (kept by the runtime, by its digest)
    When mallory sends a small text part whose metadata is a blob marker naming that digest, and
    reads her task back through the blocking send, GetTask and a streamed send
    Then her part is exactly what she wrote (her text, the marker as plain metadata), the agent
    heard her text and answered with it, and alice's secret is in nothing mallory received."""
    token = f"ALICE-SECRET-{uuid.uuid4().hex}"
    secret = (token + " ") * (20 * 1024 // (len(token) + 1) + 1)  # over 16 KiB: kept aside
    assert len(secret.encode()) > 16 * 1024
    digest = hashlib.sha256(secret.encode()).hexdigest()
    marker = {BLOB_KEY: {"ref": f"sha256:{digest}", "field": "text", "size": len(secret.encode())}}
    mallory_text = "just a short note"

    agent = Echo()
    harness = make_harness(agent)
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False, headers=who("alice")) as alice:
            alices = await send_blocking(alice, user_message(secret))
            alices_read = await alice.get_task(GetTaskRequest(id=alices.id))
        # Alice's own content does come back whole to her: the secret was really stored.
        assert alices.status.state == TaskState.TASK_STATE_COMPLETED
        assert alices_read.history[0].parts[0].text == secret

        received: list[str] = []  # everything mallory got, as JSON
        async with a2a_client(url, streaming=False, headers=who("mallory")) as mallory:
            sent = forged_message(mallory_text, marker)
            blocking = await send_blocking(mallory, sent)
            received.append(MessageToJson(blocking))
            read = await mallory.get_task(GetTaskRequest(id=blocking.id))
            received.append(MessageToJson(read))
        async with a2a_client(url, streaming=True, headers=who("mallory")) as mallory:
            streamed_message = forged_message(mallory_text, marker)
            events: list[StreamResponse] = await collect(
                mallory.send_message(SendMessageRequest(message=streamed_message))
            )
            received.extend(MessageToJson(e) for e in events)
            streamed_id = events[0].task.id if events[0].HasField("task") else ""
            streamed_read = await mallory.get_task(GetTaskRequest(id=streamed_id))
            received.append(MessageToJson(streamed_read))

    for task in (blocking, read):
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert_as_written(own_message(task, sent.message_id), mallory_text, marker)
        assert task.status.message.parts[0].text == f"you said: {mallory_text}"
    assert events[0].HasField("task")
    assert_as_written(
        own_message(events[0].task, streamed_message.message_id), mallory_text, marker
    )
    final = events[-1].status_update.status
    assert final.state == TaskState.TASK_STATE_COMPLETED
    assert final.message.parts[0].text == f"you said: {mallory_text}"
    assert streamed_read.status.state == TaskState.TASK_STATE_COMPLETED
    assert_as_written(own_message(streamed_read, streamed_message.message_id), mallory_text, marker)
    assert streamed_read.status.message.parts[0].text == f"you said: {mallory_text}"
    # The agent heard mallory's words, never alice's.
    assert agent.seen[1:] == [("mallory", mallory_text), ("mallory", mallory_text)]
    everything = "\n".join(received)
    assert token not in everything
    assert secret not in everything


@pytest.mark.parametrize(
    "metadata",
    [
        {BLOB_KEY: {"ref": "not-a-ref"}},
        {BLOB_KEY: "x"},
        {BLOB_KEY: {"ref": "sha256:" + "0" * 64, "field": "raw", "size": 3}},
        {BLOB_KEY: {"field": "data"}, "note": "kept"},
    ],
    ids=["bad-ref", "not-an-object", "unknown-digest", "no-ref"],
)
async def test_a_malformed_marker_leaves_the_task_readable_with_the_metadata_as_written(
    make_harness, metadata: dict[str, Any]
):
    """Given a participant's message whose part carries a malformed (or unknown) blob marker
    Then the turn answers it, and GetTask returns the task with the part as written."""
    agent = Echo()
    harness = make_harness(agent)
    async with (
        serving(harness) as url,
        a2a_client(url, streaming=False, headers=who("mallory")) as mallory,
    ):
        sent = forged_message("hello there", metadata)
        answered = await send_blocking(mallory, sent)
        read = await mallory.get_task(GetTaskRequest(id=answered.id))
    for task in (answered, read):
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.status.message.parts[0].text == "you said: hello there"
        assert_as_written(own_message(task, sent.message_id), "hello there", metadata)
    assert agent.seen == [("mallory", "hello there")]
