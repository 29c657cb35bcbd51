"""MCP servers as tool sources of the built-in LLM agent (``[[mcp]]``), through pydantic-ai's MCP
client (``MCPToolset`` on FastMCP's client).

Each server is a command the agent runs (stdio, with arguments, a working directory and the
environment variables named in its config) or a streamable-HTTP URL (with headers whose values come
from environment variables). At start the agent lists each server's tools: a server that cannot be
reached then stops the start (``required = true``, the default) or is logged and asked again before
later model requests (``required = false``). A tool call the model asks for is an activity like any
tool call, with the same retry rules: a server's tools are idempotent unless ``idempotent = false``
(per server) or the tool is named in ``not_idempotent``. A tool that reports an error is a failed
tool call the model sees; a server that cannot be reached is a failure Temporal retries.

A stdio server's process is started on first use and kept for the agent's life (one session, which
concurrent calls share); the agent stops it when it stops. Everything here runs on the Temporal
loop (activities, and the start through the bridge), which owns the sessions.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pydantic_core
from temporalio.exceptions import ApplicationError

from harness_core.errors import ConfigError
from harness_core.payloads import ToolCallOutput

if TYPE_CHECKING:
    from harness_core.config.sections import McpServerConfig

__all__ = ["McpServer", "McpTool", "McpTools"]

log = logging.getLogger("harness.worker")

#: How long an optional server that could not be reached waits before it is asked again.
RETRY_LISTING = 30.0


@attrs.frozen
class McpTool:
    """One tool of an MCP server, as the model is offered it."""

    name: str  # as the model sees it (with the server's prefix)
    remote_name: str  # as the server knows it
    server: str  # the server's id
    description: str
    schema: dict[str, Any]
    idempotent: bool
    timeout: float

    def definition(self) -> Any:
        from pydantic_ai.tools import ToolDefinition

        return ToolDefinition(
            name=self.name, description=self.description, parameters_json_schema=self.schema
        )


class McpServer:
    """One ``[[mcp]]`` server of an agent: its tools and the calls to them."""

    def __init__(self, config: McpServerConfig, base_dir: Path) -> None:
        self.config = config
        self._base_dir = base_dir
        self._toolset: Any = None
        self._transport: Any = None

    @property
    def id(self) -> str:
        return self.config.id

    def where(self) -> str:
        """What log lines and errors call the server (never a header's or variable's value)."""
        config = self.config
        if config.command is not None:
            return f"MCP server {config.id} ({config.command})"
        return f"MCP server {config.id} ({config.url})"

    def _open(self) -> Any:
        if self._toolset is not None:
            return self._toolset
        try:
            from fastmcp import Client
            from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
            from pydantic_ai.mcp import MCPToolset
        except ImportError as error:  # pragma: no cover - exercised only without the extra
            raise ConfigError(
                f"[[mcp]] {self.config.id}: MCP servers need the a2a-harness 'mcp' extra (in a "
                f"checkout: pip install -e '.[mcp]'); {error.name} is missing"
            ) from None
        config = self.config
        if config.command is not None:
            cwd = self._base_dir / (config.cwd or ".")
            env = {name: os.environ.get(name, "") for name in config.env}
            self._transport = StdioTransport(
                command=config.command,
                args=list(config.args),
                env=env,
                cwd=str(cwd),
                keep_alive=True,
                # The server's own log lines (and tracebacks) do not go to the agent's stderr.
                log_file=Path(os.devnull),
            )
        else:
            headers = {
                name: os.environ.get(variable, "").strip()
                for name, _, variable in (h.partition("=") for h in config.headers)
            }
            self._transport = StreamableHttpTransport(str(config.url), headers=headers)
        self._toolset = MCPToolset(
            Client(self._transport, timeout=config.timeout),
            id=f"mcp-{config.id}",
            tool_error_behavior="failed",
            cache_tools=False,
        )
        return self._toolset

    async def list_tools(self) -> list[McpTool]:
        """The server's tools (raises what reaching it raised)."""
        config = self.config
        toolset = self._open()
        async with toolset:
            listed = await toolset.list_tools()
        tools: list[McpTool] = []
        for tool in listed:
            empty: dict[str, Any] = {"type": "object", "properties": {}}
            given = getattr(tool, "input_schema", None) or empty
            schema: dict[str, Any] = dict(given)
            tools.append(
                McpTool(
                    name=f"{config.prefix}{tool.name}",
                    remote_name=str(tool.name),
                    server=config.id,
                    description=str(tool.description or f"{tool.name} (from {config.id})"),
                    schema=schema,
                    idempotent=config.idempotent and tool.name not in config.not_idempotent,
                    timeout=config.timeout,
                )
            )
        return tools

    async def call(self, tool: McpTool, arguments: str) -> ToolCallOutput:
        """Call ``tool`` with the model's arguments (a JSON object)."""
        from pydantic_ai.exceptions import ModelRetry, ToolFailed

        try:
            args: Any = pydantic_core.from_json(arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return ToolCallOutput(f"{tool.name} takes a JSON object of arguments", failed=True)
        toolset = self._open()
        try:
            async with toolset:
                result = await toolset.direct_call_tool(tool.remote_name, args)
        except (ToolFailed, ModelRetry) as error:
            # The server answered that the call failed: the model hears it and decides.
            return ToolCallOutput(f"the tool {tool.name} failed: {error}", failed=True)
        except Exception as error:
            log.warning(
                "%s could not be reached for the tool %s: %s",
                self.where(),
                tool.name,
                type(error).__name__,
            )
            raise ApplicationError(
                f"{self.where()} could not be reached",
                type="McpUnavailable",
                non_retryable=not tool.idempotent,
            ) from None
        return ToolCallOutput(_as_text(result))

    async def aclose(self) -> None:
        """Stop the server's process (stdio) or close its session."""
        transport, self._transport, self._toolset = self._transport, None, None
        if transport is not None:
            await transport.close()


def _reason(error: BaseException) -> str:
    """Why a server could not be reached, in one line: the cause's type and text (a path, a
    refused connection), with every secret the process knows masked."""
    from harness_core.secrets import SECRETS

    cause = error.__cause__ if error.__cause__ is not None else error
    text = " ".join(str(cause).split())[:200]
    return SECRETS.redact(f"{type(cause).__name__}: {text}" if text else type(cause).__name__)


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    data = getattr(result, "data", None)
    if isinstance(data, bytes):
        media = getattr(result, "media_type", "application/octet-stream")
        return f"(binary content: {len(data)} bytes of {media})"
    return pydantic_core.to_json(result, fallback=str).decode()


class McpTools:
    """The ``[[mcp]]`` servers of one agent and the tools they offer."""

    def __init__(self, configs: Sequence[McpServerConfig], base_dir: Path, label: str) -> None:
        self._servers = [McpServer(c, base_dir) for c in configs]
        self._label = label
        self._tools: dict[str, McpTool] = {}
        # Optional servers not reached yet: when each may be asked again.
        self._missing: dict[str, float] = {}
        self._taken: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self._servers)

    def reserve(self, names: set[str]) -> None:
        """Names the agent's other tools use: an MCP tool may not take one."""
        self._taken = set(names)

    async def start(self) -> None:
        """List every server's tools; a required server that cannot be reached raises
        :class:`ConfigError`, an optional one is logged and asked again later."""
        for server in self._servers:
            await self._list(server, at_start=True)

    async def _list(self, server: McpServer, *, at_start: bool) -> None:
        try:
            tools = await server.list_tools()
        except ConfigError:
            raise
        except Exception as error:
            why = _reason(error)
            if server.config.required and at_start:
                raise ConfigError(
                    f"{self._label}: {server.where()} could not be reached: {why} (required = "
                    "true; set required = false to start without it and try again later)"
                ) from None
            log.warning(
                "%s could not be reached (%s); its tools are offered once it answers",
                server.where(),
                why,
            )
            self._missing[server.id] = time.monotonic() + RETRY_LISTING
            return
        for tool in tools:
            clash = tool.name in self._taken or (
                tool.name in self._tools and self._tools[tool.name].server != server.id
            )
            if clash:
                raise ConfigError(
                    f"{self._label}: {server.where()} offers a tool {tool.name!r}, a name another "
                    "tool of the agent has; give the server a prefix ([[mcp]] prefix)"
                )
            self._tools[tool.name] = tool
        self._missing.pop(server.id, None)

    async def refresh(self) -> None:
        """Ask the optional servers not reached yet again, once their wait is over."""
        now = time.monotonic()
        for server in self._servers:
            due = self._missing.get(server.id)
            if due is not None and due <= now:
                try:
                    await self._list(server, at_start=False)
                except ConfigError as error:
                    log.error("%s", error)
                    self._missing[server.id] = now + RETRY_LISTING

    def tools(self) -> list[McpTool]:
        return list(self._tools.values())

    def get(self, name: str) -> McpTool | None:
        return self._tools.get(name)

    async def call(self, tool: McpTool, arguments: str) -> ToolCallOutput:
        server = next(s for s in self._servers if s.id == tool.server)
        return await server.call(tool, arguments)

    async def aclose(self) -> None:
        for server in self._servers:
            try:
                await server.aclose()
            except Exception as error:
                log.warning("%s did not stop cleanly: %s", server.where(), type(error).__name__)
