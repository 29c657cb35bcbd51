"""The A2A TCK's system-under-test behaviour, written on the public turn API (``[model] kind = "tck"``).

The A2A Technology Compatibility Kit (github.com/a2aproject/a2a-tck, branch ``1.0-dev``) tells the
agent it tests what to do through the prefix of the ``messageId`` it sends
(``tck-<scenario>-<session hex>``): its Gherkin files ``scenarios/core_operations.feature`` and
``scenarios/streaming.feature`` are the table, and the SUTs it generates from them route on the
prefix. This agent plays that table with :class:`TurnContext` and the turn outcomes only, so a TCK
run measures the runtime exactly as an ordinary agent drives it; the server has no TCK case.
docs/conformance.md says how to run the TCK and what it found.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import anyio

from harness_core.agents.turn import (
    Artifact,
    Ask,
    Complete,
    DataPart,
    FilePart,
    Part,
    Reject,
    Reply,
    TextPart,
    TurnContext,
    TurnResult,
)

__all__ = ["SCENARIOS", "TckAgent", "scenario_of"]

#: The TCK's streaming timeout (``_STREAMING_TIMEOUT_S`` of its generated SUTs), in seconds.
STREAMING_TIMEOUT = 2.0

Scenario = Callable[[TurnContext], Awaitable[TurnResult]]

# The TCK's generated SUTs return an octet payload "tck" for a file part; ours are the same.
_FILE = FilePart(data=b"tck", name="output.txt", media_type="text/plain")
_FILE_URL = FilePart(
    url="https://example.com/output.txt", name="output.txt", media_type="text/plain"
)


def _complete_with(*parts: Part) -> Scenario:
    """Complete the task with one artifact of ``parts`` (the feature's "add an artifact ...")."""

    async def scenario(ctx: TurnContext) -> TurnResult:
        return Complete(artifacts=[Artifact(parts)])

    return scenario


def _stream(*chunks: Part, chunked: bool = False, wait: float = 0.0) -> Scenario:
    """WORKING, then an artifact streamed while the turn runs (one chunk a part when ``chunked``,
    else one artifact of all the parts), then COMPLETED with no message."""

    async def scenario(ctx: TurnContext) -> TurnResult:
        # The feature's "stream a status update to working"; a progress message always has text.
        await ctx.progress("working", "working")
        if chunked:
            artifact_id: str | None = None
            for index, part in enumerate(chunks):
                artifact_id = await ctx.artifact(
                    part,
                    artifact_id=artifact_id,
                    # A2A: the first chunk creates the artifact, the next ones append to it. (The
                    # generated SUTs send append=true on the first chunk too, on an artifact that
                    # does not exist yet; the TCK does not check it.)
                    append=index > 0,
                    last_chunk=index == len(chunks) - 1,
                )
        elif chunks:
            await ctx.artifact(chunks)
        if wait:
            await anyio.sleep(wait)
        return Complete()

    return scenario


async def _complete_task(ctx: TurnContext) -> TurnResult:
    return Complete("Hello from TCK")


async def _message_response(ctx: TurnContext) -> TurnResult:
    # A Message and no task (the runtime answers so only for a first message that emitted nothing).
    return Reply("Direct message response")


async def _input_required(ctx: TurnContext) -> TurnResult:
    # The SUTs set INPUT_REQUIRED with no message; an Ask always carries one.
    return Ask("input required: send another message to continue this task")


async def _reject_task(ctx: TurnContext) -> TurnResult:
    # The feature's "reject with error 'rejected'": the Java SUT rejects the task (REJECTED), the
    # Python one raises an A2AError; the turn API's way to refuse a task is Reject.
    return Reject("rejected")


#: messageId prefix -> what the turn does. The longest matching prefix wins
#: (``tck-artifact-file-url`` over ``tck-artifact-file``), whatever the order here.
SCENARIOS: Mapping[str, Scenario] = {
    # scenarios/core_operations.feature
    "tck-complete-task": _complete_task,
    "tck-artifact-text": _complete_with(TextPart("Generated text content")),
    "tck-artifact-file": _complete_with(_FILE),
    "tck-artifact-file-url": _complete_with(_FILE_URL),
    "tck-artifact-data": _complete_with(DataPart({"key": "value", "count": 42})),
    "tck-message-response": _message_response,
    "tck-input-required": _input_required,
    "tck-reject-task": _reject_task,
    # scenarios/streaming.feature
    "tck-stream-001": _stream(TextPart("Stream hello from TCK")),
    "tck-stream-002": _stream(),
    "tck-stream-003": _stream(TextPart("Stream task lifecycle")),
    "tck-stream-ordering-001": _stream(TextPart("Ordered output")),
    "tck-stream-artifact-text": _stream(TextPart("Streamed text content")),
    "tck-stream-artifact-file": _stream(_FILE),
    "tck-stream-artifact-chunked": _stream(TextPart("chunk-1 "), TextPart("chunk-2"), chunked=True),
    "test-resubscribe-message-id": _stream(wait=2 * STREAMING_TIMEOUT),
}


def scenario_of(message_id: str) -> str | None:
    """The prefix of ``message_id`` in :data:`SCENARIOS` (the longest one), or None."""
    matching = [prefix for prefix in SCENARIOS if message_id.startswith(prefix)]
    return max(matching, key=len) if matching else None


class TckAgent:
    """Answers each turn as the TCK's scenario table says for the message the turn answers.

    A message id with no scenario completes the task with a message naming it (as the TCK's own
    SUTs do). If the turn is cancelled (CancelTask, a worker stopping) while a scenario waits, the
    cancellation propagates and nothing more is emitted.
    """

    #: The TCK sends text parts only, plus one part of an unknown type that must be refused with
    #: ContentTypeNotSupportedError (CORE-SEND-003): so text, and not "*/*".
    input_modes = ("text/plain",)
    #: What the scenarios produce: text, a text/plain file and a data part.
    output_modes = ("text/plain", "application/json")

    async def turn(self, ctx: TurnContext) -> TurnResult:
        if not ctx.new_messages:
            return Complete("No message provided")
        message_id = ctx.new_messages[-1].message_id
        prefix = scenario_of(message_id)
        if prefix is None:
            return Complete(f"Unhandled messageId prefix: {message_id}")
        return await SCENARIOS[prefix](ctx)
