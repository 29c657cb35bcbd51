"""A small MCP server the MCP tests run as an agent's ``[[mcp]]`` server (stdio, or streamable HTTP
with ``--http PORT``): ``add`` (idempotent), ``note`` (appends a line to the file named by the
environment variable ``MCP_NOTES``: it must not run twice), ``whoami`` (what the variable
``MCP_GREETING`` holds, to show the environment reaches it) and ``broken`` (always fails)."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def note(text: str) -> str:
    """Write a line into the notes file."""
    with open(os.environ["MCP_NOTES"], "a", encoding="utf-8") as notes:
        notes.write(text + "\n")
    return "noted"


@server.tool()
def whoami() -> str:
    """Say what the greeting variable holds."""
    return os.environ.get("MCP_GREETING", "(no greeting)")


@server.tool()
def broken() -> str:
    """Always fails."""
    raise ValueError("the widget is broken")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
