"""Abuse case 6: one agent's secret leaking through another agent in the same process.

Agent b holds a Temporal API key. Agent a's model logs it (a buggy tool), a client pastes it into a
message to a, and a's model repeats it in its answer. The process-wide secret registry masks it
everywhere a writes: a's log lines, the message and the answer a stores and returns, and a's SQLite
file. b keeps working with its key.
"""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path

import pytest
from a2a.types import GetTaskRequest, TaskState
from google.protobuf.json_format import MessageToJson

from harness_core import Harness, ScriptedModel, TurnContext
from harness_core.agents.turn import TurnResult
from harness_core.logs import configure_logging
from harness_core.secrets import MASK
from tests.conftest import a2a_client, agent_settings, serving, unique_id, user_message
from tests.integration.test_a2a_methods import send_blocking

pytestmark = pytest.mark.anyio

KEY_VARIABLE = "HARNESS_TEST_B_TEMPORAL_KEY"


class LeakyModel(ScriptedModel):
    """A model whose tool logs a credential it should never have touched."""

    async def turn(self, ctx: TurnContext) -> TurnResult:
        logging.getLogger("tools.billing").warning(
            "calling billing with key %s", os.environ[KEY_VARIABLE]
        )
        return await super().turn(ctx)


async def test_agent_bs_key_is_masked_in_agent_as_logs_messages_answers_and_store(
    tmp_path: Path,
    temporal_address: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    key = f"tk-{unique_id('secret')}"
    monkeypatch.setenv(KEY_VARIABLE, key)
    a = Harness(
        agent_settings(tmp_path / "a", temporal_address),
        model=LeakyModel([f"the key you sent is {key}"]),
    )
    b = Harness(
        agent_settings(
            tmp_path / "b",
            temporal_address,
            temporal={"api_key_env": KEY_VARIABLE, "tls": False},
        ),
        model=ScriptedModel(["b works"]),
    )
    lines = io.StringIO()
    handler = configure_logging("INFO", fmt="json", stream=lines)
    caplog.set_level(logging.WARNING, logger="tools.billing")
    try:
        async with serving(a, b) as url:
            async with a2a_client(f"{url}/agents/{a.agent_id}", streaming=False) as client:
                sent = await send_blocking(client, user_message(f"my colleague's key is {key}"))
                task = await client.get_task(GetTaskRequest(id=sent.id))
            async with a2a_client(f"{url}/agents/{b.agent_id}", streaming=False) as client:
                b_task = await send_blocking(client, user_message("still fine?"))
    finally:
        logging.getLogger().removeHandler(handler)

    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [m.parts[0].text for m in task.history] == [
        f"my colleague's key is {MASK}",
        f"the key you sent is {MASK}",
    ]
    assert key not in MessageToJson(sent) + MessageToJson(task)

    logged = lines.getvalue()
    assert key not in logged
    records = [json.loads(line) for line in logged.splitlines()]
    leaks = [r for r in records if r["logger"] == "tools.billing"]
    assert leaks, "the model's tool logged"
    assert all(r["agent"] == a.agent_id for r in leaks)
    assert all(r["message"] == f"calling billing with key {MASK}" for r in leaks)
    # A host's own logging (here pytest's handler, not the runtime's) gets masked records too.
    captured = [r for r in caplog.records if r.name == "tools.billing"]
    assert captured
    assert all(r.getMessage() == f"calling billing with key {MASK}" for r in captured)
    assert key not in caplog.text

    store = a.settings.store_path
    stored = b"".join(p.read_bytes() for p in store.parent.glob(store.name + "*"))
    assert b"colleague" in stored  # the record is there ...
    assert key.encode() not in stored  # ... with the key masked

    assert b_task.status.state == TaskState.TASK_STATE_COMPLETED
    assert b_task.history[-1].parts[0].text == "b works"
