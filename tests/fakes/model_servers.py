"""Scripted model servers on loopback: an OpenAI-compatible one and an Anthropic one, for tests.

Each is real HTTP (Hypercorn on ``127.0.0.1``, port 0) so that the real ``openai`` and ``anthropic``
SDKs, driven by pydantic-ai, talk to it exactly as they talk to a provider: the model is the only
thing scripted (STYLE 7). A server answers each request with the next item of its script:

- :class:`Reply`: text, sent as the given deltas when streamed, and/or tool calls (their JSON
  arguments are split across two deltas, as providers do);
- :class:`ErrorReply`: an HTTP error in the provider's shape, with ``Retry-After`` when given. Its
  message echoes the API key the request carried, as some real servers do ("Incorrect API key
  provided: sk-..."), so a test can check that the key never reaches our error text;
- either can wait ``delay`` seconds first.

Once the script is used up every request gets a 500 saying so. Each request's JSON body and its
``Authorization`` / ``x-api-key`` headers are recorded in :attr:`FakeServer.requests`.

The server runs on its own asyncio loop in a background thread, so a test on either AnyIO backend
(or Temporal's asyncio worker thread) can call it; the thread is joined when the server stops.
This test-support module, like the Hypercorn runner, is allowed to name asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

import attrs
from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = [
    "ErrorReply",
    "FakeServer",
    "FakeToolCall",
    "RecordedRequest",
    "Reply",
    "ScriptItem",
    "error_reply",
    "serve_fake_anthropic",
    "serve_fake_openai",
    "text_reply",
    "tool_call_reply",
]

MODEL_USAGE_INPUT_TOKENS = 11
MODEL_USAGE_OUTPUT_TOKENS = 7


@attrs.frozen
class FakeToolCall:
    """A tool call the fake model makes: the tool's name and its arguments as JSON text."""

    name: str
    arguments: str
    call_id: str | None = None


@attrs.frozen
class Reply:
    """One successful answer: text (as these deltas when streamed) and/or tool calls."""

    text: tuple[str, ...] = ()
    tool_calls: tuple[FakeToolCall, ...] = ()
    delay: float = 0.0


@attrs.frozen
class ErrorReply:
    """One failed answer: an HTTP error status, with a ``Retry-After`` header when given."""

    status: int
    retry_after: int | None = None  # seconds; HTTP allows whole seconds (or a date) only
    delay: float = 0.0


ScriptItem = Reply | ErrorReply


def text_reply(*deltas: str, delay: float = 0.0) -> Reply:
    """A text answer streamed as ``deltas`` (sent joined when not streamed)."""
    return Reply(text=deltas, delay=delay)


