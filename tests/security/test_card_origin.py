"""Cards of agents served elsewhere (``[[agents]]``): their headers go to their origin only, and
their cards are revalidated.

1. A card that names an interface at another origin than the one configured is refused: the
   delegation fails in our words, and the other origin never hears the configured header (before
   the fix, a2a-sdk's client posted the message, header included, wherever the card said).
2. A card is kept for its ``max-age`` and revalidated with ``If-None-Match``; a changed card is taken
   at the next use (before, a card was kept for the life of the process).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from a2a.types import TaskState
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness_core import Complete, Delegate, Delegation, Harness, TurnContext
from harness_core.agents.turn import TurnResult
from harness_core.delegation.cards import CardCache, OriginHeaders
from tests.conftest import a2a_client, agent_settings, serving, serving_app, user_message
from tests.integration.test_a2a_methods import send_blocking

pytestmark = pytest.mark.anyio

CARD_PATH = "/.well-known/agent-card.json"


def card(name: str, interface: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name}, a test card",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": interface, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": False, "pushNotifications": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "s", "name": "s", "description": "s", "tags": ["t"]}],
    }


class Recorder:
    """An HTTP server that records every request's path and headers, and answers 404."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, dict[str, str]]] = []

    def app(self) -> Starlette:
        async def anything(request: Request) -> Response:
            self.heard.append((request.url.path, dict(request.headers)))
            return Response(status_code=404)

        return Starlette(
            routes=[Route("/{path:path}", anything, methods=["GET", "POST", "PUT", "DELETE"])]
        )


async def test_a_card_naming_another_origin_is_refused_and_the_header_stays_home(
    tmp_path, temporal_address, monkeypatch, caplog
):
    monkeypatch.setenv("PARTNER_KEY", "partner-secret-123")
    elsewhere = Recorder()
    async with serving_app(elsewhere.app()) as elsewhere_url:
        # The configured origin serves a card that sends every call to the other origin.
        async def served_card(request: Request) -> Response:
            return JSONResponse(card("partner", elsewhere_url + "/"))

        home = Starlette(routes=[Route(CARD_PATH, served_card)])

        async def a(ctx: TurnContext) -> TurnResult:
            if ctx.number == 1:
                return Delegate(Delegation("partner", "hello"))
            return Complete(ctx.new_messages[-1].text)

        async with serving_app(home) as home_url:
            near = Harness(
                agent_settings(
                    tmp_path / "near",
                    temporal_address,
                    agents=[
                        {"id": "partner", "url": home_url, "headers": ["X-Partner-Key=PARTNER_KEY"]}
                    ],
                ),
                agent=a,
            )
            async with (
                serving(near) as near_url,
                a2a_client(near_url, streaming=False, headers={"X-Participant-Id": "bob"}) as c,
            ):
                with anyio.fail_after(60):
                    task = await send_blocking(c, user_message("ask the partner"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    text = task.status.message.parts[0].text
    assert "the delegation to partner failed" in text
    assert "names an interface at" in text
    assert "partner-secret-123" not in text
    # The other origin heard nothing at all: neither the message nor the header.
    assert elsewhere.heard == []
    assert any("names an interface at" in r.getMessage() for r in caplog.records)


async def test_a_card_is_kept_for_its_max_age_then_revalidated_by_etag():
    state: dict[str, Any] = {"name": "first", "max_age": 60, "asked": [], "etag": '"v1"'}

    async def served_card(request: Request) -> Response:
        state["asked"].append(request.headers.get("if-none-match"))
        headers = {"ETag": state["etag"], "Cache-Control": f"max-age={state['max_age']}"}
        if request.headers.get("if-none-match") == state["etag"]:
            return Response(status_code=304, headers=headers)
        body = json.dumps(card(state["name"], str(request.base_url)))
        return Response(body, media_type="application/json", headers=headers)

    now = [1000.0]
    cards = CardCache(clock=lambda: now[0])
    async with (
        serving_app(Starlette(routes=[Route(CARD_PATH, served_card)])) as url,
        httpx.AsyncClient() as http,
    ):
        assert (await cards.get(http, url)).name == "first"
        now[0] += 30  # within max-age: not asked again
        assert (await cards.get(http, url)).name == "first"
        assert state["asked"] == [None]
        now[0] += 31  # stale: asked with its ETag, unchanged (304)
        assert (await cards.get(http, url)).name == "first"
        assert state["asked"] == [None, '"v1"']
        state.update(name="second", etag='"v2"', max_age=0)
        now[0] += 61  # stale again, and the card changed: the new one is taken
        assert (await cards.get(http, url)).name == "second"
        # max-age=0: asked at every use.
        assert (await cards.get(http, url)).name == "second"
        assert state["asked"] == [None, '"v1"', '"v1"', '"v2"']


async def test_configured_headers_go_to_their_origin_only():
    recorder = Recorder()
    async with serving_app(recorder.app()) as url:
        other = url.replace("127.0.0.1", "localhost")
        auth = OriginHeaders(url, {"X-Partner-Key": "k"})
        async with httpx.AsyncClient(auth=auth) as http:
            await http.get(url + "/home")
            await http.get(other + "/elsewhere")
    heard = {path: headers.get("x-partner-key") for path, headers in recorder.heard}
    assert heard == {"/home": "k", "/elsewhere": None}
