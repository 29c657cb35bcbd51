"""The language-model layer of the built-in LLM agent: one model request, as an activity runs it.

The agent's loop runs in a Temporal workflow, which cannot import pydantic-ai; each model request
and each tool call is an activity. This module is what those activities call (reference note,
"Implications" 3): pydantic-ai's provider-neutral models driven through ``pydantic_ai.direct``,
without ``pydantic_ai.Agent``. What crosses the workflow is JSON, so the history travels as
:func:`dump_messages` output and comes back through :func:`load_messages`, and a response is
described to the workflow by :func:`response_summary`.

- :func:`build_model`: a Chat Completions model (any OpenAI-compatible server) or an Anthropic one,
  with the SDK clients' own retries off, because Temporal owns retries (reference 1.7, Impl. 6).
- :func:`to_model_messages`: the task's :class:`~harness_core.agents.turn.TurnMessage` history as
  pydantic-ai messages.
- :func:`request`: one streamed request; text deltas go to a callback as they arrive.
- :class:`ModelCallError`: every provider failure, classified as retryable or not, with a message
  that is safe to log and show (never the provider's text, which may echo a key or the prompt).

pydantic-ai is an optional dependency (``a2a-harness[models]``); nothing else in the package
imports this module at module level.
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

import attrs
import httpx

from harness_core import telemetry
from harness_core.agents.turn import DataPart, FilePart, Part, TextPart, TurnMessage
from harness_core.errors import INSTALL_MODELS, HarnessError

try:
    import anthropic
    import httpx2
    import openai
    from pydantic_ai import exceptions as pai_errors
    from pydantic_ai import messages as pai
    from pydantic_ai.direct import model_request, model_request_stream
    from pydantic_ai.models import Model, ModelRequestParameters
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.providers.anthropic import AnthropicProvider
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import ToolDefinition

    from harness_core.agents.chat_client import ChatClient
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"harness_core.agents.llm needs pydantic-ai and the provider SDKs ({error.name} is missing): "
        + INSTALL_MODELS
    ) from error

__all__ = [
    "ModelCallError",
    "ModelKind",
    "ToolCall",
    "build_model",
    "close_model",
    "dump_messages",
    "load_messages",
    "model_call_error",
    "request",
    "response_summary",
    "to_model_messages",
    "tool_return_message",
]

ModelKind = Literal["openai", "anthropic", "test"]

#: Sent as the API key when none is configured, for local servers (Ollama, vLLM) that ignore it.
#: Both SDKs would otherwise read OPENAI_API_KEY / ANTHROPIC_API_KEY from the environment, or
#: refuse to start without a key.
NO_API_KEY = "no-key"

# Passed explicitly when no base URL is configured: with None the SDKs read OPENAI_BASE_URL /
# ANTHROPIC_BASE_URL, and an environment variable must not silently redirect a key's traffic.
_DEFAULT_BASE_URLS: Mapping[ModelKind, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}


def build_model(kind: ModelKind, name: str, *, base_url: str | None, api_key: str | None) -> Model:
    """The model ``name`` on a Chat Completions server (``"openai"``) or the Anthropic Messages API.

    ``"openai"`` speaks the Chat Completions API, which every OpenAI-compatible server implements
    (OpenAI, Ollama, vLLM, LiteLLM). Without ``base_url`` the provider's public endpoint is used;
    without ``api_key`` the placeholder :data:`NO_API_KEY` is sent (see there). The SDK clients
    never retry (``max_retries=0``): a failed request raises :class:`ModelCallError` from
    :func:`request` and Temporal's retry policy decides.

    Build a model once per worker and use it on that worker's event loop (its client holds a
    connection pool, bound to the loop that first uses it), then close it with :func:`close_model`.
    Nothing is sent until the first request.
    """
    if kind == "test":
        # pydantic-ai's TestModel: no server; it calls every tool it is offered once (arguments
        # made from each schema), then answers with what they returned.
        return TestModel(model_name=name or "test")
    url = base_url or _DEFAULT_BASE_URLS[kind]
    key = api_key or NO_API_KEY
    if kind == "openai":
        client = ChatClient(
            base_url=url,
            api_key=key,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(),
        )
        return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client))
    if kind == "anthropic":
        anthropic_client = anthropic.AsyncAnthropic(base_url=url, api_key=key, max_retries=0)
        return AnthropicModel(name, provider=AnthropicProvider(anthropic_client=anthropic_client))
    raise ValueError(f"model kind {kind!r} is not one of 'openai', 'anthropic', 'test'")


def server_of(kind: ModelKind, base_url: str | None) -> str:
    """The server a model of ``kind`` is asked at, as scheme, host, port and path: never the user
    information a URL may hold."""
    parts = urlsplit(base_url or _DEFAULT_BASE_URLS.get(kind, ""))
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


async def close_model(model: Model) -> None:
    """Close the connection pool of a model made by :func:`build_model`; other models are left alone."""
    client: object = getattr(model, "client", None)
    if isinstance(client, openai.AsyncOpenAI | anthropic.AsyncAnthropic):
        await client.close()


# -- history -------------------------------------------------------------------------------------

# Files sent as bytes only when every provider path here reads them (Chat Completions and
# Anthropic both take these images and PDFs); text files are inlined as text, which every model
# reads; any other file becomes a line naming it rather than a request the provider refuses.
_BINARY_MEDIA_TYPES = frozenset(
    {"image/jpeg", "image/png", "image/gif", "image/webp", "application/pdf"}
)
_IMAGE_MEDIA_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_TEXT_APPLICATION_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
    }
)


def to_model_messages(
    history: Sequence[TurnMessage], *, system: str | None
) -> list[pai.ModelMessage]:
    """The task's history as pydantic-ai messages, with ``system`` as the system prompt.

    Consecutive user messages are merged into one ``ModelRequest`` holding one ``UserPromptPart``
    per message (and consecutive agent messages into one ``ModelResponse``), so that the history
    alternates as the Anthropic API requires; the system prompt is the first request's first part.
    Messages without any content are left out, since providers refuse empty turns. The sender of a
    message is not sent to the model.

    A user message's parts become:

    - text: the text;
    - a file's bytes: ``BinaryContent`` for images (JPEG, PNG, GIF, WebP) and PDFs; the decoded text
      for ``text/*`` and JSON/XML/YAML/TOML files; for anything else (the media type defaults to
      ``application/octet-stream``) a line naming the file, since providers refuse other types;
    - a file's URL: ``ImageUrl`` for an image (the provider fetches it); for anything else a line
      naming the link. Chat Completions has no URL input for documents, so pydantic-ai would
      download them in the worker, fetching a participant's URL from inside our network;
    - data: a fenced JSON block.

    An agent message's text parts become ``TextPart`` s; its files and data become text as above.
    """
    messages: list[pai.ModelMessage] = []
    request_parts: list[pai.ModelRequestPart] = [pai.SystemPromptPart(system)] if system else []
    response_parts: list[pai.ModelResponsePart] = []

    def flush_request() -> None:
        if request_parts:
            messages.append(pai.ModelRequest(parts=list(request_parts)))
            request_parts.clear()

    def flush_response() -> None:
        if response_parts:
            messages.append(pai.ModelResponse(parts=list(response_parts)))
            response_parts.clear()

    for message in history:
        if message.role == "user":
            content = _user_content(message.parts)
            if content:
                flush_response()
                first = content[0]
                if len(content) == 1 and isinstance(first, str):
                    request_parts.append(pai.UserPromptPart(first))
                else:
                    request_parts.append(pai.UserPromptPart(content))
        else:
            texts = [_text_of(part) for part in message.parts]
            texts = [text for text in texts if text]
            if texts:
                flush_request()
                response_parts.extend(pai.TextPart(text) for text in texts)
    flush_request()
    flush_response()
    return messages


def _user_content(parts: Sequence[Part]) -> list[pai.UserContent]:
    content: list[pai.UserContent] = []
    for part in parts:
        if isinstance(part, FilePart):
            content.extend(_file_content(part))
        elif text := _text_of(part):
            content.append(text)
    return content


def _media_type(part: FilePart) -> str:
    media_type = part.media_type
    if media_type is None and part.url is not None:
        media_type = mimetypes.guess_type(part.url)[0]
    media_type = (media_type or "application/octet-stream").split(";")[0].strip().lower()
    return "image/jpeg" if media_type == "image/jpg" else media_type  # a common misspelling


def _is_text(media_type: str) -> bool:
    return (
        media_type.startswith("text/")
        or media_type in _TEXT_APPLICATION_TYPES
        or media_type.endswith(("+json", "+xml"))
    )


def _file_label(part: FilePart, media_type: str) -> str:
    return f"{part.name or 'unnamed file'} ({media_type})"


def _file_content(part: FilePart) -> list[pai.UserContent]:
    media_type = _media_type(part)
    label = _file_label(part, media_type)
    if part.data is not None:
        if media_type in _BINARY_MEDIA_TYPES:
            binary = pai.BinaryContent.narrow_type(
                pai.BinaryContent(part.data, media_type=media_type)
            )
            return [f"Attached file: {label}", binary] if part.name else [binary]
        if _is_text(media_type):
            return [f"Attached file: {label}\n{part.data.decode('utf-8', errors='replace')}"]
        return [
            f"Attached file: {label}, {len(part.data)} bytes, in a format the model cannot read"
        ]
    assert part.url is not None  # a FilePart has data or a url
    if media_type in _IMAGE_MEDIA_TYPES:
        image = pai.ImageUrl(part.url, media_type=media_type)
        return [f"Attached file: {label}", image] if part.name else [image]
    return [_text_of(part)]


def _text_of(part: Part) -> str:
    """A part as text: text as is, data as a fenced JSON block, a file as a line naming it."""
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, DataPart):
        return (
            "```json\n" + json.dumps(part.data, ensure_ascii=False, indent=2, default=str) + "\n```"
        )
    label = _file_label(part, _media_type(part))
    if part.url is not None:
        return f"Linked file: {label}: {part.url}"
    return f"Attached file: {label}, {len(part.data or b'')} bytes"


def dump_messages(messages: Sequence[pai.ModelMessage]) -> list[Any]:
    """Messages as JSON-ready values (bytes become base64 strings) that ``json.dumps`` accepts."""
    return pai.ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")


def load_messages(data: Sequence[Any]) -> list[pai.ModelMessage]:
    """Messages back from :func:`dump_messages` output (also after a trip through JSON text)."""
    return pai.ModelMessagesTypeAdapter.validate_python(list(data))


# -- one request ---------------------------------------------------------------------------------


class ModelCallError(HarnessError):
    """A model request failed; ``retryable`` says whether sending it again may succeed.

    The message is ours, never the provider's (which may echo the API key or the prompt), so it can
    be logged and shown. ``retry_after`` is the wait in seconds the provider asked for, if any;
    ``status_code`` the HTTP status, if there was one. The provider's exception is ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.retry_after = retry_after
        self.status_code = status_code

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild_model_call_error, (
            self.message,
            self.retryable,
            self.retry_after,
            self.status_code,
        )


def _rebuild_model_call_error(
    message: str, retryable: bool, retry_after: float | None, status_code: int | None
) -> ModelCallError:
    return ModelCallError(
        message, retryable=retryable, retry_after=retry_after, status_code=status_code
    )


async def request(
    model: Model,
    messages: Sequence[pai.ModelMessage],
    tools: Sequence[ToolDefinition],
    *,
    on_text_delta: Callable[[str], Awaitable[None]] | None = None,
    settings: ModelSettings | None = None,
    stream: bool = True,
) -> pai.ModelResponse:
    """Send one request and return the model's complete response (text and/or tool calls).

    Streamed (``stream``), ``on_text_delta`` is awaited with each piece of text as it arrives, in
    order; otherwise once, with the whole text, when the response is complete (a streamed
    response costs a parse per chunk: only worth it while somebody watches). An exception it
    raises ends the request and propagates unchanged. A failure of the model call raises
    :class:`ModelCallError` (the provider's exception is its ``__cause__``). If the caller is
    cancelled, the stream is closed and the cancellation propagates; nothing is retried here.
    """
    attributes = {"gen_ai.request.model": model.model_name, "gen_ai.system": model.system}
    with telemetry.span("model request", attributes):
        return await _request(model, messages, tools, on_text_delta, settings, stream)


async def _request(
    model: Model,
    messages: Sequence[pai.ModelMessage],
    tools: Sequence[ToolDefinition],
    on_text_delta: Callable[[str], Awaitable[None]] | None,
    settings: ModelSettings | None,
    stream: bool,
) -> pai.ModelResponse:
    parameters = ModelRequestParameters(function_tools=list(tools), allow_text_output=True)
    # What the handler raises is the caller's, not the model's: it must not be classified (an
    # httpx error from a handler that publishes deltas would look like a model server failure).
    handler_error: Exception | None = None
    try:
        if not stream:
            response = await model_request(
                model, list(messages), model_settings=settings, model_request_parameters=parameters
            )
            if response.text and on_text_delta is not None:
                try:
                    await on_text_delta(response.text)
                except Exception as error:
                    handler_error = error
                    raise
            return response
        async with model_request_stream(
            model, list(messages), model_settings=settings, model_request_parameters=parameters
        ) as streamed:
            async for event in streamed:
                delta = _text_delta(event)
                if delta and on_text_delta is not None:
                    try:
                        await on_text_delta(delta)
                    except Exception as error:
                        handler_error = error
                        raise
            return streamed.get()
    except Exception as error:
        classified = None if error is handler_error else model_call_error(error)
        if classified is None:
            raise
        raise classified from error


def _text_delta(event: pai.ModelResponseStreamEvent) -> str:
    if isinstance(event, pai.PartStartEvent) and isinstance(event.part, pai.TextPart):
        return event.part.content
    if isinstance(event, pai.PartDeltaEvent) and isinstance(event.delta, pai.TextPartDelta):
        return event.delta.content_delta
    return ""


# -- error classification ------------------------------------------------------------------------

_KEY_HINT = "check the variable named in model.api_key_env"
_REQUEST_HINT = "check model.name and model.base_url"


def _status_error(status: int, retry_after: float | None) -> ModelCallError:
    if status == 429 or status in (408, 409) or status >= 500:
        reason = {
            429: "rate limited",
            529: "overloaded",
            408: "request timeout",
            409: "conflict",
        }.get(status, "server error")
        return ModelCallError(
            f"the model server answered {status} ({reason})",
            retryable=True,
            retry_after=retry_after,
            status_code=status,
        )
    if status in (401, 403):
        return ModelCallError(
            f"the model server refused the API key ({status}): {_KEY_HINT}",
            retryable=False,
            status_code=status,
        )
    return ModelCallError(
        f"the model server refused the request ({status}): {_REQUEST_HINT}",
        retryable=False,
        status_code=status,
    )


def _headers_retry_after(status: int, headers: Mapping[str, str]) -> float | None:
    # ModelHTTPError parses retry-after-ms / Retry-After (seconds or HTTP date) on construction;
    # reuse that rather than keep a second parser.
    return pai_errors.ModelHTTPError(status, "model", headers=headers).retry_after


def _unreachable(timeout: bool) -> ModelCallError:
    if timeout:
        return ModelCallError("the model server did not answer in time (timeout)", retryable=True)
    return ModelCallError(
        "the connection to the model server failed (connection error)", retryable=True
    )


def model_call_error(error: BaseException) -> ModelCallError | None:
    """The :class:`ModelCallError` for an exception raised by a model request, or None if it is not one.

    pydantic-ai 2.68 maps what the SDKs raise into categorized ``ModelAPIError`` s: an HTTP error
    is a ``ModelHTTPError`` that is also its category (``ModelRateLimitError`` for 429, ...), a
    refused or dropped connection a ``ModelConnectionError``. The SDK and httpx exceptions are
    handled too in case one gets through unmapped.

    Retryable: 408, 409, 429, 5xx (529 overloaded), timeouts and connection errors. Not retryable:
    401/403 (the key), other 4xx (the request, model name or URL), exhausted quota or context
    window, a content filter, and requests that this model cannot take at all.
    """
    if isinstance(error, pai_errors.ModelAPIError):
        return _from_model_api_error(error)
    if isinstance(error, pai_errors.ContentFilterError):
        return ModelCallError(
            "the model server's content filter stopped the answer", retryable=False
        )
    if isinstance(error, pai_errors.UnexpectedModelBehavior):
        return ModelCallError(
            "the model's answer could not be read (UnexpectedModelBehavior)", retryable=False
        )
    if isinstance(error, openai.APIStatusError | anthropic.APIStatusError):
        headers = dict(error.response.headers)
        return _status_error(error.status_code, _headers_retry_after(error.status_code, headers))
    if isinstance(error, openai.APITimeoutError | anthropic.APITimeoutError):
        return _unreachable(timeout=True)
    if isinstance(error, openai.APIConnectionError | anthropic.APIConnectionError):
        return _unreachable(timeout=False)
    if isinstance(error, openai.APIError | anthropic.APIError):
        return ModelCallError("the model server failed (error in its answer)", retryable=True)
    if isinstance(error, httpx2.HTTPStatusError | httpx.HTTPStatusError):
        status = error.response.status_code
        return _status_error(status, _headers_retry_after(status, dict(error.response.headers)))
    if isinstance(error, httpx2.TimeoutException | httpx.TimeoutException):
        return _unreachable(timeout=True)
    if isinstance(error, httpx2.TransportError | httpx.TransportError):
        return _unreachable(timeout=False)
    if isinstance(error, pai_errors.UserError | NotImplementedError):
        return ModelCallError(
            f"the request cannot be sent to this model ({type(error).__name__}): a message part or "
            "setting is of a kind its provider does not take",
            retryable=False,
        )
    return None


def _from_model_api_error(error: pai_errors.ModelAPIError) -> ModelCallError:
    status = error.status_code if isinstance(error, pai_errors.ModelHTTPError) else None
    where = f"({status})" if status is not None else "(no status)"
    if isinstance(error, pai_errors.ModelQuotaExceededError):
        return ModelCallError(
            f"the model server refused the request {where}: the account's quota or credits are used up",
            retryable=False,
            status_code=status,
        )
    if isinstance(error, pai_errors.ModelContextWindowExceededError):
        return ModelCallError(
            f"the model server refused the request {where}: the conversation is longer than the "
            "model's context window",
            retryable=False,
            status_code=status,
        )
    if status is not None:
        return _status_error(status, error.retry_after)
    if isinstance(error, pai_errors.ModelConnectionError):
        return _unreachable(timeout=isinstance(error, pai_errors.ModelTimeoutError))
    if isinstance(error, pai_errors.ModelRequestTimeout):
        return ModelCallError(
            "the model server did not answer within the request timeout", retryable=True
        )
    if isinstance(error, pai_errors.ModelAuthenticationError):
        return ModelCallError(f"the model server refused the API key: {_KEY_HINT}", retryable=False)
    if isinstance(error, pai_errors.ModelRequestRejectedError):
        return ModelCallError(
            f"the model server refused the request: {_REQUEST_HINT}", retryable=False
        )
    if isinstance(error, pai_errors.ModelRateLimitError):
        kind = "rate limited"
    elif isinstance(error, pai_errors.ModelOverloadedError):
        kind = "overloaded"
    elif isinstance(error, pai_errors.ModelUnavailableError):
        kind = "unavailable"
    else:
        kind = "server error"
    return ModelCallError(
        f"the model server failed ({kind})", retryable=True, retry_after=error.retry_after
    )


# -- what the workflow sees ----------------------------------------------------------------------


@attrs.frozen
class ToolCall:
    """A tool call the model made: its id (to answer it), the tool's name and the arguments as JSON text."""

    tool_call_id: str
    name: str
    args_json: str


def response_summary(response: pai.ModelResponse) -> tuple[str, list[ToolCall]]:
    """A response's text (text parts joined, ``""`` if none) and its tool calls, in order.

    Arguments are passed on as the model wrote them, even when they are not valid JSON, so that
    the tool's validation can tell the model what was wrong.
    """
    calls: list[ToolCall] = []
    for part in response.parts:
        if isinstance(part, pai.ToolCallPart):
            args = part.args
            args_json = (
                args if isinstance(args, str) else json.dumps(args if args is not None else {})
            )
            calls.append(ToolCall(part.tool_call_id, part.tool_name, args_json))
    return response.text or "", calls


def tool_return_message(results: Sequence[tuple[ToolCall, str, bool]]) -> pai.ModelRequest:
    """The request answering tool calls: per call, its result text and whether the call failed.

    A failed call's text (an argument error, or what the tool raised) goes back to the model as an
    error result, so the model can adapt. pydantic-ai 2.68 deprecates ``RetryPromptPart`` for this;
    a ``ToolReturnPart`` with ``outcome="failed"`` reaches Anthropic as ``is_error`` and Chat
    Completions as ``{"error": ...}``.
    """
    return pai.ModelRequest(
        parts=[
            pai.ToolReturnPart(
                tool_name=call.name,
                content=text,
                tool_call_id=call.tool_call_id,
                outcome="failed" if failed else "success",
            )
            for call, text, failed in results
        ]
    )
