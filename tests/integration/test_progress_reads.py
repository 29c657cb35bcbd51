"""The LLM agent reports each tool call it makes as progress, so streams show what it is doing."""

from __future__ import annotations

import pytest
from a2a.types import SendMessageRequest, TaskState

from tests.conftest import a2a_client, serving, user_message
from tests.fakes.model_servers import serve_fake_openai, text_reply, tool_call_reply
from tests.integration.test_a2a_methods import collect

pytestmark = pytest.mark.anyio


async def test_the_llm_agent_reports_each_tool_call_as_progress(make_harness):
    with serve_fake_openai(
        [tool_call_reply("lookup_order", {"order_id": 42}), text_reply("Order 42 shipped.")]
    ) as server:
        model = {
            "kind": "openai",
            "name": "m",
            "base_url": server.base_url,
            "tools": ["tests.integration.agent_tools:lookup_order"],
        }
        harness = make_harness(model=model)
        async with serving(harness) as url, a2a_client(url) as client:
            events = await collect(
                client.send_message(SendMessageRequest(message=user_message("where is 42?")))
            )
    progress = [
        p.text
        for e in events
        if e.HasField("status_update")
        for p in e.status_update.status.message.parts
    ]
    assert "calling lookup_order" in progress
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
