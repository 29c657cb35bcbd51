"""The request guard: an A2A request's body is checked before the SDK parses it.

The SDK answers malformed input with its parsers' own words (``'utf-8' codec can't decode byte
0xff``, ``maximum recursion depth exceeded``, ``invalid literal for int()``), logs each with a traceback,
and answers some with 500. The guard decides first, and answers with the A2A error the input deserves
and a message of ours, never a parser's:

* JSON-RPC (``POST`` at the agent's root): a ``Content-Type`` other than JSON is 415 (code -32600);
  a body that is not UTF-8, not JSON, or holds a string that is not Unicode (a lone surrogate) is
  -32700; a request that is not one object with ``"jsonrpc": "2.0"``, a method name and an id that
  is a string, an integer or null is -32600; ``params`` that are not an object, or do not fit the
  method's request type, are -32602 (naming the field, when the parser names one).
* HTTP+JSON (``POST`` elsewhere): the same checks, answered as the SDK answers its own errors:
  415, or 400 ``INVALID_ARGUMENT`` with an ``ErrorInfo`` reason.
* Query parameters of a ``GET`` that are not numbers where the method wants one are 400 as well.

Each refusal is one line at INFO (``harness.http``), without a traceback. The guard wraps the SDK's
endpoints (``guard_routes``), so the app and the FastAPI router both have it; the body, which the
limits have bounded already, is read once and stays on the request for the SDK.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import (
    CancelTaskRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message as ProtoMessage
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import Receive, Scope, Send

__all__ = [
    "Refusal",
    "StreamGate",
    "check_jsonrpc",
    "check_rest",
    "guard_routes",
    "load_json",
    "read_body",
]

Endpoint = Callable[[Request], Awaitable[Response]]

log = logging.getLogger("harness.http")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601

_METHODS: Mapping[str, type[ProtoMessage]] = JsonRpcDispatcher.METHOD_TO_MODEL
# The request type of each HTTP+JSON route with a body (A2A 1.0 11.3), by its route path.
_REST_BODIES: Mapping[str, type[ProtoMessage]] = {
    "/message:send": SendMessageRequest,
    "/message:stream": SendMessageRequest,
    "/tasks/{id}:cancel": CancelTaskRequest,
    "/tasks/{id}:subscribe": SubscribeToTaskRequest,
    "/tasks/{id}/pushNotificationConfigs": TaskPushNotificationConfig,
}
# Query parameters that must be integers (ListTasks, GetTask), and one that must be a boolean.
_INTEGER_QUERY = frozenset({"pageSize", "historyLength", "page_size", "history_length"})
_BOOLEAN_QUERY = frozenset({"includeArtifacts", "include_artifacts"})
# A field the protobuf parser names in its complaint ("Failed to parse pageSize field: ...").
_FIELD = re.compile(r"Failed to parse (\w{1,64}) field")
_MAX_DEPTH = 64
# The members of a JSON-RPC 2.0 request.
_ENVELOPE = frozenset({"jsonrpc", "id", "method", "params"})


class Refusal(Exception):
    """A request the guard refuses: the HTTP status, the A2A (JSON-RPC) code and our message."""

    def __init__(self, status: int, code: int, message: str, request_id: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id


def _json_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _depth_ok(value: Any, depth: int = 0) -> bool:
    """Nested no deeper than ``_MAX_DEPTH``, and every string valid Unicode (no lone surrogate)."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(
            _depth_ok(k, depth + 1) and _depth_ok(v, depth + 1)
            for k, v in value.items()  # pyright: ignore[reportUnknownVariableType]
        )
    if isinstance(value, list):
        return all(_depth_ok(v, depth + 1) for v in value)  # pyright: ignore[reportUnknownVariableType]
    return True


