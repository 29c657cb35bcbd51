"""Agents mounted into a host's own Starlette app, served by Hypercorn on loopback.

Given a host app with routes of its own and two agents under ``Mount(prefix, app=harness.asgi_app())``,
started by the host's lifespan, clients find each agent at its prefixed public URL, its card names that
URL, and the host's routes keep working. A wrong mount fails closed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from a2a.types import GetTaskRequest, TaskState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from harness_core import ConfigError, Harness, RouteOptions, ScriptedModel, harnesses_lifespan
from tests.conftest import a2a_client, agent_settings, free_port, serving_app, user_message
from tests.integration.test_a2a_methods import send_blocking

pytestmark = pytest.mark.anyio


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("host says hi")


async def test_two_agents_mounted_in_a_host_app_answer_at_their_prefixed_urls(
    tmp_path: Path, temporal_address: str
):
    """Given agents a and b mounted under /agents/a and /agents/b with the host's lifespan
    When a client reads each card at <public url>/.well-known/agent-card.json and sends a message
    Then each card names its prefixed URL, each agent answers, and the host's own route works."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    a = Harness(
        agent_settings(tmp_path, temporal_address, server={"base_url": base}),
        model=ScriptedModel(["from a"]),
        prefix="/agents/a",
    )
    b = Harness(
        agent_settings(tmp_path, temporal_address, server={"base_url": base}),
        model=ScriptedModel(["from b"]),
        prefix="agents/b/",
    )
    app = Starlette(
        routes=[
            Route("/hello", hello),
            Mount("/agents/a", app=a.asgi_app()),
            Mount("/agents/b", app=b.asgi_app()),
        ],
        lifespan=harnesses_lifespan(a, b),
    )
    answers: dict[str, str] = {}
    async with serving_app(app, port) as url:
        assert url == base
        for harness, prefix in ((a, "/agents/a"), (b, "/agents/b")):
            assert harness.public_url == f"{base}{prefix}"
            async with httpx.AsyncClient(timeout=30) as http:
                card = (await http.get(f"{base}{prefix}/.well-known/agent-card.json")).json()
            assert [i["url"] for i in card["supportedInterfaces"]] == [
                f"{base}{prefix}/",
                f"{base}{prefix}",
            ]
            async with a2a_client(f"{base}{prefix}", streaming=False) as client:
                task = await send_blocking(client, user_message("hi"))
                again = await client.get_task(GetTaskRequest(id=task.id))
            assert again.status.state == TaskState.TASK_STATE_COMPLETED
            answers[harness.agent_id] = again.history[-1].parts[0].text
        async with httpx.AsyncClient(timeout=30) as http:
            host_page = await http.get(f"{base}/hello")
            monitor = (await http.get(f"{base}/agents/b/_monitor")).json()
    assert answers == {a.agent_id: "from a", b.agent_id: "from b"}
    assert host_page.text == "host says hi"
    assert monitor["agent"] == b.agent_id
    assert monitor["state"] == "ready"
    assert monitor["publicUrl"] == f"{base}/agents/b"


async def test_no_base_url_warning_when_the_request_confirms_the_guessed_url(
    tmp_path: Path, temporal_address: str, caplog: pytest.LogCaptureFixture
):
    """Given a mounted agent without base_url whose [server] bind is where the host listens,
    when a client reaches it at that address, then no warning about base_url: the guess holds."""
    port = free_port()
    harness = Harness(
        agent_settings(tmp_path, temporal_address, server={"bind": f"127.0.0.1:{port}"}),
        prefix="/agents/a",
    )
    app = Starlette(
        routes=[Mount("/agents/a", app=harness.asgi_app())],
        lifespan=harnesses_lifespan(harness),
    )
    with caplog.at_level(logging.WARNING, logger="harness.http"):
        async with serving_app(app, port=port) as url, httpx.AsyncClient(timeout=30) as http:
            card = await http.get(f"{url}/agents/a/.well-known/agent-card.json")
    assert card.status_code == 200
    assert card.json()["supportedInterfaces"][0]["url"].startswith(f"http://127.0.0.1:{port}/")
    assert not [r for r in caplog.records if "base_url" in r.getMessage()]


async def test_a_mounted_agent_answers_503_until_the_host_starts_it(
    tmp_path: Path, temporal_address: str, caplog: pytest.LogCaptureFixture
):
    """Given an agent mounted in a host app whose lifespan does not start it (and no base_url)
    When a client calls it
    Then every request is 503 and reaches no route; the host's routes still work; one WARNING
    says the agent was never started and how to start it, one that base_url is missing."""
    harness = Harness(agent_settings(tmp_path, temporal_address), prefix="/agents/a")
    app = Starlette(routes=[Route("/hello", hello), Mount("/agents/a", app=harness.asgi_app())])
    with caplog.at_level(logging.WARNING, logger="harness.http"):
        async with serving_app(app) as url, httpx.AsyncClient(timeout=30) as http:
            card = await http.get(f"{url}/agents/a/.well-known/agent-card.json")
            rpc = await http.post(f"{url}/agents/a/", json={"jsonrpc": "2.0", "id": 1})
            host_page = await http.get(f"{url}/hello")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "was never started" in w]) == 1
    assert any("harnesses_lifespan" in w for w in warnings)
    assert len([w for w in warnings if "has no [server] base_url" in w]) == 1
    assert card.status_code == rpc.status_code == 503
    assert card.json() == {"error": f"agent {harness.agent_id} is not started"}
    assert host_page.status_code == 200


