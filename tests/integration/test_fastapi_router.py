"""One agent inside a FastAPI app through ``harness_router``, served by Hypercorn on loopback."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import TaskState
from fastapi import FastAPI
from openapi_spec_validator import validate

from harness_asgi.fastapi import harness_router
from harness_core import Harness, ScriptedModel
from tests.conftest import a2a_client, agent_settings, free_port, serving_app, user_message
from tests.integration.test_a2a_methods import send_blocking

pytestmark = pytest.mark.anyio


def make_app(harness: Harness, **include: Any) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:  # pyright: ignore[reportUnusedFunction]
        return {"status": "ok"}

    app.include_router(harness_router(harness), **include)
    return app


async def test_the_router_runs_the_agent_with_the_apps_lifespan_and_shows_in_the_docs(
    tmp_path: Path, temporal_address: str
):
    """Given a FastAPI app that includes the agent's router (prefix /agents/a)
    When the app starts and a client talks A2A at the prefixed URL
    Then the agent answers, /openapi.json lists its routes under the tag "A2A: <id>" with the A2A
    schemas they refer to, and the app's own route works."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    harness = Harness(
        agent_settings(tmp_path, temporal_address, server={"base_url": base}),
        model=ScriptedModel(["routed"]),
        prefix="/agents/a",
    )
    app = make_app(harness)
    async with serving_app(app, port):
        async with a2a_client(f"{base}/agents/a", streaming=False) as client:
            task = await send_blocking(client, user_message("hi"))
        async with httpx.AsyncClient() as http:
            openapi = (await http.get(f"{base}/openapi.json")).json()
            docs = await http.get(f"{base}/docs")
            health = (await http.get(f"{base}/health")).json()
            monitor = (await http.get(f"{base}/agents/a/_monitor")).json()
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.history[-1].parts[0].text == "routed"
    tags = {
        tag
        for path, operations in openapi["paths"].items()
        if path.startswith("/agents/a/")
        for operation in operations.values()
        for tag in operation.get("tags", [])
    }
    assert tags == {f"A2A: {harness.agent_id}"}
    assert "/agents/a/.well-known/agent-card.json" in openapi["paths"]
    assert "/agents/a/tasks/{id}" in openapi["paths"]
    refs = _refs(openapi["paths"])
    assert refs, "the A2A routes document their request bodies"
    schemas = openapi["components"]["schemas"]
    assert all(ref.rsplit("/", 1)[-1] in schemas for ref in refs)
    validate(openapi)  # valid OpenAPI: path and query parameters declared, every $ref resolved
    listing = openapi["paths"]["/agents/a/tasks"]["get"]["parameters"]
    assert {p["name"] for p in listing} >= {"pageSize", "pageToken", "historyLength", "status"}
    assert docs.status_code == 200
    assert health == {"status": "ok"}
    assert monitor["state"] == "ready"


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"]} if isinstance(value.get("$ref"), str) else set()
        for item in value.values():
            found |= _refs(item)
        return found
    if isinstance(value, list):
        return {ref for item in value for ref in _refs(item)}
    return set()


