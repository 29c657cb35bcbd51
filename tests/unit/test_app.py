"""HarnessApp's own behaviour before any route: scopes it refuses without starting anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness_core import Harness, settings_from_mapping

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def call(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return (
            {"type": "websocket.connect"}
            if scope["type"] == "websocket"
            else {
                "type": "http.request",
                "body": b"",
            }
        )

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_a_websocket_is_refused_without_reaching_any_route(tmp_path: Path) -> None:
    harness = Harness(settings_from_mapping({}, base_dir=tmp_path))
    sent = await call(
        harness.asgi_app(),
        {"type": "websocket", "path": "/", "root_path": "", "headers": [], "query_string": b""},
    )
    assert sent == [{"type": "websocket.close", "code": 1008}]


async def test_an_http_request_before_start_gets_503(tmp_path: Path) -> None:
    harness = Harness(settings_from_mapping({"agent": {"id": "early"}}, base_dir=tmp_path))
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/.well-known/agent-card.json",
        "root_path": "",
        "headers": [],
        "query_string": b"",
    }
    sent = await call(harness.asgi_app(), scope)
    assert sent[0]["status"] == 503
    assert sent[1]["body"] == b'{"error":"agent early is not started"}'
