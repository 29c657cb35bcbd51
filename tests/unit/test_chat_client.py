"""The short path for a whole Chat Completions request (``harness_core/agents/chat_client.py``)
against the SDK's own path: the same request on the wire, the same response, the same errors.

Both go to the same fake server over real HTTP; the only difference between the two models is the
client: ``openai.AsyncOpenAI`` as the SDK ships it, or the :class:`ChatClient` that
``build_model`` gives a ``kind = "openai"`` model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import openai
import pytest
from pydantic_ai import messages as pai
from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from harness_core.agents.chat_client import ChatClient
from harness_core.agents.llm import (
    ModelCallError,
    build_model,
    close_model,
    request,
    response_summary,
    to_model_messages,
    tool_return_message,
)
from harness_core.agents.turn import DataPart, FilePart, TextPart, TurnMessage
from tests.fakes.model_servers import (
    FakeServer,
    ScriptItem,
    error_reply,
    serve_fake_openai,
    text_reply,
    tool_call_reply,
)
from tests.unit.test_llm import API_KEY, LOOKUP, closed_port

# Headers the SDK sends that the short path leaves out: how long the SDK would wait for a read
# (informational; the timeout itself is applied), and the body's length, which differs only by
# the JSON's spacing.
NOT_COMPARED = frozenset({"x-stainless-read-timeout", "content-length"})


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with serve_fake_openai() as fake:
        yield fake


def sdk_model(server: FakeServer) -> Model:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0)
    return OpenAIChatModel("fake-model", provider=OpenAIProvider(openai_client=client))


@pytest.fixture
async def models(server: FakeServer) -> AsyncIterator[tuple[Model, Model]]:
    ours = build_model("openai", "fake-model", base_url=server.base_url, api_key=API_KEY)
    theirs = sdk_model(server)
    assert isinstance(getattr(ours, "client", None), ChatClient)
    yield ours, theirs
    await close_model(ours)
    await close_model(theirs)


def history(*parts: TextPart | FilePart | DataPart) -> list[pai.ModelMessage]:
    message = TurnMessage(message_id="m1", role="user", parts=parts)
    return to_model_messages([message], system="You answer questions about orders.")


async def both(
    server: FakeServer,
    models: tuple[Model, Model],
    item: ScriptItem,
    messages: list[pai.ModelMessage],
    **options: Any,
) -> list[pai.ModelResponse]:
    """The same unstreamed request through each model; the fake answers both with ``item``."""
    answers = []
    for model in models:
        server.push(item)
        answers.append(await request(model, messages, [LOOKUP], stream=False, **options))
    return answers


@pytest.mark.anyio
async def test_a_tool_call_round_trip_sends_and_reads_what_the_sdk_does(
    server: FakeServer, models: tuple[Model, Model]
) -> None:
    first = history(TextPart("Where is order 42?"))
    ours, theirs = await both(
        server, models, tool_call_reply("lookup_order", {"order_id": 42}, call_id="c-42"), first
    )
    assert response_summary(ours) == response_summary(theirs)
    assert ours.parts == theirs.parts
    assert (ours.usage, ours.finish_reason) == (theirs.usage, theirs.finish_reason)
    (call,) = response_summary(ours)[1]
    second = [*first, ours, tool_return_message([(call, "shipped on Monday", False)])]
    ours, theirs = await both(server, models, text_reply("It shipped."), second)

    assert response_summary(ours) == response_summary(theirs) == ("It shipped.", [])
    sent = server.requests
    assert [r.path for r in sent] == ["/v1/chat/completions"] * 4
    for mine, sdk in ((sent[0], sent[1]), (sent[2], sent[3])):
        assert mine.body == sdk.body
        assert mine.body["stream"] is False
        assert {k: v for k, v in mine.headers.items() if k not in NOT_COMPARED} == {
            k: v for k, v in sdk.headers.items() if k not in NOT_COMPARED
        }
        assert mine.authorization == f"Bearer {API_KEY}"


@pytest.mark.anyio
async def test_files_and_settings_go_out_as_the_sdk_sends_them(
    server: FakeServer, models: tuple[Model, Model]
) -> None:
    messages = history(
        TextPart("See attached."),
        FilePart(data=b"\x89PNG\r\n\x1a\n-fake", name="p.png", media_type="image/png"),
        FilePart(data=b"%PDF-1.4 fake", media_type="application/pdf"),
        DataPart({"order_id": 42, "note": "crème brûlée"}),
    )
    settings: Any = {
        "temperature": 0.25,
        "max_tokens": 64,
        # A header of the client's, in another spelling: it replaces the client's, once.
        "extra_headers": {"x-trace": "t-1", "user-agent": "custom/1.0"},
    }

    ours, theirs = await both(server, models, text_reply("ok"), messages, settings=settings)

    assert ours.parts == theirs.parts
    mine, sdk = server.requests
    assert mine.body == sdk.body
    assert mine.body["temperature"] == 0.25
    assert mine.headers["x-trace"] == sdk.headers["x-trace"] == "t-1"
    assert mine.headers["user-agent"] == sdk.headers["user-agent"] == "custom/1.0"
    assert len(mine.names) == len(set(mine.names)), "a header sent twice"
    assert set(mine.names) - NOT_COMPARED == set(sdk.names) - NOT_COMPARED


@pytest.mark.anyio
@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422, 429, 500, 503, 418])
async def test_an_http_error_is_the_sdks_error_and_classified_alike(
    server: FakeServer, models: tuple[Model, Model], status: int
) -> None:
    caught: list[ModelCallError] = []
    for model in models:
        server.push(error_reply(status, retry_after=2))
        with pytest.raises(ModelCallError) as raised:
            await request(model, history(TextPart("hi")), [], stream=False)
        caught.append(raised.value)
        # pydantic-ai's error, from the SDK's exception of the same class and text.
        assert raised.value.__cause__ is not None

    ours, theirs = caught
    assert (str(ours), ours.retryable, ours.status_code, ours.retry_after) == (
        str(theirs),
        theirs.retryable,
        theirs.status_code,
        theirs.retry_after,
    )
    assert type(ours.__cause__) is type(theirs.__cause__)
    assert str(ours.__cause__) == str(theirs.__cause__)
    assert API_KEY not in str(ours)
    assert len(server.requests) == 2, "neither client retries on its own"


@pytest.mark.anyio
async def test_a_refused_connection_and_a_timeout_are_retryable_as_through_the_sdk(
    server: FakeServer,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    refused = build_model("openai", "m", base_url=url, api_key=API_KEY)
    slow = build_model("openai", "m", base_url=server.base_url, api_key=API_KEY)
    server.push(text_reply("late", delay=0.5))
    try:
        with pytest.raises(ModelCallError) as unreachable:
            await request(refused, history(TextPart("hi")), [], stream=False)
        with pytest.raises(ModelCallError) as late:
            await request(
                slow, history(TextPart("hi")), [], stream=False, settings={"timeout": 0.1}
            )
    finally:
        await close_model(refused)
        await close_model(slow)

    assert unreachable.value.retryable
    assert str(unreachable.value) == (
        "the connection to the model server failed (connection error)"
    )
    assert late.value.retryable
    assert str(late.value) == "the model server did not answer in time (timeout)"


@pytest.mark.anyio
async def test_a_streamed_request_and_a_body_that_is_not_plain_json_take_the_sdks_path(
    server: FakeServer, models: tuple[Model, Model]
) -> None:
    ours, _ = models
    server.push(text_reply("str", "eamed"), text_reply("from a generator"))

    deltas: list[str] = []

    async def on_delta(text: str) -> None:
        deltas.append(text)

    streamed = await request(ours, history(TextPart("hi")), [], on_text_delta=on_delta)
    client = getattr(ours, "client", None)
    assert isinstance(client, ChatClient)
    # A generator of messages: json cannot encode it, the SDK turns it into a list.
    answer = await client.chat.completions.create(
        model="fake-model",
        messages=(m for m in [cast(Any, {"role": "user", "content": "hi"})]),
    )

    assert response_summary(streamed) == ("streamed", [])
    assert deltas == ["str", "eamed"]
    assert answer.choices[0].message.content == "from a generator"
    assert server.requests[0].body["stream"] is True
    assert server.requests[1].body["messages"] == [{"role": "user", "content": "hi"}]
