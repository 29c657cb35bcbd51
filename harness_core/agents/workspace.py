"""A task's file workspace: text files the built-in LLM agent lists, reads, writes, deletes and
attaches to its answer through tools, with the caps the core enforces whatever keeps the files.

Files are per task, named by a relative path (``notes/todo.md``; leading and trailing ``/`` are
dropped, and ``.``, ``..`` and empty segments are refused). A file holds at most
:data:`MAX_FILE_BYTES` bytes of UTF-8 text, a workspace at most :data:`MAX_FILES` files; at that cap
only a *new* file is refused (an overwrite is not), with a message the model can act on. The
default backing keeps files in the agent's store (table ``workspace_files``), so they outlive
restarts and continue-as-new, and the retention sweep removes them with their task; a plugin may
supply another backing (:class:`WorkspaceBacking`), at most one per agent. ``workspace_attach`` returns
a file as an artifact of the turn's answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from harness_core.errors import HarnessError
from harness_core.payloads import ProtoJSON, ToolCallOutput

if TYPE_CHECKING:
    from harness_core.store import TaskStore

__all__ = [
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "WORKSPACE_TOOLS",
    "StoreWorkspace",
    "Workspace",
    "WorkspaceBacking",
    "WorkspaceLimitError",
    "workspace_tool_definitions",
]

#: The most bytes (UTF-8) one workspace file holds.
MAX_FILE_BYTES = 512 * 1024
#: The most files one task's workspace holds.
MAX_FILES = 200


class WorkspaceLimitError(HarnessError):
    """A write past a cap, or a path that is not one; the message is meant for the model."""


class WorkspaceBacking(Protocol):
    """Where a workspace's files are kept (the store by default; a plugin may supply another).

    Paths arrive normalized. The core enforces the caps; a backing only keeps and returns files.
    """

    async def read(self, task_id: str, path: str) -> str | None:
        """The file's text, or None when there is no such file."""
        ...

    async def write(self, task_id: str, path: str, content: str) -> None:
        """Create or replace the file."""
        ...

    async def delete(self, task_id: str, path: str) -> bool:
        """Remove the file; whether it existed."""
        ...

    async def list(self, task_id: str) -> Sequence[tuple[str, int]]:
        """Every file of the task's workspace with its size in bytes, by path."""
        ...


def normalize(path: str) -> str:
    """The workspace path ``path`` names, or :class:`WorkspaceLimitError` saying why not."""
    cleaned = path.strip().strip("/")
    segments = cleaned.split("/")
    if not cleaned or any(s in ("", ".", "..") for s in segments):
        raise WorkspaceLimitError(
            f"{path!r} is not a workspace path: use a relative path like 'notes/todo.md', "
            "without '.', '..' or empty segments"
        )
    if len(cleaned) > 512:
        raise WorkspaceLimitError("a workspace path has at most 512 characters")
    return cleaned


