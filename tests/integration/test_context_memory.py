"""Memory across the tasks of one context: a new task whose message names an earlier task's
``contextId`` sees that task's messages (``ctx.context_history``) when its sender took part in it,
and the built-in LLM agent gives them to the model before the task's own."""

from __future__ import annotations

import json

import pytest
from a2a.types import Message, Part, Role, TaskState

from harness_core import Complete
from harness_core.agents.turn import TurnContext, TurnResult
from tests.conftest import a2a_client, serving, user_message
from tests.fakes.model_servers import serve_fake_openai, text_reply
from tests.integration.test_a2a_methods import send_blocking

pytestmark = pytest.mark.anyio


def who(participant: str | None) -> dict[str, str]:
    return {"X-Participant-Id": participant} if participant else {}


def in_context(text: str, context_id: str) -> Message:
    return Message(
        message_id=user_message(text).message_id,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        context_id=context_id,
    )


async def test_a_new_task_in_a_context_sees_its_senders_earlier_tasks(make_harness):
    async def agent(ctx: TurnContext) -> TurnResult:
        earlier = await ctx.context_history()
        return Complete(" | ".join(f"{m.role}:{m.text}" for m in earlier) or "nothing before")

    harness = make_harness(options={"agent": agent})
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False, headers=who("alice")) as alice:
            first = await send_blocking(alice, user_message("my name is Alice"))
            second = await send_blocking(alice, in_context("what is my name?", first.context_id))
            third = await send_blocking(alice, in_context("and now?", first.context_id))
        async with a2a_client(url, streaming=False, headers=who("bob")) as bob:
            # Bob names Alice's context: he took part in none of its tasks, so he sees nothing.
            intruder = await send_blocking(bob, in_context("what was said?", first.context_id))
    assert first.status.message.parts[0].text == "nothing before"
    assert second.context_id == first.context_id
    assert second.status.message.parts[0].text == ("user:my name is Alice | agent:nothing before")
    assert third.status.message.parts[0].text.startswith(
        "user:my name is Alice | agent:nothing before | user:what is my name?"
    )
    assert intruder.status.state == TaskState.TASK_STATE_COMPLETED
    assert intruder.status.message.parts[0].text == "nothing before"


async def test_the_llm_agent_gives_the_model_the_contexts_earlier_messages(make_harness):
    with serve_fake_openai([text_reply("Hello Alice."), text_reply("You are Alice.")]) as server:
        harness = make_harness(model={"kind": "openai", "name": "m", "base_url": server.base_url})
        async with (
            serving(harness) as url,
            a2a_client(url, streaming=False, headers=who("alice")) as alice,
        ):
            first = await send_blocking(alice, user_message("I am Alice"))
            second = await send_blocking(alice, in_context("who am I?", first.context_id))
        asked = server.requests[1].body["messages"]
    assert second.status.message.parts[0].text == "You are Alice."
    said = [(m["role"], json.dumps(m.get("content"))) for m in asked]
    assert [role for role, _ in said] == ["user", "assistant", "user"]
    assert "I am Alice" in said[0][1]
    assert "Hello Alice." in said[1][1]
    assert "who am I?" in said[2][1]
