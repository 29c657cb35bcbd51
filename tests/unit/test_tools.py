"""Tools named by spec: loading, the schema the model is offered, argument validation and results."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import RunContext

from harness_core.agents.tools import (
    DEFAULT_TOOL_TIMEOUT,
    InvalidToolError,
    ToolArgumentsError,
    load_tool,
    tool,
)

HERE = __name__


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def lookup_order(order_id: int, include_items: bool = False) -> dict[str, Any]:
    """Look up an order by its number.

    Args:
        order_id: The order's number.
        include_items: Whether to list the order's items.
    """
    return {"order_id": order_id, "items": ["pen"] if include_items else []}


@tool(idempotent=False, timeout=5, name="send_email")
async def send(to: str, body: str) -> str:
    """Send an email."""
    return f"sent to {to}: {body}"


async def now() -> str:
    """The current time, as the tool sees it."""
    return "noon"


class Address(BaseModel):
    street: str
    city: str


async def ship(address: Address) -> Address:
    """Ship to an address."""
    return address


@dataclass
class Receipt:
    total: float
    paid: bool


async def pay(amount: float) -> Receipt:
    """Pay an amount."""
    return Receipt(total=amount, paid=True)


async def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


def not_async(order_id: int) -> int:
    """A plain function."""
    return order_id


async def with_context(ctx: RunContext[None], order_id: int) -> int:
    """Wants a run context."""
    return order_id


NOT_A_FUNCTION = 3


def test_the_schema_comes_from_the_type_hints_and_the_docstring() -> None:
    loaded = load_tool(f"{HERE}:lookup_order")

    assert loaded.name == "lookup_order"
    assert loaded.definition.name == "lookup_order"
    assert loaded.definition.description == "Look up an order by its number."
    schema = loaded.definition.parameters_json_schema
    assert schema["required"] == ["order_id"]
    assert schema["properties"]["order_id"] == {
        "type": "integer",
        "description": "The order's number.",
    }
    assert schema["properties"]["include_items"]["type"] == "boolean"
    assert schema["properties"]["include_items"]["default"] is False


def test_an_undecorated_tool_is_idempotent_with_the_default_timeout() -> None:
    loaded = load_tool(f"{HERE}:lookup_order")

    assert (loaded.idempotent, loaded.timeout) == (True, DEFAULT_TOOL_TIMEOUT)
    assert DEFAULT_TOOL_TIMEOUT == 60.0


def test_the_decorator_sets_the_flags_and_the_name_the_model_sees() -> None:
    loaded = load_tool(f"{HERE}:send")

    assert (loaded.name, loaded.idempotent, loaded.timeout) == ("send_email", False, 5)
    assert loaded.definition.name == "send_email"
    assert loaded.spec == f"{HERE}:send"


@pytest.mark.anyio
async def test_arguments_are_validated_and_a_non_str_result_comes_back_as_json() -> None:
    loaded = load_tool(f"{HERE}:lookup_order")

    result = await loaded.call('{"order_id": "42", "include_items": true}')

    assert json.loads(result) == {"order_id": 42, "items": ["pen"]}


@pytest.mark.anyio
async def test_a_str_result_comes_back_as_it_is() -> None:
    loaded = load_tool(f"{HERE}:send")

    assert (
        await loaded.call('{"to": "ana@example.com", "body": "hi"}')
        == "sent to ana@example.com: hi"
    )


@pytest.mark.anyio
async def test_models_and_dataclasses_are_validated_in_and_serialized_out() -> None:
    shipped = await load_tool(f"{HERE}:ship").call('{"street": "1 Main St", "city": "Oslo"}')
    paid = await load_tool(f"{HERE}:pay").call('{"amount": 9.5}')

    assert json.loads(shipped) == {"street": "1 Main St", "city": "Oslo"}
    assert json.loads(paid) == {"total": 9.5, "paid": True}


@pytest.mark.anyio
@pytest.mark.parametrize("empty", ["", "  ", "{}"])
async def test_a_tool_without_parameters_takes_empty_arguments(empty: str) -> None:
    assert await load_tool(f"{HERE}:now").call(empty) == "noon"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("args_json", "names"),
    [
        ('{"order_id": "abc"}', "order_id"),
        ('{"include_items": true}', "order_id"),
        ("{not json", "arguments"),
        ("[1, 2]", "arguments"),
    ],
)
async def test_bad_arguments_raise_an_error_the_model_can_act_on(
    args_json: str, names: str
) -> None:
    loaded = load_tool(f"{HERE}:lookup_order")

    with pytest.raises(ToolArgumentsError) as caught:
        await loaded.call(args_json)

    message = str(caught.value)
    assert message.startswith("The arguments for tool 'lookup_order' are not valid:\n- ")
    assert f"\n- {names}: " in message
    assert message.endswith("Call the tool again with arguments that match its schema.")


@pytest.mark.anyio
async def test_what_the_tool_raises_propagates() -> None:
    with pytest.raises(RuntimeError, match="disk full"):
        await load_tool(f"{HERE}:explode").call('{"reason": "disk full"}')


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_colon_here", "is not of the form 'package.module:function'"),
        (f"{HERE}:", "is not of the form 'package.module:function'"),
        ("no_such_module_xyz:tool", "module 'no_such_module_xyz' cannot be imported"),
        (f"{HERE}:missing", f"'{HERE}' has no attribute 'missing'"),
        (f"{HERE}:not_async", "is not an async function"),
        (f"{HERE}:NOT_A_FUNCTION", "is not an async function"),
        (f"{HERE}:with_context", "takes a RunContext"),
    ],
)
def test_a_spec_that_is_not_an_async_tool_is_refused_by_name(spec: str, says: str) -> None:
    with pytest.raises(InvalidToolError) as caught:
        load_tool(spec)

    assert isinstance(caught.value, ValueError)
    assert f"{spec!r}" in str(caught.value)
    assert says in str(caught.value)


def test_the_decorator_refuses_a_plain_function_and_a_timeout_of_zero() -> None:
    with pytest.raises(InvalidToolError, match="needs an async function; not_async is not"):
        tool()(not_async)  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidToolError, match="more than 0 seconds"):
        tool(timeout=0)
