"""Compaction on a running agent (both backends): a task whose messages keep arriving while its turns
run grows past the LLM agent's context budget; its oldest messages are folded into a summary made
once per fold by the model in an activity of its own, a plugin's listener hears each folded message
exactly once, every request the model gets stays within the budget, and an earlier turn's tool call
is shown to the model until it is folded. Real dev server, real HTTP, the real a2a-sdk client; the
model is a fake Chat Completions server."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import anyio
import pytest
from a2a.types import TaskState

from harness_core.agents.compaction import SUMMARY_INSTRUCTIONS
from harness_core.agents.turn import TurnMessage
from harness_core.plugins import Plugin, PluginContext
from tests.conftest import a2a_client, serving, user_message
from tests.fakes.model_servers import (
    FakeServer,
    RecordedRequest,
    Reply,
    serve_fake_openai,
    text_reply,
    tool_call_reply,
)
from tests.integration.test_a2a_methods import send_immediately, wait_for_state

pytestmark = pytest.mark.anyio

BUDGET = 1_000
FILLER = " lorem" * 100  # ~600 characters: ~150 estimated tokens a message


def is_summary(request: RecordedRequest) -> bool:
    return SUMMARY_INSTRUCTIONS in json.dumps(request.body["messages"][0])


@pytest.fixture
def model() -> Iterator[FakeServer]:
    with serve_fake_openai() as fake:
        folds = 0

        def summarize(request: RecordedRequest) -> Reply | None:
            nonlocal folds
            if not is_summary(request):
                return None
            folds += 1
            return Reply(text=(f"SUMMARY-{folds}",))

        fake.responder = summarize
        yield fake


def estimated(request: RecordedRequest) -> int:
    """The request's size as the runtime estimates it (harness_core.agents.compaction)."""
    chars = parts = 0
    for message in request.body["messages"]:
        parts += 1
        chars += len(str(message.get("content") or ""))
        for call in message.get("tool_calls") or ():
            parts += 1
            chars += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return chars // 4 + 4 * parts


async def test_a_growing_task_is_folded_within_its_budget_once_per_fold(
    make_harness, model: FakeServer
):
    heard: list[list[str]] = []

    async def listener(ctx: PluginContext, messages: Sequence[TurnMessage]) -> None:
        heard.append([m.message_id for m in messages])

    config = {
        "kind": "openai",
        "name": "test-model",
        "base_url": model.base_url,
        "system": "You are the desk.",
        "tools": ["tests.integration.agent_tools:lookup_order"],
        "context_tokens": BUDGET,
    }
    harness = make_harness(
        model=config, options={"plugins": [Plugin(key="ears", on_displaced=listener)]}
    )
    turns = 5
    # Each turn's answer waits a moment, so the next batch of messages arrives during the turn.
    model.push(tool_call_reply("lookup_order", {"order_id": 7}))
    for turn in range(1, turns + 1):
        model.push(text_reply(f"answer {turn}", delay=1.0 if turn < turns else 0.0))

    def asked() -> list[RecordedRequest]:
        return [r for r in model.requests if not is_summary(r)]

    sent: list[str] = []
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        first = await send_immediately(client, user_message(f"m0{FILLER}", message_id="m0"))
        sent.append("m0")
        for batch in range(1, turns):
            with anyio.fail_after(30):
                # The turn's last model request is in (its answer held): the batch waits for
                # the next turn.
                while len(asked()) < batch + 1:
                    await anyio.sleep(0.02)
            for n in range(3):
                message_id = f"m{batch}.{n}"
                await send_immediately(
                    client,
                    user_message(f"{message_id}{FILLER}", task_id=first.id, message_id=message_id),
                )
                sent.append(message_id)
        task = await wait_for_state(client, first.id, TaskState.TASK_STATE_COMPLETED)

    requests = asked()
    summaries = [r for r in model.requests if is_summary(r)]
    assert len(requests) == turns + 1  # the tool call's request, then one per turn
    assert all(estimated(r) <= BUDGET for r in requests), [estimated(r) for r in requests]
    # Folds happened, each summarized once, and the listener heard each folded message once,
    # in order, oldest first.
    assert 1 <= len(summaries) == len(heard)
    folded = [message_id for fold in heard for message_id in fold]
    history = [m.message_id for m in task.history]
    assert folded == history[: len(folded)]
    assert folded[0] == "m0"
    # The first fold's summary replaced what it folded in the next request.
    after = next(r for r in requests if "SUMMARY-1" in json.dumps(r.body))
    assert "m0 lorem" not in json.dumps(after.body)
    # Before any fold, turn 2 was shown turn 1's tool call and its result with turn 1's answer.
    second = requests[2]
    roles = [m["role"] for m in second.body["messages"]]
    assert roles[:5] == ["system", "user", "assistant", "tool", "assistant"]
    assert second.body["messages"][2]["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert "shipped on Monday" in second.body["messages"][3]["content"]
    assert sent == [m for m in history if not m.startswith(first.id)]