def load_json(body: bytes, status: int) -> Any:
    """The body as JSON, or a parse-error refusal (JSON-RPC answers those with HTTP 200)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Refusal(status, PARSE_ERROR, "Parse error: the body is not UTF-8") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise Refusal(status, PARSE_ERROR, "Parse error: the body is not valid JSON") from None
    if not _depth_ok(value):
        raise Refusal(
            status,
            PARSE_ERROR,
            f"Parse error: the body nests deeper than {_MAX_DEPTH} levels or holds a string that is "
            "not Unicode",
        )
    return value


def _fits(params: dict[str, Any], model: type[ProtoMessage]) -> str | None:
    """None when ``params`` parse as ``model``; otherwise what is wrong, in our words."""
    try:
        ParseDict(params, model(), ignore_unknown_fields=True)
    except Exception as error:  # the parser raises ParseError, TypeError, ValueError, ...
        found = _FIELD.search(str(error))
        if found:
            return f"the field {found.group(1)} does not have the type its schema gives"
        return "they do not match the schema of the method's request"
    return None


def check_jsonrpc(headers: Mapping[str, str], body: bytes) -> str:
    """Raise ``Refusal`` when a JSON-RPC request is malformed; return its method when the SDK may
    take it."""
    if not _json_type(headers.get("content-type", "")):
        raise Refusal(415, INVALID_REQUEST, "Content-Type must be application/json")
    data = load_json(body, 200)
    if isinstance(data, list):
        raise Refusal(200, INVALID_REQUEST, "Invalid Request: batch requests are not supported")
    if not isinstance(data, dict):
        raise Refusal(200, INVALID_REQUEST, "Invalid Request: a request is a JSON object")
    request: dict[str, Any] = data  # pyright: ignore[reportUnknownVariableType]
    request_id = request.get("id")
    extra = sorted(set(request) - _ENVELOPE)
    if extra:
        # The SDK's library refuses them in its own words, with a traceback in the log.
        shown = extra[0] if len(extra[0]) <= 64 else extra[0][:64] + "..."
        raise Refusal(
            200,
            INVALID_REQUEST,
            f"Invalid Request: unknown member {shown!r} (a request has jsonrpc, id, method and "
            "params)",
            request_id
            if isinstance(request_id, str | int) and not isinstance(request_id, bool)
            else None,
        )
    if request_id is not None and (
        isinstance(request_id, bool) or not isinstance(request_id, str | int)
    ):
        raise Refusal(
            200, INVALID_REQUEST, "Invalid Request: id must be a string, an integer or null"
        )
    if request.get("jsonrpc") != "2.0":
        raise Refusal(200, INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"', request_id)
    method = request.get("method")
    if not isinstance(method, str) or not method:
        raise Refusal(
            200, INVALID_REQUEST, "Invalid Request: method must be a method name", request_id
        )
    params = request.get("params", {})
    if not isinstance(params, dict):
        raise Refusal(200, INVALID_PARAMS, "Invalid params: params must be an object", request_id)
    model = _METHODS.get(method)
    if model is None:
        # Answered here: the SDK's library refuses some names (rpc.*) in its own words, with a
        # traceback in the log.
        shown = method if len(method) <= 64 else method[:64] + "..."
        raise Refusal(200, METHOD_NOT_FOUND, f"Method not found: {shown!r}", request_id)
    problem = _fits(params, model)  # pyright: ignore[reportUnknownArgumentType]
    if problem is not None:
        raise Refusal(200, INVALID_PARAMS, f"Invalid params for {method}: {problem}", request_id)
    return method


def check_rest(
    method: str,
    headers: Mapping[str, str],
    body: bytes,
    query: str,
    model: type[ProtoMessage] | None,
) -> None:
    """Raise ``Refusal`` when an HTTP+JSON request is malformed; ``model`` is the request type
    of the route's body (None: the route takes none)."""
    _check_query(query)
    if method != "POST" or not body.strip():
        return
    if not _json_type(headers.get("content-type", "")):
        raise Refusal(415, INVALID_REQUEST, "Content-Type must be application/json")
    data = load_json(body, 400)
    if not isinstance(data, dict):
        raise Refusal(400, INVALID_REQUEST, "the body must be a JSON object")
    if model is not None:
        problem = _fits(data, model)  # pyright: ignore[reportUnknownArgumentType]
        if problem is not None:
            raise Refusal(400, INVALID_PARAMS, f"invalid request body: {problem}")


def _check_query(query: str) -> None:
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in _INTEGER_QUERY and not re.fullmatch(r"-?\d{1,9}", value):
            raise Refusal(400, INVALID_PARAMS, f"the query parameter {key} must be an integer")
        if key in _BOOLEAN_QUERY and value.lower() not in ("true", "false", "1", "0", ""):
            raise Refusal(400, INVALID_PARAMS, f"the query parameter {key} must be true or false")


def _rest_body(refusal: Refusal) -> dict[str, Any]:
    status = {400: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT"}.get(refusal.status, "INTERNAL")
    reason = "INVALID_PARAMS" if refusal.code == INVALID_PARAMS else "INVALID_REQUEST"
    return {
        "error": {
            "code": refusal.status,
            "status": status,
            "message": refusal.message,
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason,
                    "domain": "a2a-protocol.org",
                    "metadata": {},
                }
            ],
        }
    }


#: The answer to a client that left in the middle of its body (nobody will read it).
_GONE = Response(status_code=400)


async def read_body(request: Request) -> bytes | None:
    """The request's body, or None (logged at INFO) when the client went away before sending all
    of it (a body shorter than its Content-Length)."""
    try:
        return await request.body()
    except ClientDisconnect:
        log.info("%s %s: the client left before its body ended", request.method, request.url.path)
        return None


def _refused(refusal: Refusal, request: Request, *, jsonrpc: bool) -> Response:
    log.info(
        "refused %s %s: %s (%d)",
        request.method,
        request.url.path,
        refusal.message,
        refusal.status,
    )
    if jsonrpc:
        content: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": refusal.request_id,
            "error": {"code": refusal.code, "message": refusal.message},
        }
    else:
        content = _rest_body(refusal)
    return JSONResponse(content, status_code=refusal.status)


