"""The model layer against real HTTP: pydantic-ai driving the real openai/anthropic SDKs to fake servers.

Only the model is scripted (tests/fakes/model_servers.py); conversion, streaming, the tool-call round
trip and error classification go through the same code a worker runs.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from pydantic_ai import messages as pai
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import ToolDefinition

from harness_core.agents.llm import (
    ModelCallError,
    ModelKind,
    ToolCall,
    build_model,
    close_model,
    dump_messages,
    load_messages,
    model_call_error,
    request,
    response_summary,
    server_of,
    to_model_messages,
    tool_return_message,
)
from harness_core.agents.turn import DataPart, FilePart, TextPart, TurnMessage
from tests.fakes.model_servers import (
    FakeServer,
    error_reply,
    serve_fake_anthropic,
    serve_fake_openai,
    text_reply,
    tool_call_reply,
)

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-test-THIS-KEY-MUST-NEVER-APPEAR"
SYSTEM = "You answer questions about orders."
PNG = b"\x89PNG\r\n\x1a\n-fake-image"
PDF = b"%PDF-1.4 fake document"
LOOKUP = ToolDefinition(
    name="lookup_order",
    description="Look up an order by its number.",
    parameters_json_schema={
        "type": "object",
        "properties": {"order_id": {"type": "integer"}},
        "required": ["order_id"],
    },
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["openai", "anthropic"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeServer]:
    serve = serve_fake_openai if request.param == "openai" else serve_fake_anthropic
    with serve() as fake:
        yield fake


@pytest.fixture
async def model(server: FakeServer) -> AsyncIterator[Model]:
    built = build_model(server.flavor, "fake-model", base_url=server.base_url, api_key=API_KEY)
    yield built
    await close_model(built)


def user(*parts: TextPart | FilePart | DataPart, message_id: str = "m1") -> TurnMessage:
    return TurnMessage(message_id=message_id, role="user", parts=parts)


def agent(text: str, message_id: str = "a1") -> TurnMessage:
    return TurnMessage(message_id=message_id, role="agent", parts=(TextPart(text),))


def through_json(messages: Sequence[pai.ModelMessage]) -> list[pai.ModelMessage]:
    """What the workflow does with history: dump to JSON text and load it back."""
    return load_messages(json.loads(json.dumps(dump_messages(messages))))


def tool_results(server: FakeServer, body: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(call id, text, is error) of each tool result in a request body, in the provider's format."""
    results: list[tuple[str, str, bool]] = []
    for message in body["messages"]:
        if server.flavor == "openai" and message["role"] == "tool":
            content = message["content"]
            error = content.startswith('{"error"')
            text = json.loads(content)["error"] if error else content
            results.append((message["tool_call_id"], text, error))
        elif server.flavor == "anthropic" and isinstance(message["content"], list):
            for block in message["content"]:
                if block["type"] == "tool_result":
                    text = "".join(piece["text"] for piece in block["content"])
                    results.append((block["tool_use_id"], text, block["is_error"]))
    return results