def tool_call_reply(
    name: str,
    arguments: Mapping[str, Any] | str,
    *,
    call_id: str | None = None,
    text: Iterable[str] = (),
    delay: float = 0.0,
) -> Reply:
    """An answer that calls one tool (after optional text)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(text=tuple(text), tool_calls=(FakeToolCall(name, args, call_id),), delay=delay)


def error_reply(status: int, *, retry_after: int | None = None, delay: float = 0.0) -> ErrorReply:
    """An HTTP error answer."""
    return ErrorReply(status=status, retry_after=retry_after, delay=delay)


@attrs.frozen
class RecordedRequest:
    """A request the fake server received: its path, lower-cased headers and JSON body."""

    path: str
    headers: Mapping[str, str]
    body: Any
    #: Every header name as sent, lower-cased, repeats included.
    names: tuple[str, ...] = ()

    @property
    def authorization(self) -> str | None:
        """The ``Authorization`` header (OpenAI-compatible clients send ``Bearer <key>``)."""
        return self.headers.get("authorization")

    @property
    def x_api_key(self) -> str | None:
        """The ``x-api-key`` header (the Anthropic client sends the key here)."""
        return self.headers.get("x-api-key")


Flavor = Literal["openai", "anthropic"]


class FakeServer:
    """A scripted model server running in a background thread until :meth:`stop`.

    ``base_url`` is what the provider's SDK takes as its base URL: ``http://127.0.0.1:PORT/v1`` for
    the OpenAI-compatible server (the SDK appends ``/chat/completions``) and
    ``http://127.0.0.1:PORT`` for the Anthropic one (the SDK appends ``/v1/messages``).
    """

    def __init__(self, flavor: Flavor, script: Iterable[ScriptItem]) -> None:
        self.flavor: Flavor = flavor
        self._lock = threading.Lock()
        self._script: deque[ScriptItem] = deque(script)
        self._requests: list[RecordedRequest] = []
        self._calls = 0
        #: Answers the requests it returns a reply for, before the script is asked (e.g. the
        #: summary requests of a compaction, whose moment a test cannot tell in advance).
        self.responder: Callable[[RecordedRequest], ScriptItem | None] | None = None
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = int(self._sock.getsockname()[1])
        root = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{root}/v1" if flavor == "openai" else root
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._stopped = False
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fake-{flavor}-{self.port}")
        self._thread.start()
        # The socket already listens, so connections queue; waiting for the loop is what lets
        # stop() reach it.
        self._started.wait()

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def push(self, *items: ScriptItem) -> None:
        """Append items to the script."""
        with self._lock:
            self._script.extend(items)

    def stop(self) -> None:
        """Stop serving and join the thread; re-raises what the server thread failed with, if anything."""
        if self._stopped:
            return
        self._stopped = True
        loop, stop_event = self._loop, self._stop_event
        if loop is not None and stop_event is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended (the server failed)
                loop.call_soon_threadsafe(stop_event.set)
        self._thread.join(timeout=30)
        self._sock.close()
        if self._thread.is_alive():
            raise RuntimeError(f"the fake {self.flavor} server on port {self.port} did not stop")
        if self._failure is not None:
            raise RuntimeError(f"the fake {self.flavor} server failed") from self._failure

    # -- the server thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:
            self._failure = error
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._started.set()
        config = Config()
        # Hypercorn wraps the descriptor in its own socket object and closes it; give it a copy.
        config.bind = [f"fd://{os.dup(self._sock.fileno())}"]
        config.graceful_timeout = 2.0
        config.accesslog = None
        config.errorlog = logging.getLogger("tests.fakes.model_servers")
        path = "/v1/chat/completions" if self.flavor == "openai" else "/v1/messages"
        app = Starlette(routes=[Route(path, self._handle, methods=["POST"])])
        await serve(app, config, shutdown_trigger=self._stop_event.wait)  # pyright: ignore[reportArgumentType]

    def _next(self, request: RecordedRequest) -> tuple[ScriptItem | None, int]:
        with self._lock:
            self._requests.append(request)
            self._calls += 1
            answered = self.responder(request) if self.responder is not None else None
            if answered is not None:
                return answered, self._calls
            return (self._script.popleft() if self._script else None), self._calls

    async def _handle(self, request: Request) -> Response:
        body = await request.json()
        headers = {key.lower(): value for key, value in request.headers.items()}
        names = tuple(name.decode("latin-1").lower() for name, _ in request.headers.raw)
        item, number = self._next(RecordedRequest(request.url.path, headers, body, names))
        if item is None:
            return JSONResponse(
                _error_body(self.flavor, 500, "the fake server's script is used up"),
                status_code=500,
            )
        if item.delay > 0:
            await asyncio.sleep(item.delay)
        if isinstance(item, ErrorReply):
            return _error_response(self.flavor, item, headers)
        model = str(body.get("model", "fake-model"))
        if self.flavor == "openai":
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return _sse(_openai_chunks(item, model, number, include_usage=include_usage))
            return JSONResponse(_openai_completion(item, model, number))
        if body.get("stream"):
            return _sse(_anthropic_events(item, model, number))
        return JSONResponse(_anthropic_message(item, model, number))


@contextlib.contextmanager
def serve_fake_openai(script: Iterable[ScriptItem] = ()) -> Iterator[FakeServer]:
    """A fake OpenAI-compatible server (``POST /v1/chat/completions``) for the block's duration."""
    server = FakeServer("openai", script)
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def serve_fake_anthropic(script: Iterable[ScriptItem] = ()) -> Iterator[FakeServer]:
    """A fake Anthropic Messages server (``POST /v1/messages``) for the block's duration."""
    server = FakeServer("anthropic", script)
    try:
        yield server
    finally:
        server.stop()


# -- errors ----------------------------------------------------------------------------------

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_OPENAI_ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


