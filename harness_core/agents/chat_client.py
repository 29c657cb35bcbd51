"""The OpenAI client a ``kind = "openai"`` model sends through: the SDK's, with a short path for
a whole (unstreamed) Chat Completions request.

pydantic-ai maps the conversation and the response; the ``openai`` SDK carries the request. For
one JSON ``POST`` the SDK's generic machinery costs more CPU than the rest of the model step: it
walks every message and tool against the request's ``TypedDict`` annotations (to rename aliased
keys and format dates and files, none of which a Chat Completions body has), builds its request
options, then constructs the response. Measured on a request with one tool (``bench/README.md``):
6.2 ms of CPU through the SDK, 3.8 ms through :class:`ChatClient`.

So :class:`ChatClient` is an ``openai.AsyncOpenAI`` whose ``chat.completions.create`` sends a
whole request itself, on the client's own connection pool, with the headers the SDK sends (its
defaults, the API key, ``x-stainless-retry-count: 0``). What it answers, or raises, is what the
SDK's would be: the response is built with the SDK's lenient ``construct`` (as the SDK builds
it), an HTTP error is the SDK's exception class for its status, a timeout ``APITimeoutError``, a
failed connection ``APIConnectionError``; pydantic-ai classifies them as before. Anything it does
not handle goes to the SDK unchanged: a streamed request, extra query parameters, a client with
default query parameters, or a body that is not plain JSON (the SDK would transform it).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from functools import cached_property
from typing import Any, cast

import httpx2
import openai
from openai.resources.chat import AsyncChat
from openai.resources.chat.completions import AsyncCompletions
from openai.types.chat import ChatCompletion

__all__ = ["ChatClient"]

# ``create`` keywords that are options of the request, not fields of its body.
_REQUEST_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})

# The SDK's exception for each HTTP status (``_make_status_error`` in its client).
_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def _given(value: object) -> bool:
    return not isinstance(value, openai.Omit | openai.NotGiven)


class _Completions(AsyncCompletions):
    def __init__(self, client: ChatClient) -> None:
        super().__init__(client)
        self._chat_client = client

    async def create(self, **params: Any) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        client = self._chat_client
        sdk = cast("Callable[..., Awaitable[object]]", super().create)
        extra_query: object = params.get("extra_query")
        if params.get("stream") is True or (extra_query and _given(extra_query)):
            return await sdk(**params)
        if client.default_query or client.workload_identity is not None:
            return await sdk(**params)
        body = {k: v for k, v in params.items() if k not in _REQUEST_OPTIONS and _given(v)}
        extra_body: object = params.get("extra_body")
        if isinstance(extra_body, Mapping):
            body.update(cast("Mapping[str, object]", extra_body))
        try:
            content = json.dumps(body, ensure_ascii=False).encode()
        except (TypeError, ValueError):
            return await sdk(**params)
        return await client.send_completion(
            content, params.get("extra_headers"), params.get("timeout")
        )


class _Chat(AsyncChat):
    def __init__(self, client: ChatClient) -> None:
        super().__init__(client)
        self._chat_client = client

    @cached_property
    def completions(self) -> AsyncCompletions:  # pyright: ignore[reportIncompatibleMethodOverride]
        return _Completions(self._chat_client)


class ChatClient(openai.AsyncOpenAI):
    """``openai.AsyncOpenAI`` with the short path above; built with the HTTP client it sends on
    (``openai.DefaultAsyncHttpxClient()``), which :meth:`close` closes."""

    def __init__(self, *, http_client: httpx2.AsyncClient, **options: Any) -> None:
        super().__init__(http_client=http_client, **options)
        self.http = http_client

    @cached_property
    def chat(self) -> AsyncChat:  # pyright: ignore[reportIncompatibleMethodOverride]
        return _Chat(self)

    async def send_completion(
        self, content: bytes, extra_headers: object, limit: object
    ) -> ChatCompletion:
        """POST one Chat Completions body (``limit``: the request's timeout, if given); the
        response as the SDK would build it."""
        # Merged by name, in any spelling, as the SDK merges them: a request's own header (its
        # User-Agent, say) replaces the client's, and one given as ``Omit`` is not sent.
        merged: dict[str, object] = {"x-stainless-retry-count": "0"}
        extra: Mapping[str, object] = {}
        if isinstance(extra_headers, Mapping):
            extra = cast("Mapping[str, object]", extra_headers)
        for source in (self.default_headers, self.auth_headers, extra):
            merged.update((name.lower(), value) for name, value in source.items())
        sent = {k: str(v) for k, v in merged.items() if _given(v) and v is not None}
        request = self.http.build_request(
            "POST",
            str(self.base_url) + "chat/completions",
            content=content,
            headers=sent,
            timeout=cast(Any, limit if limit is not None and _given(limit) else self.timeout),
        )
        try:
            response = await self.http.send(request)
        except httpx2.TimeoutException as error:
            raise openai.APITimeoutError(request=request) from error
        except httpx2.HTTPError as error:
            raise openai.APIConnectionError(request=request) from error
        if response.status_code >= 400:
            raise _status_error(response)
        data = _json(response.text)
        if not isinstance(data, dict):
            raise openai.APIResponseValidationError(
                response=response, body=response.text, message="the answer is not a JSON object"
            )
        return ChatCompletion.construct(**cast("dict[str, Any]", data))


def _json(text: str) -> object:
    """The JSON value of ``text``, or ``text`` itself when it is not JSON."""
    try:
        return cast(object, json.loads(text))
    except ValueError:
        return text


def _status_error(response: httpx2.Response) -> openai.APIStatusError:
    """The SDK's exception for an HTTP error, with the SDK's message and body (pydantic-ai reads
    the body for the error's category)."""
    message = f"Error code: {response.status_code}"
    body = _json(response.text.strip())
    data: object = body
    if isinstance(body, dict):
        fields = cast("dict[str, object]", body)
        data = fields.get("error", fields)
        if isinstance(data, dict):
            said: object = cast("dict[str, object]", data).get("message")
            if isinstance(said, str) and said:
                message += f" - {said}"
    status = response.status_code
    kind = _STATUS_ERRORS.get(status)
    if kind is None:
        kind = openai.InternalServerError if status >= 500 else openai.APIStatusError
    return kind(message, response=response, body=cast(object, data))