def user_content(server: FakeServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of the last user message of a request body."""
    last = [message for message in body["messages"] if message["role"] == "user"][-1]
    content = last["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- streaming -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_text_deltas_arrive_in_order_and_add_up_to_the_final_text(
    server: FakeServer, model: Model
) -> None:
    server.push(text_reply("The order ", "shipped ", "yesterday."))
    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    response = await request(
        model,
        to_model_messages([user(TextPart("Where is it?"))], system=None),
        [],
        on_text_delta=on_delta,
    )

    assert deltas == ["The order ", "shipped ", "yesterday."]
    text, calls = response_summary(response)
    assert text == "The order shipped yesterday."
    assert calls == []
    assert server.requests[0].body["stream"] is True


@pytest.mark.anyio
async def test_an_error_raised_by_the_delta_handler_propagates_unchanged(
    server: FakeServer, model: Model
) -> None:
    server.push(text_reply("one ", "two"))
    publish_failed = httpx.ConnectError("the delta channel is down")

    async def on_delta(text: str) -> None:
        raise publish_failed

    # An httpx error from the handler is the caller's failure, not the model server's.
    with pytest.raises(httpx.ConnectError) as caught:
        await request(
            model,
            to_model_messages([user(TextPart("hi"))], system=None),
            [],
            on_text_delta=on_delta,
        )
    assert caught.value is publish_failed


@pytest.mark.anyio
async def test_the_system_prompt_and_the_api_key_reach_the_server(
    server: FakeServer, model: Model
) -> None:
    server.push(text_reply("ok"))

    await request(model, to_model_messages([user(TextPart("hi"))], system=SYSTEM), [])

    sent = server.requests[0]
    if server.flavor == "openai":
        assert sent.body["messages"][0] == {"role": "system", "content": SYSTEM}
    else:
        assert sent.body["system"] == SYSTEM
    # anthropic 2.x sends the key as a bearer token; older releases used x-api-key.
    assert sent.authorization == f"Bearer {API_KEY}" or sent.x_api_key == API_KEY


@pytest.mark.anyio
async def test_a_local_server_without_a_key_gets_a_placeholder_key(server: FakeServer) -> None:
    server.push(text_reply("ok"))
    keyless = build_model(server.flavor, "fake-model", base_url=server.base_url, api_key=None)
    try:
        await request(keyless, to_model_messages([user(TextPart("hi"))], system=None), [])
    finally:
        await close_model(keyless)

    sent = server.requests[0]
    assert (sent.authorization or sent.x_api_key or "").endswith("no-key")


# -- tools ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_tool_call_goes_round_trip_and_its_result_reaches_the_next_request(
    server: FakeServer, model: Model
) -> None:
    server.push(
        tool_call_reply("lookup_order", {"order_id": 42}, call_id="call-42"),
        text_reply("It shipped."),
    )
    history = through_json(to_model_messages([user(TextPart("Where is order 42?"))], system=SYSTEM))

    first = await request(model, history, [LOOKUP])
    text, calls = response_summary(first)
    assert text == ""
    assert calls == [
        ToolCall(tool_call_id="call-42", name="lookup_order", args_json='{"order_id": 42}')
    ]
    assert json.loads(calls[0].args_json) == {"order_id": 42}

    history = through_json(
        [*history, first, tool_return_message([(calls[0], "shipped on Monday", False)])]
    )
    second = await request(model, history, [LOOKUP])

    assert response_summary(second) == ("It shipped.", [])
    offered = server.requests[0].body["tools"]
    names = [
        tool["function"]["name"] if server.flavor == "openai" else tool["name"] for tool in offered
    ]
    assert names == ["lookup_order"]
    assert tool_results(server, server.requests[1].body) == [
        ("call-42", "shipped on Monday", False)
    ]


@pytest.mark.anyio
async def test_a_failed_tool_call_reaches_the_model_as_an_error_result(
    server: FakeServer, model: Model
) -> None:
    server.push(text_reply("Sorry."))
    call = ToolCall(tool_call_id="call-1", name="lookup_order", args_json='{"order_id": "x"}')
    history = [
        *to_model_messages([user(TextPart("Where is order x?"))], system=None),
        pai.ModelResponse(
            parts=[pai.ToolCallPart("lookup_order", call.args_json, tool_call_id="call-1")]
        ),
        tool_return_message([(call, "order_id: Input should be a valid integer", True)]),
    ]

    await request(model, through_json(history), [LOOKUP])

    assert tool_results(server, server.requests[0].body) == [
        ("call-1", "order_id: Input should be a valid integer", True)
    ]


@pytest.mark.anyio
async def test_a_function_model_streams_text_and_tool_calls_through_the_same_request() -> None:
    async def stream(
        messages: list[pai.ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        assert [tool.name for tool in info.function_tools] == ["lookup_order"]
        yield "Let me "
        yield "check."
        yield {
            0: DeltaToolCall(name="lookup_order", json_args='{"order_id": 7}', tool_call_id="fn-1")
        }

    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    response = await request(
        FunctionModel(stream_function=stream),
        to_model_messages([user(TextPart("order 7?"))], system=None),
        [LOOKUP],
        on_text_delta=on_delta,
    )

    assert deltas == ["Let me ", "check."]
    assert response_summary(response) == (
        "Let me check.",
        [ToolCall(tool_call_id="fn-1", name="lookup_order", args_json='{"order_id": 7}')],
    )


# -- files and data ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_files_and_data_reach_the_request_in_the_providers_format(
    server: FakeServer, model: Model
) -> None:
    server.push(text_reply("ok"))
    message = user(
        TextPart("See attached."),
        FilePart(data=PNG, name="photo.png", media_type="image/png"),
        FilePart(data=PDF, media_type="application/pdf"),
        FilePart(data=b"id,total\n42,9.50\n", name="orders.csv", media_type="text/csv"),
        DataPart({"order_id": 42, "rush": True}),
    )

    await request(model, through_json(to_model_messages([message], system=None)), [])

    blocks = user_content(server, server.requests[0].body)
    texts = "\n".join(block["text"] for block in blocks if block["type"] == "text")
    assert "See attached." in texts
    assert "Attached file: photo.png (image/png)" in texts
    assert "Attached file: orders.csv (text/csv)\nid,total\n42,9.50" in texts
    assert '"order_id": 42' in texts
    assert '"rush": true' in texts
    png64, pdf64 = base64.b64encode(PNG).decode(), base64.b64encode(PDF).decode()
    if server.flavor == "openai":
        images = [block["image_url"]["url"] for block in blocks if block["type"] == "image_url"]
        files = [block["file"]["file_data"] for block in blocks if block["type"] == "file"]
        assert images == [f"data:image/png;base64,{png64}"]
        assert files == [f"data:application/pdf;base64,{pdf64}"]
    else:
        images = [block["source"] for block in blocks if block["type"] == "image"]
        documents = [block["source"] for block in blocks if block["type"] == "document"]
        assert images == [{"type": "base64", "media_type": "image/png", "data": png64}]
        assert documents == [{"type": "base64", "media_type": "application/pdf", "data": pdf64}]


@pytest.mark.anyio
async def test_an_image_link_is_sent_as_a_link_and_other_links_as_text(
    server: FakeServer, model: Model
) -> None:
    server.push(text_reply("ok"))
    message = user(
        FilePart(url="https://files.example/cat.jpg"),
        FilePart(url="https://files.example/report.pdf", name="report.pdf"),
    )

    await request(model, to_model_messages([message], system=None), [])

    blocks = user_content(server, server.requests[0].body)
    if server.flavor == "openai":
        assert {
            "type": "image_url",
            "image_url": {"url": "https://files.example/cat.jpg"},
        } in blocks
    else:
        assert {
            "type": "image",
            "source": {"type": "url", "url": "https://files.example/cat.jpg"},
        } in blocks
    assert {
        "type": "text",
        "text": "Linked file: report.pdf (application/pdf): https://files.example/report.pdf",
    } in blocks


def test_history_alternates_with_consecutive_messages_merged_and_empty_ones_left_out() -> None:
    history = [
        user(TextPart("first")),
        user(TextPart("second"), message_id="m2"),
        TurnMessage(message_id="m3", role="user", parts=()),
        agent("answer one"),
        agent("answer two", message_id="a2"),
        user(
            FilePart(data=b"PK\x03\x04", name="archive.zip", media_type="application/zip"),
            message_id="m4",
        ),
    ]

    messages = to_model_messages(history, system=SYSTEM)

    assert [message.kind for message in messages] == ["request", "response", "request"]
    first, answer, last = messages
    assert isinstance(first, pai.ModelRequest)
    assert isinstance(answer, pai.ModelResponse)
    assert isinstance(last, pai.ModelRequest)
    assert [type(part) for part in first.parts] == [
        pai.SystemPromptPart,
        pai.UserPromptPart,
        pai.UserPromptPart,
    ]
    prompts = [
        part.content
        for part in first.parts
        if isinstance(part, pai.SystemPromptPart | pai.UserPromptPart)
    ]
    assert prompts == [SYSTEM, "first", "second"]
    assert answer.text == "answer oneanswer two"
    assert [part.content for part in answer.parts if isinstance(part, pai.TextPart)] == [
        "answer one",
        "answer two",
    ]
    only = last.parts[0]
    assert isinstance(only, pai.UserPromptPart)
    assert (
        only.content
        == "Attached file: archive.zip (application/zip), 4 bytes, in a format the model cannot read"
    )


def test_messages_round_trip_through_json_with_their_bytes() -> None:
    history = [
        user(
            TextPart("look"),
            FilePart(data=PNG, media_type="image/png"),
            FilePart(url="https://x.example/a.png"),
        ),
        agent("a cat"),
    ]
    messages = [*to_model_messages(history, system=SYSTEM), tool_return_message([])]

    dumped = dump_messages(messages)
    text = json.dumps(dumped)
    loaded = load_messages(json.loads(text))

    assert loaded == messages
    assert base64.b64encode(PNG).decode() in text
    request_part = loaded[0].parts[1]
    assert isinstance(request_part, pai.UserPromptPart)
    binary = request_part.content[1]
    assert isinstance(binary, pai.BinaryContent)
    assert binary.data == PNG


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "retry_after", "retryable", "says"),
    [
        (429, 7, True, "the model server answered 429 (rate limited)"),
        (503, None, True, "the model server answered 503 (server error)"),
        (500, 2, True, "the model server answered 500 (server error)"),
        (
            401,
            None,
            False,
            "the model server refused the API key (401): check the variable named in model.api_key_env",
        ),
        (
            403,
            None,
            False,
            "the model server refused the API key (403): check the variable named in model.api_key_env",
        ),
        (
            400,
            None,
            False,
            "the model server refused the request (400): check model.name and model.base_url",
        ),
        (
            404,
            None,
            False,
            "the model server refused the request (404): check model.name and model.base_url",
        ),
    ],
)
async def test_a_refusal_is_classified_with_a_message_that_never_holds_the_key(
    server: FakeServer,
    model: Model,
    status: int,
    retry_after: int | None,
    retryable: bool,
    says: str,
) -> None:
    server.push(error_reply(status, retry_after=retry_after))

    with pytest.raises(ModelCallError) as caught:
        await request(model, to_model_messages([user(TextPart("hi"))], system=None), [])

    error = caught.value
    assert (str(error), error.retryable, error.status_code) == (says, retryable, status)
    assert error.retry_after == (None if retry_after is None else float(retry_after))
    assert API_KEY not in str(error)
    assert API_KEY not in repr(error)
    # The server did echo the key: the provider's text is in the cause, and nowhere in ours.
    assert API_KEY in str(error.__cause__)
    assert len(server.requests) == 1, "the SDK client must not retry on its own"


@pytest.mark.anyio
async def test_an_overloaded_anthropic_server_is_retryable() -> None:
    with serve_fake_anthropic([error_reply(529)]) as server:
        model = build_model("anthropic", "fake-model", base_url=server.base_url, api_key=API_KEY)
        try:
            with pytest.raises(ModelCallError) as caught:
                await request(model, to_model_messages([user(TextPart("hi"))], system=None), [])
        finally:
            await close_model(model)

    assert caught.value.retryable
    assert str(caught.value) == "the model server answered 529 (overloaded)"


@pytest.mark.anyio
async def test_a_script_that_is_used_up_answers_a_retryable_500(
    server: FakeServer, model: Model
) -> None:
    with pytest.raises(ModelCallError) as caught:
        await request(model, to_model_messages([user(TextPart("hi"))], system=None), [])

    assert (caught.value.retryable, caught.value.status_code) == (True, 500)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_server_that_refuses_connections_is_retryable(kind: ModelKind) -> None:
    url = f"http://127.0.0.1:{closed_port()}" + ("/v1" if kind == "openai" else "")
    model = build_model(kind, "m", base_url=url, api_key=API_KEY)
    try:
        with pytest.raises(ModelCallError) as caught:
            await request(model, to_model_messages([user(TextPart("hi"))], system=None), [])
    finally:
        await close_model(model)

    assert caught.value.retryable
    assert str(caught.value) == "the connection to the model server failed (connection error)"
    assert caught.value.status_code is None


@pytest.mark.anyio
async def test_a_reply_slower_than_the_timeout_is_retryable(
    server: FakeServer, model: Model
) -> None:
    server.push(text_reply("late", delay=0.5))

    with pytest.raises(ModelCallError) as caught:
        await request(
            model,
            to_model_messages([user(TextPart("hi"))], system=None),
            [],
            settings={"timeout": 0.1},
        )

    assert caught.value.retryable
    assert str(caught.value) == "the model server did not answer in time (timeout)"


def test_sdk_and_httpx_errors_that_escape_pydantic_ai_are_classified_too() -> None:
    url = "http://127.0.0.1:9/v1/chat/completions"
    limited = httpx2.Response(
        429, headers={"retry-after": "3"}, request=httpx2.Request("POST", url)
    )
    status_error = openai.APIStatusError(f"key {API_KEY}", response=limited, body=None)
    refused = httpx.ConnectError("refused", request=httpx.Request("POST", url))

    classified = model_call_error(status_error)
    assert classified is not None
    assert (classified.retryable, classified.retry_after, classified.status_code) == (
        True,
        3.0,
        429,
    )
    assert API_KEY not in str(classified)
    unreachable = model_call_error(refused)
    assert unreachable is not None
    assert unreachable.retryable
    assert model_call_error(ValueError("not a model error")) is None


def test_a_model_call_error_survives_pickling() -> None:
    import pickle

    error = ModelCallError(
        "the model server answered 429 (rate limited)", retryable=True, retry_after=2.0
    )

    copy = pickle.loads(pickle.dumps(error))

    assert (str(copy), copy.retryable, copy.retry_after) == (str(error), True, 2.0)


@pytest.mark.parametrize("module", ["harness_core.agents.llm", "harness_core.agents.tools"])
def test_without_pydantic_ai_the_import_error_names_the_extra(module: str) -> None:
    code = f"import sys; sys.modules['pydantic_ai'] = None; import {module}"

    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=REPO
    )

    assert result.returncode != 0
    assert (
        "install the a2a-harness 'models' extra (in a checkout: pip install -e '.[models]')"
        in result.stderr
    )


def test_the_rest_of_the_package_imports_without_pydantic_ai() -> None:
    code = """
import importlib, pkgutil, sys
sys.modules["pydantic_ai"] = None
import harness_core, harness_asgi
optional = {"harness_core.agents.llm", "harness_core.agents.tools", "harness_core.agents.chat_client"}
for package in (harness_core, harness_asgi):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if module.name not in optional and not module.name.startswith("harness_asgi.fastapi"):
            importlib.import_module(module.name)
"""

    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=REPO
    )

    assert result.returncode == 0, result.stderr


def test_the_server_a_model_is_asked_at_is_logged_without_user_information() -> None:
    """What the log names when a model request fails: the provider's endpoint by default, else
    ``base_url`` without any ``user:password@`` it may hold."""
    assert server_of("openai", None) == "https://api.openai.com/v1"
    assert server_of("anthropic", None) == "https://api.anthropic.com"
    assert server_of("openai", "http://user:s3cret@127.0.0.1:11434/v1") == (
        "http://127.0.0.1:11434/v1"
    )
    assert server_of("openai", "http://[::1]:8000/v1") == "http://[::1]:8000/v1"
