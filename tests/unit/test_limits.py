"""The body size and rate limits in front of an agent app: 413, 400 and 429, and what the app sees.

The middleware wraps a small real Starlette app. Requests go through httpx's ASGI transport, which
sends a ``bytes`` body in one message with a ``content-length`` and an async iterator's body chunked
without one; the ASGI callable is also driven directly where the exact messages sent matter, and
Hypercorn serves it on loopback where what a real client reads matters.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from unittest.mock import MagicMock

import anyio
import httpx
import pytest
from a2a.server.request_handlers import RequestHandler
from a2a.server.routes import create_jsonrpc_routes, create_rest_routes
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from harness_asgi.limits import LimitsMiddleware, RateLimiter, json_error
from harness_asgi.serve import serve_http

LIMIT = 1024


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class EchoApp:
    """A Starlette app whose one route reads the whole body and answers with its size."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.calls = 0
        self.app = Starlette(routes=[Route("/", self.echo, methods=["POST"])])

    async def echo(self, request: Request) -> JSONResponse:
        self.calls += 1
        body = await request.body()
        self.bodies.append(body)
        return JSONResponse({"size": len(body)})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client_for(
    app: LimitsMiddleware, peer: str = "10.0.0.1", *, raise_app_exceptions: bool = True
) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(
        app, client=(peer, 40000), raise_app_exceptions=raise_app_exceptions
    )
    return httpx.AsyncClient(transport=transport, base_url="http://agent")


async def chunks(size: int, count: int) -> AsyncIterator[bytes]:
    for _ in range(count):
        yield b"x" * size


class Script:
    """A server's side of one request: ``bodies`` as one chunked body, then only disconnects."""

    def __init__(self, *bodies: bytes) -> None:
        self.unread: list[Message] = [
            {"type": "http.request", "body": body, "more_body": index < len(bodies) - 1}
            for index, body in enumerate(bodies)
        ]
        self.events: list[str] = []
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        self.events.append("receive")
        return self.unread.pop(0) if self.unread else {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.events.append(f"send {message.get('status', '')}".strip())
        self.sent.append(message)


def scripted_receive(*bodies: bytes) -> Receive:
    return Script(*bodies).receive


def http_scope(headers: list[tuple[bytes, bytes]] | None = None) -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "root_path": "",
        "query_string": b"",
        "headers": headers or [],
        "client": ("10.0.0.1", 40000),
        "server": ("agent", 80),
    }


def limited(app: EchoApp, limiter: RateLimiter | None = None) -> LimitsMiddleware:
    return LimitsMiddleware(app.app, max_request_bytes=LIMIT, limiter=limiter)


# --- body size -------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("size", [0, 10, LIMIT])
async def test_a_body_up_to_the_limit_reaches_the_app_whole(size: int) -> None:
    echo = EchoApp()

    async with client_for(limited(echo)) as client:
        response = await client.post("/", content=b"y" * size)

    assert response.status_code == 200
    assert response.json() == {"size": size}
    assert echo.bodies == [b"y" * size]


@pytest.mark.anyio
async def test_a_chunked_body_up_to_the_limit_reaches_the_app_whole() -> None:
    echo = EchoApp()

    async with client_for(limited(echo)) as client:
        response = await client.post("/", content=chunks(256, 4))

    assert response.status_code == 200
    assert echo.bodies == [b"x" * LIMIT]


@pytest.mark.anyio
async def test_a_declared_body_over_the_limit_is_refused_without_calling_the_app() -> None:
    echo = EchoApp()

    async with client_for(limited(echo)) as client:
        response = await client.post("/", content=b"y" * (LIMIT + 1))

    assert response.status_code == 413
    assert response.json() == {"error": f"request body over {LIMIT} bytes"}
    assert response.headers["content-type"] == "application/json"
    assert echo.calls == 0


@pytest.mark.anyio
async def test_a_chunked_body_over_the_limit_gets_one_413_and_the_app_never_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    echo = EchoApp()
    caplog.set_level(logging.DEBUG)

    # The transport asserts that only one response starts and raises whatever the app raises.
    async with client_for(limited(echo)) as client:
        response = await client.post("/", content=chunks(300, 10))

    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert response.json() == {"error": f"request body over {LIMIT} bytes"}
    # A declared body is read whole before the app is called: the app never sees this one.
    assert echo.calls == 0
    assert echo.bodies == []
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