async def test_the_router_answers_503_until_the_agent_has_started(
    tmp_path: Path, temporal_address: str
):
    harness = Harness(agent_settings(tmp_path, temporal_address), prefix="/agents/a")
    app = make_app(harness)

    async def without_lifespan(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # the app's lifespan (and so the agent) never starts
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await app(scope, receive, send)

    async with serving_app(without_lifespan) as url, httpx.AsyncClient() as http:
        card = await http.get(f"{url}/agents/a/.well-known/agent-card.json")
        health = await http.get(f"{url}/health")
    assert card.status_code == 503
    assert card.json() == {"detail": f"agent {harness.agent_id} is not started"}
    assert health.status_code == 200


async def test_a_router_included_under_another_prefix_is_refused_on_every_request(
    tmp_path: Path, temporal_address: str, caplog: pytest.LogCaptureFixture
):
    """Given the router of an agent with prefix /agents/a included with prefix="/other"
    Then every request to it is 500 naming both paths, and one ERROR is logged."""
    harness = Harness(agent_settings(tmp_path, temporal_address), prefix="/agents/a")
    app = make_app(harness, prefix="/other")
    with caplog.at_level(logging.ERROR, logger="harness.http"):
        async with serving_app(app) as url, httpx.AsyncClient() as http:
            first = await http.get(f"{url}/other/agents/a/.well-known/agent-card.json")
            second = await http.get(f"{url}/other/agents/a/_monitor")
    assert first.status_code == second.status_code == 500
    assert "/other/agents/a/.well-known/agent-card.json" in first.json()["detail"]
    assert "'/agents/a'" in first.json()["detail"]
    assert len([r for r in caplog.records if "configured for prefix" in r.getMessage()]) == 1


async def _chunks(size: int) -> AsyncIterator[bytes]:
    for _ in range(size // 1024):
        yield b"x" * 1024


async def test_the_routers_limits_refuse_large_bodies_and_too_many_requests(
    tmp_path: Path, temporal_address: str
):
    """Given an agent with max_request_bytes 2048 and rate_limit_per_minute 3 in router mode
    Then a declared body over the limit is 413, a chunked one too, and the fourth request is 429."""
    harness = Harness(
        agent_settings(
            tmp_path,
            temporal_address,
            server={"max_request_bytes": 2048, "rate_limit_per_minute": 3},
        ),
        prefix="/a",
    )
    async with serving_app(make_app(harness)) as url, httpx.AsyncClient(timeout=30) as http:
        declared = await http.post(f"{url}/a/", content=b"x" * 4096)
        chunked = await http.post(f"{url}/a/", content=_chunks(8192))
        card = await http.get(f"{url}/a/.well-known/agent-card.json")
        limited = await http.get(f"{url}/a/.well-known/agent-card.json")
        health = await http.get(f"{url}/health")
    assert declared.status_code == 413
    assert chunked.status_code == 413
    assert card.status_code == 200
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    assert health.status_code == 200


async def test_the_router_warns_that_cors_and_the_ui_need_the_apps_own_setup(
    tmp_path: Path, temporal_address: str, caplog: pytest.LogCaptureFixture
):
    ui = tmp_path / "ui"
    ui.mkdir()
    harness = Harness(
        agent_settings(
            tmp_path,
            temporal_address,
            server={"cors_origins": ["https://app.example.test"], "ui_dir": str(ui)},
        ),
        prefix="/a",
    )
    with caplog.at_level(logging.WARNING, logger="harness.http"):
        async with serving_app(make_app(harness)):
            pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("cors_origins" in w and "CORSMiddleware" in w for w in warnings)
    assert any("ui_dir" in w and "StaticFiles" in w for w in warnings)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
def test_without_fastapi_the_module_names_the_extra_to_install(anyio_backend: str):
    code = (
        "import sys; sys.modules['fastapi'] = None\n"
        "try:\n    import harness_asgi.fastapi\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert (
        "install the a2a-harness 'fastapi' extra (in a checkout: pip install -e '.[fastapi]')"
        in out
    )


async def test_a_fastapi_app_serves_its_agents_as_tenants_of_its_root(
    tmp_path: Path, temporal_address: str
):
    """Given two agents' routers and ``tenant_router`` in one FastAPI app
    When a client walks from the root's stub card to a tenant's card and sends to it
    Then the tenant's agent answers; a path of no tenant is a 404 (not a loop)."""
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import GetExtendedAgentCardRequest, SendMessageRequest

    from harness_asgi.fastapi import tenant_router

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    harnesses = [
        Harness(
            agent_settings(tmp_path / name, temporal_address, name, server={"base_url": base}),
            model=ScriptedModel([f"{name} answers"]),
            prefix=f"/agents/{name}",
        )
        for name in ("north", "south")
    ]
    app = FastAPI()
    for harness in harnesses:
        app.include_router(harness_router(harness))
    app.include_router(tenant_router(harnesses))
    headers = {"A2A-Version": "1.0"}
    async with serving_app(app, port), httpx.AsyncClient(timeout=30, headers=headers) as http:
        stub = await A2ACardResolver(http, base).get_agent_card()
        root = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(stub)
        card = await root.get_extended_agent_card(GetExtendedAgentCardRequest(tenant="south"))
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        request = SendMessageRequest(message=user_message("hi"), tenant="south")
        [event] = [e async for e in client.send_message(request)]
        nowhere = await http.get(f"{base}/nosuch/tasks")
    assert [s.id for s in stub.skills] == ["north", "south"]
    assert event.task.status.message.parts[0].text == "south answers"
    assert nowhere.status_code == 404