def _error_body(flavor: Flavor, status: int, message: str) -> dict[str, Any]:
    if flavor == "openai":
        kind = "invalid_request_error" if status < 500 else "server_error"
        return {
            "error": {
                "message": message,
                "type": kind,
                "param": None,
                "code": _OPENAI_ERROR_CODES.get(status),
            }
        }
    kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _error_response(flavor: Flavor, item: ErrorReply, headers: Mapping[str, str]) -> Response:
    key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
    message = f"fake error {item.status}; the request's API key was {key}"
    extra = {} if item.retry_after is None else {"retry-after": str(item.retry_after)}
    return JSONResponse(
        _error_body(flavor, item.status, message), status_code=item.status, headers=extra
    )


# -- OpenAI Chat Completions -----------------------------------------------------------------


def _call_id(call: FakeToolCall, prefix: str, number: int, index: int) -> str:
    return call.call_id or f"{prefix}_{number}_{index}"


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def _openai_usage() -> dict[str, int]:
    return {
        "prompt_tokens": MODEL_USAGE_INPUT_TOKENS,
        "completion_tokens": MODEL_USAGE_OUTPUT_TOKENS,
        "total_tokens": MODEL_USAGE_INPUT_TOKENS + MODEL_USAGE_OUTPUT_TOKENS,
    }


def _openai_completion(item: Reply, model: str, number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(item.text) or None}
    if item.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(call, "call", number, index),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for index, call in enumerate(item.tool_calls)
        ]
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if item.tool_calls else "stop",
            }
        ],
        "usage": _openai_usage(),
    }


def _openai_chunks(item: Reply, model: str, number: int, *, include_usage: bool) -> Iterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
        payload = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": choices,
            **extra,
        }
        return f"data: {json.dumps(payload)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for delta in item.text:
        yield chunk({"content": delta})
    for index, call in enumerate(item.tool_calls):
        start = {"index": index, "id": _call_id(call, "call", number, index), "type": "function"}
        yield chunk({"tool_calls": [{**start, "function": {"name": call.name, "arguments": ""}}]})
        for piece in _halves(call.arguments):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if item.tool_calls else "stop")
    if include_usage:
        payload = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [],
            "usage": _openai_usage(),
        }
        yield f"data: {json.dumps(payload)}\n\n"
    yield "data: [DONE]\n\n"


# -- Anthropic Messages ----------------------------------------------------------------------


def _anthropic_message(item: Reply, model: str, number: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if item.text:
        content.append({"type": "text", "text": "".join(item.text)})
    for index, call in enumerate(item.tool_calls):
        content.append(
            {
                "type": "tool_use",
                "id": _call_id(call, "toolu", number, index),
                "name": call.name,
                "input": json.loads(call.arguments),
            }
        )
    return {
        "id": f"msg_{number}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if item.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": MODEL_USAGE_INPUT_TOKENS,
            "output_tokens": MODEL_USAGE_OUTPUT_TOKENS,
        },
    }


def _anthropic_events(item: Reply, model: str, number: int) -> Iterator[str]:
    def event(kind: str, **payload: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n"

    message = _anthropic_message(Reply(), model, number)
    message["usage"] = {"input_tokens": MODEL_USAGE_INPUT_TOKENS, "output_tokens": 1}
    message["stop_reason"] = None
    yield event("message_start", message=message)
    yield event("ping")
    index = 0
    if item.text:
        yield event("content_block_start", index=index, content_block={"type": "text", "text": ""})
        for delta in item.text:
            yield event(
                "content_block_delta", index=index, delta={"type": "text_delta", "text": delta}
            )
        yield event("content_block_stop", index=index)
        index += 1
    for position, call in enumerate(item.tool_calls):
        block = {
            "type": "tool_use",
            "id": _call_id(call, "toolu", number, position),
            "name": call.name,
            "input": {},
        }
        yield event("content_block_start", index=index, content_block=block)
        for piece in _halves(call.arguments):
            yield event(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": piece},
            )
        yield event("content_block_stop", index=index)
        index += 1
    yield event(
        "message_delta",
        delta={"stop_reason": "tool_use" if item.tool_calls else "end_turn", "stop_sequence": None},
        usage={"output_tokens": MODEL_USAGE_OUTPUT_TOKENS},
    )
    yield event("message_stop")


def _sse(events: Iterator[str]) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        for text in events:
            yield text

    return StreamingResponse(
        body(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
    )