@pytest.mark.anyio
async def test_a_streamed_body_over_the_limit_sends_exactly_one_well_formed_response() -> None:
    echo = EchoApp()
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await limited(echo)(http_scope(), scripted_receive(b"a" * 1000, b"b" * 1000, b""), send)

    assert [message["type"] for message in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 413
    assert sent[1]["body"] == b'{"error":"request body over 1024 bytes"}'
    assert not sent[1].get("more_body", False)
    assert echo.bodies == []


@pytest.mark.anyio
async def test_an_app_that_ignores_the_cut_off_body_cannot_send_a_second_response() -> None:
    reads: list[Message] = []
    finished: list[bool] = []
    sent: list[Message] = []

    async def stubborn(scope: Scope, receive: Receive, send: Send) -> None:
        # Reads until the body ends, whatever it is told, then answers.
        while True:
            message = await receive()
            reads.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        await JSONResponse({"ok": True})(scope, receive, send)
        finished.append(True)

    async def send(message: Message) -> None:
        sent.append(message)

    middleware = LimitsMiddleware(stubborn, max_request_bytes=LIMIT, limiter=None)
    await middleware(http_scope(), scripted_receive(b"a" * 1000, b"b" * 1000, b""), send)

    assert [message.get("status") for message in sent] == [413, None]
    # The app saw the chunk under the limit, never the one over it, and did not get to answer.
    assert [len(message["body"]) for message in reads] == [1000]
    assert finished == []


@pytest.mark.anyio
async def test_an_app_that_answered_before_the_body_passed_the_limit_reads_a_disconnect() -> None:
    reads: list[Message] = []
    sent: list[Message] = []

    async def early(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while (message := await receive())["type"] == "http.request":
            reads.append(message)
        reads.append(message)
        await send({"type": "http.response.body", "body": b"done"})

    async def send(message: Message) -> None:
        sent.append(message)

    middleware = LimitsMiddleware(early, max_request_bytes=LIMIT, limiter=None)
    await middleware(http_scope(), scripted_receive(b"a" * 1000, b"b" * 1000, b""), send)

    assert [message["type"] for message in reads] == ["http.request", "http.disconnect"]
    assert [message.get("status") for message in sent] == [200, None]
    assert sent[1]["body"] == b"done"


@pytest.mark.anyio
async def test_an_app_that_answered_first_and_fails_on_the_cut_off_body_raises_nothing() -> None:
    script = Script(b"a" * 1000, b"b" * 1000, b"")

    async def early(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await Request(scope, receive).body()  # raises ClientDisconnect on the disconnect

    await LimitsMiddleware(early, max_request_bytes=LIMIT, limiter=None)(
        http_scope(), script.receive, script.send
    )

    assert [message.get("status") for message in script.sent] == [200]


@pytest.mark.anyio
async def test_an_app_shielded_from_cancellation_cannot_send_a_second_response() -> None:
    script = Script(b"a" * 1000, b"b" * 1000, b"")
    finished: list[bool] = []

    async def shielded(scope: Scope, receive: Receive, send: Send) -> None:
        with anyio.CancelScope(shield=True):
            body = b""
            while (message := await receive())["type"] == "http.request":
                body += message["body"]
            await JSONResponse({"size": len(body)})(scope, receive, send)
            finished.append(True)

    await LimitsMiddleware(shielded, max_request_bytes=LIMIT, limiter=None)(
        http_scope(), script.receive, script.send
    )

    assert finished == [True]
    assert [message.get("status") for message in script.sent] == [413, None]


@pytest.mark.anyio
async def test_the_rest_of_a_body_a_little_over_the_limit_is_read_before_the_413() -> None:
    echo = EchoApp()
    script = Script(b"a" * 1000, b"b" * 500, b"c" * 500, b"")

    await limited(echo)(http_scope(), script.receive, script.send)

    # Reading the rest lets a client that is still sending finish and read the answer.
    assert script.events == ["receive"] * 4 + ["send 413", "send"]
    assert script.unread == []


@pytest.mark.anyio
async def test_a_streamed_body_far_over_the_limit_is_not_read_to_its_end() -> None:
    echo = EchoApp()
    script = Script(*[b"x" * 1000] * 10, b"")

    await limited(echo)(http_scope(), script.receive, script.send)

    assert script.sent[0]["status"] == 413
    # Two chunks reach the limit, then at most another limit's worth is thrown away.
    assert len(script.unread) == 11 - 4


@pytest.mark.anyio
@pytest.mark.parametrize(("declared", "reads"), [(2 * LIMIT, 2), (2 * LIMIT + 1, 0)])
async def test_a_declared_body_is_read_and_dropped_only_up_to_twice_the_limit(
    declared: int, reads: int
) -> None:
    echo = EchoApp()
    half = declared // 2
    script = Script(b"x" * half, b"x" * (declared - half))

    await limited(echo)(
        http_scope([(b"content-length", str(declared).encode())]), script.receive, script.send
    )

    assert script.events == ["receive"] * reads + ["send 413", "send"]
    assert echo.calls == 0


@pytest.mark.anyio
@pytest.mark.parametrize("value", [b"abc", b"-1", b"+5", b"1_000", b"", b"\xd9\xa1"])
async def test_a_malformed_content_length_is_a_400_and_the_app_is_not_called(value: bytes) -> None:
    echo = EchoApp()
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope = http_scope([(b"content-length", value)])
    await limited(echo)(scope, scripted_receive(b"x"), send)

    assert sent[0]["status"] == 400
    assert sent[1]["body"] == b'{"error":"malformed content-length header"}'
    assert echo.calls == 0


@pytest.mark.anyio
async def test_conflicting_content_lengths_are_a_400() -> None:
    echo = EchoApp()
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope = http_scope([(b"content-length", b"1"), (b"Content-Length", b"2")])
    await limited(echo)(scope, scripted_receive(b"x"), send)

    assert sent[0]["status"] == 400
    assert echo.calls == 0


# --- over real HTTP and in front of the SDK's routes ------------------------------------------


@pytest.mark.anyio
async def test_over_loopback_http_a_client_still_sending_reads_its_413() -> None:
    echo = EchoApp()
    stop = anyio.Event()

    async def slow_upload(count: int) -> AsyncIterator[bytes]:
        for _ in range(count):
            yield b"x" * 300
            await anyio.sleep(0.005)

    responses: list[httpx.Response] = []
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve_http, limited(echo), "127.0.0.1:0", 1.0, stop.wait)
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
                # 1800 bytes sent slowly, in chunks; the 413 comes while the client still sends.
                responses.append(await client.post("/", content=slow_upload(6)))
                responses.append(await client.post("/", content=b"y" * (LIMIT + 500)))
                responses.append(await client.post("/", content=slow_upload(3)))
        finally:
            stop.set()
    chunked, declared, fine = responses

    assert (chunked.status_code, declared.status_code, fine.status_code) == (413, 413, 200)
    assert chunked.json() == declared.json() == {"error": f"request body over {LIMIT} bytes"}
    assert echo.bodies == [b"x" * 900]


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/", "/message:send", "/message:stream"])
async def test_the_sdks_routes_answer_a_cut_off_body_with_one_413_and_log_no_error(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The handler is never reached: the body is refused while the route is still reading it.
    handler = MagicMock(spec=RequestHandler)
    routes = [*create_jsonrpc_routes(handler, rpc_url="/"), *create_rest_routes(handler)]
    app = LimitsMiddleware(Starlette(routes=routes), max_request_bytes=LIMIT, limiter=None)
    headers = {"content-type": "application/json", "a2a-version": "1.0"}

    async with client_for(app) as client:
        response = await client.post(path, content=chunks(300, 10), headers=headers)

    assert response.status_code == 413
    assert response.json() == {"error": f"request body over {LIMIT} bytes"}
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert handler.mock_calls == []


# --- rate ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_client_over_its_rate_gets_429_with_retry_after_and_others_still_pass() -> None:
    echo = EchoApp()
    app = limited(echo, RateLimiter(2, clock=Clock()))

    async with client_for(app, "10.0.0.1") as first, client_for(app, "10.0.0.2") as second:
        statuses = [(await first.post("/", content=b"hi")).status_code for _ in range(2)]
        refused = await first.post("/", content=b"hi")
        other = await second.post("/", content=b"hi")

    assert statuses == [200, 200]
    assert refused.status_code == 429
    assert refused.json() == {"error": "too many requests"}
    assert refused.headers["retry-after"] == "30"
    assert other.status_code == 200
    assert echo.calls == 3


@pytest.mark.anyio
async def test_a_refused_client_is_let_in_again_once_its_bucket_refills() -> None:
    clock = Clock()
    echo = EchoApp()
    app = limited(echo, RateLimiter(2, clock=clock))

    async with client_for(app) as client:
        for _ in range(2):
            await client.post("/", content=b"hi")
        clock.now += 29
        early = await client.post("/", content=b"hi")
        clock.now += 1
        refilled = await client.post("/", content=b"hi")
        again = await client.post("/", content=b"hi")

    assert early.status_code == 429
    assert early.headers["retry-after"] == "1"
    assert refilled.status_code == 200
    assert again.status_code == 429


@pytest.mark.anyio
async def test_the_rate_is_checked_before_the_body_size() -> None:
    app = limited(EchoApp(), RateLimiter(1, clock=Clock()))

    async with client_for(app) as client:
        first = await client.post("/", content=b"y" * (LIMIT + 1))
        second = await client.post("/", content=b"y" * (LIMIT + 1))

    assert (first.status_code, second.status_code) == (413, 429)


@pytest.mark.anyio
async def test_a_request_without_a_client_address_is_limited_as_one_peer() -> None:
    echo = EchoApp()
    app = limited(echo, RateLimiter(1, clock=Clock()))
    statuses: list[int] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    for _ in range(2):
        scope = http_scope()
        scope["client"] = None
        await app(scope, scripted_receive(b""), send)

    assert statuses == [200, 429]


# --- other scopes ----------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["lifespan", "websocket"])
async def test_scopes_other_than_http_pass_through_untouched(kind: str) -> None:
    seen: list[tuple[Scope, Receive, Send]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope, receive, send))

    async def receive() -> Message:
        return {"type": f"{kind}.startup" if kind == "lifespan" else "websocket.connect"}

    async def send(message: Message) -> None:
        raise AssertionError("the middleware must not answer")

    # A limiter that has nothing left would refuse any HTTP request.
    limiter = RateLimiter(1, clock=Clock())
    limiter.allow("10.0.0.1")
    scope: Scope = {"type": kind, "client": ("10.0.0.1", 40000), "headers": []}
    await LimitsMiddleware(app, max_request_bytes=LIMIT, limiter=limiter)(scope, receive, send)

    assert seen == [(scope, receive, send)]


# --- the limiter on its own ------------------------------------------------------------------


def test_a_new_peer_can_burst_up_to_the_rate_then_waits_for_one_token() -> None:
    clock = Clock()
    limiter = RateLimiter(60, clock=clock)

    granted = sum(limiter.allow("a") for _ in range(100))

    assert granted == 60
    assert limiter.retry_after("a") == 1
    clock.now += 1
    assert limiter.allow("a") is True
    assert limiter.allow("a") is False


def test_a_bucket_never_holds_more_than_one_minutes_worth() -> None:
    clock = Clock()
    limiter = RateLimiter(3, clock=clock)
    limiter.allow("a")
    clock.now += 3600

    assert sum(limiter.allow("a") for _ in range(10)) == 3


def test_peers_whose_bucket_refilled_are_forgotten_once_many_are_remembered() -> None:
    clock = Clock()
    limiter = RateLimiter(2, clock=clock)
    for index in range(10_000):
        limiter.allow(f"peer-{index}")
    clock.now += 59
    limiter.allow("busy")
    limiter.allow("busy")
    clock.now += 1

    limiter.allow("newcomer")

    assert len(limiter) == 2
    assert limiter.allow("busy") is False


def test_a_limiter_needs_at_least_one_request_a_minute() -> None:
    with pytest.raises(ValueError, match="0 means no limiter"):
        RateLimiter(0)


def test_json_error_is_the_runtimes_error_body() -> None:
    response = json_error(429, "too many requests", {"retry-after": "5"})

    assert response.status_code == 429
    assert response.body == b'{"error":"too many requests"}'
    assert response.headers["retry-after"] == "5"