class StreamGate:
    """Counts an agent's open streams (SSE responses) and refuses one past ``limit``
    (``[retention] max_streams``): each holds a connection and a follower until its task ends."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    async def guard(self, request: Request, endpoint: Endpoint, *, jsonrpc: bool) -> Response:
        if self.open >= self.limit:
            log.info(
                "refused a stream: %d are open, the most [retention] max_streams allows", self.open
            )
            refusal = Refusal(
                503,
                INVALID_REQUEST,
                f"too many open streams ({self.limit}); retry later, or poll with GetTask",
            )
            response = _refused(refusal, request, jsonrpc=jsonrpc)
            response.headers["Retry-After"] = "5"
            return response
        self.open += 1
        try:
            response = await endpoint(request)
        except BaseException:
            self.open -= 1
            raise
        return _Released(response, self._leave)

    def _leave(self) -> None:
        self.open -= 1


class _Released(Response):
    """A response that gives its stream's place back once it has been sent (or cut off)."""

    def __init__(self, inner: Response, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release = release
        self.status_code = inner.status_code
        self.background = None

    @property
    def headers(self) -> Any:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self._inner.headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._inner(scope, receive, send)
        finally:
            self._release()


_STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask"})


def guarded_jsonrpc(endpoint: Endpoint, streams: StreamGate) -> Endpoint:
    """The SDK's JSON-RPC endpoint behind ``check_jsonrpc`` (and, for a stream, ``streams``)."""

    async def jsonrpc(request: Request) -> Response:
        body = await read_body(request)  # kept on the request for the SDK's own read
        if body is None:
            return _GONE
        try:
            method = check_jsonrpc(request.headers, body)
        except Refusal as refusal:
            return _refused(refusal, request, jsonrpc=True)
        if method in _STREAMING:
            return await streams.guard(request, endpoint, jsonrpc=True)
        return await endpoint(request)

    jsonrpc.__doc__ = endpoint.__doc__
    return jsonrpc


def guarded_rest(endpoint: Endpoint, path: str, streams: StreamGate) -> Endpoint:
    """An SDK HTTP+JSON endpoint (its route's ``path``) behind ``check_rest`` (and, for a
    stream, ``streams``)."""
    model = _REST_BODIES.get(path)
    streaming = path.endswith((":stream", ":subscribe"))

    async def rest(request: Request) -> Response:
        body = b""
        if request.method == "POST":
            read = await read_body(request)
            if read is None:
                return _GONE
            body = read
        try:
            check_rest(request.method, request.headers, body, request.url.query, model)
            if request.method == "POST" and not body.strip() and model is not None:
                # No body: the request's fields are all in its path (a cancel); the SDK parses
                # the body whatever it is, so give it an empty object.
                setattr(request, "_body", b"{}")  # noqa: B010 - Starlette's body cache
        except Refusal as refusal:
            return _refused(refusal, request, jsonrpc=False)
        if streaming:
            return await streams.guard(request, endpoint, jsonrpc=False)
        return _as_specified(await endpoint(request))

    rest.__doc__ = endpoint.__doc__
    return rest


def _as_specified(response: Response) -> Response:
    """An SDK HTTP+JSON answer as A2A 1.0 specifies it where the SDK differs: JSON is labelled
    ``application/json`` (11.1; the SDK says ``application/a2a+json``), and ContentTypeNotSupported
    is ``415 Unsupported Media Type`` (5.4; the SDK sends 400)."""
    media = response.headers.get("content-type", "")
    if media.startswith("application/a2a+json"):
        response.headers["content-type"] = "application/json"
    elif not media.startswith("application/json"):
        return response  # a stream, or nothing
    if response.status_code == 400 and b'"CONTENT_TYPE_NOT_SUPPORTED"' in bytes(response.body):
        response.status_code = 415
    return response


def guard_routes(
    jsonrpc: list[BaseRoute], rest: list[BaseRoute], streams: StreamGate
) -> tuple[list[BaseRoute], list[BaseRoute]]:
    """The SDK's routes with every endpoint behind the guard (the tenant mount's too)."""

    def rest_route(route: BaseRoute) -> BaseRoute:
        if isinstance(route, Route):
            return Route(
                route.path,
                guarded_rest(route.endpoint, route.path, streams),
                methods=sorted(route.methods or ()),
                name=route.name,
            )
        if isinstance(route, Mount):
            return Mount(route.path, routes=[rest_route(r) for r in route.routes])
        return route

    def jsonrpc_route(route: BaseRoute) -> BaseRoute:
        if isinstance(route, Route):
            return Route(
                route.path,
                guarded_jsonrpc(route.endpoint, streams),
                methods=sorted(route.methods or ()),
                name=route.name,
            )
        return route

    return [jsonrpc_route(r) for r in jsonrpc], [rest_route(r) for r in rest]