class StoreWorkspace:
    """The default backing: the agent's store (``workspace_files``), written in a worker thread."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store

    async def read(self, task_id: str, path: str) -> str | None:
        return await anyio.to_thread.run_sync(self._store.workspace_read, task_id, path)

    async def write(self, task_id: str, path: str, content: str) -> None:
        await anyio.to_thread.run_sync(self._store.workspace_write, task_id, path, content)

    async def delete(self, task_id: str, path: str) -> bool:
        return await anyio.to_thread.run_sync(self._store.workspace_delete, task_id, path)

    async def list(self, task_id: str) -> Sequence[tuple[str, int]]:
        return await anyio.to_thread.run_sync(self._store.workspace_list, task_id)


class Workspace:
    """The caps and the tools over one backing."""

    def __init__(self, backing: WorkspaceBacking) -> None:
        self.backing = backing

    async def write(self, task_id: str, path: str, content: str) -> int:
        """Write the file; its size. Raises :class:`WorkspaceLimitError` past a cap."""
        path = normalize(path)
        size = len(content.encode())
        if size > MAX_FILE_BYTES:
            raise WorkspaceLimitError(
                f"{path} would hold {size} bytes; a workspace file holds at most "
                f"{MAX_FILE_BYTES} bytes (512 KiB): split it into smaller files"
            )
        if await self.backing.read(task_id, path) is None:
            files = await self.backing.list(task_id)
            if len(files) >= MAX_FILES:
                raise WorkspaceLimitError(
                    f"the workspace holds {len(files)} files, its most ({MAX_FILES}): delete a "
                    f"file first, or write to one that exists; {path} was not created"
                )
        await self.backing.write(task_id, path, content)
        return size

    async def read(self, task_id: str, path: str) -> str | None:
        return await self.backing.read(task_id, normalize(path))

    async def delete(self, task_id: str, path: str) -> bool:
        return await self.backing.delete(task_id, normalize(path))

    async def list(self, task_id: str) -> list[tuple[str, int]]:
        return sorted(await self.backing.list(task_id))

    async def call(self, name: str, task_id: str, arguments: str) -> ToolCallOutput:
        """Run the workspace tool ``name`` with the model's arguments (a JSON object)."""
        try:
            args: Any = json.loads(arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return ToolCallOutput(f"{name} takes a JSON object of arguments", failed=True)
        given: dict[str, Any] = args  # pyright: ignore[reportUnknownVariableType]
        path = str(given.get("path", ""))
        try:
            if name == "workspace_list":
                files = await self.list(task_id)
                if not files:
                    return ToolCallOutput("the workspace is empty")
                return ToolCallOutput("\n".join(f"{p} ({size} bytes)" for p, size in files))
            if name == "workspace_read":
                content = await self.read(task_id, path)
                if content is None:
                    return ToolCallOutput(f"there is no file {path!r}", failed=True)
                return ToolCallOutput(content)
            if name == "workspace_write":
                content = given.get("content")
                if not isinstance(content, str):
                    return ToolCallOutput("workspace_write needs content (text)", failed=True)
                size = await self.write(task_id, path, content)
                return ToolCallOutput(f"wrote {normalize(path)} ({size} bytes)")
            if name == "workspace_delete":
                existed = await self.delete(task_id, path)
                return ToolCallOutput(
                    f"deleted {normalize(path)}" if existed else f"there was no file {path!r}"
                )
            if name == "workspace_attach":
                content = await self.read(task_id, path)
                if content is None:
                    return ToolCallOutput(f"there is no file {path!r}", failed=True)
                return ToolCallOutput(
                    f"{normalize(path)} is attached to the answer",
                    artifacts=(_artifact(task_id, normalize(path), content),),
                )
        except WorkspaceLimitError as error:
            return ToolCallOutput(str(error), failed=True)
        return ToolCallOutput(f"there is no workspace tool {name!r}", failed=True)


def _artifact(task_id: str, path: str, content: str) -> ProtoJSON:
    """A workspace file as an artifact (the same id each time the file is attached)."""
    return {
        "artifactId": f"{task_id}:workspace:{path}",
        "name": path,
        "parts": [
            {"text": content, "filename": path.rsplit("/", 1)[-1], "mediaType": "text/plain"}
        ],
    }


_PATH = {"type": "string", "description": "a relative path, e.g. 'notes/todo.md'"}

#: name -> (description, JSON schema of the arguments)
WORKSPACE_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "workspace_list": (
        "List the files of this task's workspace, with their sizes.",
        {"type": "object", "properties": {}},
    ),
    "workspace_read": (
        "Read a text file of this task's workspace.",
        {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
    ),
    "workspace_write": (
        f"Create or replace a text file of this task's workspace (at most {MAX_FILE_BYTES} "
        f"bytes a file, {MAX_FILES} files). It is kept for the rest of the task.",
        {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
    "workspace_delete": (
        "Delete a file of this task's workspace.",
        {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
    ),
    "workspace_attach": (
        "Return a file of this task's workspace to the user with the answer, as an artifact.",
        {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
    ),
}


def workspace_tool_definitions() -> list[Any]:
    """The workspace tools as pydantic-ai tool definitions (imported here: the models extra)."""
    from pydantic_ai.tools import ToolDefinition

    return [
        ToolDefinition(name=name, description=description, parameters_json_schema=schema)
        for name, (description, schema) in WORKSPACE_TOOLS.items()
    ]
