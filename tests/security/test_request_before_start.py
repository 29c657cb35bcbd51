"""Abuse case 5: requests that arrive before the agent has started (a host app serves the mount,
or the FastAPI app includes the router, before the lifespan started the agent, or without one).

Every request is answered 503 and reaches no route: no task is started in Temporal, and once the
agent does start, it has no task from those requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.routing import Mount

from harness_asgi.fastapi import harness_router
from harness_core import Harness, ScriptedModel
from harness_core.store import content_digest
from harness_core.tasks.service import derive_task_id
from tests.conftest import agent_settings, serving_app

pytestmark = pytest.mark.anyio

HEADERS = {"A2A-Version": "1.0", "X-Participant-Id": "alice"}


def send_body(message_id: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
        },
    }


def without_lifespan(app: Any) -> Any:
    """``app`` with its lifespan never run, as in the window before a host starts its agents."""

    async def wrapper(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await app(scope, receive, send)

    return wrapper


@pytest.mark.parametrize("face", ["mount", "router"])
async def test_requests_before_start_get_503_and_start_no_task(
    tmp_path: Path, temporal_address: str, face: str
):
    model = ScriptedModel(["never"])
    harness = Harness(agent_settings(tmp_path, temporal_address), model=model, prefix="/agents/a")
    if face == "mount":
        app: Any = Starlette(routes=[Mount("/agents/a", app=harness.asgi_app())])
    else:
        app = FastAPI()
        app.include_router(harness_router(harness))
    async with (
        serving_app(without_lifespan(app)) as url,
        httpx.AsyncClient(headers=HEADERS) as http,
    ):
        responses = [
            await http.post(f"{url}/agents/a/", json=send_body("m-early")),
            await http.post(
                f"{url}/agents/a/message:send",
                json={"message": send_body("m-early-rest")["params"]["message"]},
            ),
            await http.get(f"{url}/agents/a/tasks"),
            await http.get(f"{url}/agents/a/.well-known/agent-card.json"),
        ]
    assert [r.status_code for r in responses] == [503] * 4
    expected = f"agent {harness.agent_id} is not started"
    assert all(expected in r.text for r in responses)

    # Once started, the agent holds no task from those requests, and the model never ran.
    async with harness:
        for message_id in ("m-early", "m-early-rest"):
            digest = content_digest(send_body(message_id)["params"]["message"])
            task_id = derive_task_id(harness.agent_id, "alice", message_id, digest)
            assert await harness.tasks.view(task_id, "alice") is None
        listed, _, total = await harness.tasks.list(participant="alice")
    assert (listed, total) == ([], 0)
    assert model.turns == []
