"""Tools of the built-in LLM agent: async functions named ``"package.module:function"`` in its config.

The agent's loop runs in a Temporal workflow and every tool call is its own activity; this module is
what that activity (and the one that lists the tools for a model request) calls. :func:`load_tool`
imports a tool and describes it: its JSON schema, built by pydantic-ai from the type hints and
docstring, and the two flags the workflow needs for the call's activity, ``idempotent`` (a tool that
is not gets one attempt only) and ``timeout``. :meth:`LoadedTool.call` validates the model's
arguments, runs the function and returns its result as text.

Tools take plain parameters; there is no ``RunContext``. pydantic-ai is an optional dependency
(``a2a-harness[models]``); nothing else in the package imports this module at module level.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

from harness_core.errors import INSTALL_MODELS, HarnessError

try:
    import pydantic_core
    from pydantic_ai import Tool
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.tools import ToolDefinition
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"harness_core.agents.tools needs pydantic-ai ({error.name} is missing): " + INSTALL_MODELS
    ) from error

__all__ = [
    "DEFAULT_TOOL_TIMEOUT",
    "InvalidToolError",
    "LoadedTool",
    "ToolArgumentsError",
    "ToolOptions",
    "describe_tool",
    "load_tool",
    "tool",
    "tool_name",
]

#: Seconds a tool call may take when its function does not say (see :func:`tool`).
DEFAULT_TOOL_TIMEOUT = 60.0

_OPTIONS_ATTRIBUTE = "__harness_tool__"

ToolFunction = TypeVar("ToolFunction", bound=Callable[..., Awaitable[Any]])


class InvalidToolError(HarnessError, ValueError):
    """A tool spec or function cannot be used as a tool; the message names it and says why."""


class ToolArgumentsError(HarnessError):
    """The model called a tool with arguments that do not fit it; the message is for the model."""


@attrs.frozen
class ToolOptions:
    """What :func:`tool` records on a function."""

    idempotent: bool = True
    timeout: float = DEFAULT_TOOL_TIMEOUT
    name: str | None = None


def tool(
    *, idempotent: bool = True, timeout: float = DEFAULT_TOOL_TIMEOUT, name: str | None = None
) -> Callable[[ToolFunction], ToolFunction]:
    """Mark an async function as a tool with these options; it is returned unchanged otherwise.

    ``idempotent=False`` says a call must not run twice (it sends an email, charges a card): the
    workflow gives such a call one attempt and reports a failure to the model instead of retrying.
    ``timeout`` is in seconds; ``name`` replaces the function's name as the model sees it.
    Undecorated functions are idempotent with a 60-second timeout.
    """
    if timeout <= 0:
        raise InvalidToolError(f"a tool's timeout must be more than 0 seconds, not {timeout!r}")
    options = ToolOptions(idempotent=idempotent, timeout=float(timeout), name=name)

    def mark(function: ToolFunction) -> ToolFunction:
        if not _is_async(function):
            raise InvalidToolError(
                f"@tool needs an async function; {_describe(function)} is not (define it with 'async def')"
            )
        setattr(function, _OPTIONS_ATTRIBUTE, options)
        return function

    return mark


@attrs.frozen
class LoadedTool:
    """A tool ready to describe to a model and to call.

    ``definition`` is what the model is offered (name, description, JSON schema of the arguments).
    """

    spec: str
    name: str
    definition: ToolDefinition
    idempotent: bool
    timeout: float
    _tool: Tool[Any] = attrs.field(alias="tool", repr=False)
    #: The key of the plugin that gives the tool ("" for ``[model] tools``).
    owner: str = ""

    async def call(self, args_json: str) -> str:
        """Run the tool with the model's arguments (a JSON object); its result as text.

        A ``str`` result is returned as is, anything else as JSON. Arguments that are not a JSON
        object or do not fit the function's parameters raise :class:`ToolArgumentsError`, whose
        message is meant to be sent back to the model. What the function raises propagates.
        """
        schema = self._tool.function_schema
        try:
            arguments: dict[str, Any] = schema.validator.validate_json(args_json.strip() or "{}")
        except pydantic_core.ValidationError as error:
            raise ToolArgumentsError(_arguments_message(self.name, error)) from None
        positional: list[Any] = [arguments.pop(field) for field in schema.positional_fields]
        if schema.var_positional_field is not None:
            positional.extend(arguments.pop(schema.var_positional_field))
        result = await self._tool.function(*positional, **arguments)
        if isinstance(result, str):
            return result
        return pydantic_core.to_json(result, fallback=str).decode()


def _arguments_message(name: str, error: pydantic_core.ValidationError) -> str:
    lines = [f"The arguments for tool {name!r} are not valid:"]
    for detail in error.errors(include_url=False, include_context=False, include_input=False):
        where = ".".join(str(step) for step in detail["loc"]) or "arguments"
        lines.append(f"- {where}: {detail['msg']}")
    lines.append("Call the tool again with arguments that match its schema.")
    return "\n".join(lines)


def _is_async(function: object) -> bool:
    while isinstance(function, functools.partial):
        function = function.func
    return inspect.iscoroutinefunction(function)


def _describe(function: object) -> str:
    return str(getattr(function, "__qualname__", None) or repr(function))


def load_tool(spec: str) -> LoadedTool:
    """Import the async function ``spec`` names (``"package.module:function"``) and describe it.

    Raises :class:`InvalidToolError` (a ``ValueError``) naming the spec when it is malformed, the
    module cannot be imported, the function is missing or not ``async def``, it takes a
    ``RunContext``, or its parameters cannot be described as a JSON schema.
    """
    module_name, _, attribute_path = spec.partition(":")
    if not module_name or not attribute_path:
        raise InvalidToolError(f"tool {spec!r} is not of the form 'package.module:function'")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidToolError(
            f"tool {spec!r}: module {module_name!r} cannot be imported ({error})"
        ) from error
    for attribute in attribute_path.split("."):
        if not hasattr(target, attribute):
            raise InvalidToolError(
                f"tool {spec!r}: {module_name!r} has no attribute {attribute_path!r}"
            )
        target = getattr(target, attribute)
    return describe_tool(target, spec)


def tool_name(function: Callable[..., Any]) -> str:
    """The name a model sees a tool function by: its ``@tool(name=...)``, else its own name."""
    options = getattr(function, _OPTIONS_ATTRIBUTE, None)
    if isinstance(options, ToolOptions) and options.name:
        return options.name
    return str(getattr(function, "__name__", ""))


def describe_tool(target: object, spec: str, *, owner: str = "") -> LoadedTool:
    """Describe the async function ``target`` as a tool (``spec`` is what errors call it; ``owner``
    the key of the plugin that gives it, if one does). Raises :class:`InvalidToolError` as
    :func:`load_tool` does."""
    if not callable(target) or not _is_async(target):
        raise InvalidToolError(
            f"tool {spec!r} is not an async function (tools are defined with 'async def')"
        )
    options = getattr(target, _OPTIONS_ATTRIBUTE, None)
    if not isinstance(options, ToolOptions):
        options = ToolOptions()
    try:
        described: Tool[Any] = Tool(target, name=options.name)
    except UserError as error:
        raise InvalidToolError(
            f"tool {spec!r}: its parameters cannot be described as a JSON schema ({error.message})"
        ) from error
    if described.takes_ctx:
        raise InvalidToolError(
            f"tool {spec!r} takes a RunContext; tools here take plain parameters only"
        )
    return LoadedTool(
        spec=spec,
        name=described.name,
        definition=described.tool_def,
        idempotent=options.idempotent,
        timeout=options.timeout,
        tool=described,
        owner=owner,
    )