async def test_an_agent_mounted_under_another_path_refuses_every_request_and_logs_once(
    tmp_path: Path, temporal_address: str, caplog: pytest.LogCaptureFixture
):
    """Given an agent configured for /agents/a but mounted at /wrong
    When clients call it twice
    Then both calls get 500 naming both paths, and one ERROR is logged."""
    harness = Harness(agent_settings(tmp_path, temporal_address), prefix="/agents/a")
    app = Starlette(
        routes=[Mount("/wrong", app=harness.asgi_app())], lifespan=harnesses_lifespan(harness)
    )
    with caplog.at_level(logging.ERROR, logger="harness.http"):
        async with serving_app(app) as url, httpx.AsyncClient(timeout=30) as http:
            first = await http.get(f"{url}/wrong/.well-known/agent-card.json")
            second = await http.post(f"{url}/wrong/", json={"jsonrpc": "2.0", "id": 1})
    assert first.status_code == second.status_code == 500
    assert "'/wrong'" in first.json()["error"]
    assert "'/agents/a'" in first.json()["error"]
    errors = [r for r in caplog.records if "served at" in r.getMessage()]
    assert len(errors) == 1


def test_a_prefix_that_disagrees_with_base_url_is_refused_at_construction(tmp_path: Path):
    settings = agent_settings(
        tmp_path, "127.0.0.1:7233", server={"base_url": "https://example.test/agents/b"}
    )
    with pytest.raises(ConfigError) as refused:
        Harness(settings, prefix="/agents/a")
    assert "'/agents/a'" in str(refused.value)
    assert "https://example.test/agents/b" in str(refused.value)


async def test_request_limits_and_cors_apply_to_the_mounted_app(
    tmp_path: Path, temporal_address: str
):
    """Given an agent with max_request_bytes, rate_limit_per_minute and cors_origins
    Then a body over the limit is 413, the third request a minute is 429, and a browser's
    preflight from an allowed origin is answered."""
    harness = Harness(
        agent_settings(
            tmp_path,
            temporal_address,
            server={
                "max_request_bytes": 2048,
                "rate_limit_per_minute": 2,
                "cors_origins": ["https://app.example.test"],
            },
        ),
        prefix="/a",
    )
    app = Starlette(routes=[Mount("/a", app=harness.asgi_app())], lifespan=harness.lifespan)
    async with serving_app(app) as url, httpx.AsyncClient(timeout=30) as http:
        preflight = await http.options(
            f"{url}/a/",
            headers={
                "Origin": "https://app.example.test",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "a2a-version,x-participant-id",
            },
        )
        too_big = await http.post(f"{url}/a/", content=b"x" * 4096)
        card = await http.get(f"{url}/a/.well-known/agent-card.json")
        limited = await http.get(f"{url}/a/.well-known/agent-card.json")
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example.test"
    assert too_big.status_code == 413
    assert card.status_code == 200
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1


async def test_route_options_turn_off_the_limits_and_the_monitor(
    tmp_path: Path, temporal_address: str
):
    harness = Harness(
        agent_settings(tmp_path, temporal_address, server={"max_request_bytes": 1024}),
        routes=RouteOptions(limits=False, monitor=False),
    )
    async with serving_app(harness.asgi_app()) as url, httpx.AsyncClient(timeout=30) as http:
        big = await http.post(
            f"{url}/", content=b"x" * 4096, headers={"Content-Type": "application/json"}
        )
        monitor = await http.get(f"{url}/_monitor", follow_redirects=True)
    # Past the limits, the body is read whole and refused as what it is (a JSON-RPC parse error).
    assert big.status_code == 200
    assert big.json()["error"]["code"] == -32700
    assert monitor.status_code == 404


async def test_an_agent_without_a_prefix_mounted_under_a_path_is_refused(
    tmp_path: Path, temporal_address: str
):
    """Its card would name the host's root, where nobody serves it."""
    harness = Harness(agent_settings(tmp_path, temporal_address))
    app = Starlette(
        routes=[Mount("/billing", app=harness.asgi_app())], lifespan=harnesses_lifespan(harness)
    )
    async with serving_app(app) as url, httpx.AsyncClient(timeout=30) as http:
        card = await http.get(f"{url}/billing/.well-known/agent-card.json")
    assert card.status_code == 500
    assert "'/billing'" in card.json()["error"]
