"""A task's workspace without a server: the caps the core enforces (bytes, not characters; the file
count, overwrites still allowed), paths, the tools' answers, and the store's backing across a reopen."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness_core.agents.workspace import (
    MAX_FILE_BYTES,
    MAX_FILES,
    StoreWorkspace,
    Workspace,
    WorkspaceLimitError,
)
from harness_core.store import TaskStore

pytestmark = pytest.mark.anyio


class MemoryBacking:
    """A backing in a dict, as a plugin might supply one."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], str] = {}

    async def read(self, task_id: str, path: str) -> str | None:
        return self.files.get((task_id, path))

    async def write(self, task_id: str, path: str, content: str) -> None:
        self.files[(task_id, path)] = content

    async def delete(self, task_id: str, path: str) -> bool:
        return self.files.pop((task_id, path), None) is not None

    async def list(self, task_id: str) -> Sequence[tuple[str, int]]:
        return [(p, len(c.encode())) for (t, p), c in self.files.items() if t == task_id]


@pytest.fixture(params=["memory", "store"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "memory":
        yield Workspace(MemoryBacking())
        return
    store = TaskStore(tmp_path / "a.sqlite3")
    yield Workspace(StoreWorkspace(store))
    store.close()


async def test_files_round_trip_per_task_and_paths_are_normalized(workspace: Workspace):
    assert await workspace.write("t1", "/notes/plan.md/", "step one") == 8
    assert await workspace.read("t1", "notes/plan.md") == "step one"
    assert await workspace.read("t2", "notes/plan.md") is None
    await workspace.write("t1", "a.txt", "x")
    assert await workspace.list("t1") == [("a.txt", 1), ("notes/plan.md", 8)]
    assert await workspace.delete("t1", "a.txt") is True
    assert await workspace.delete("t1", "a.txt") is False
    for bad in ("", "/", "../etc/passwd", "a/./b", "a//b"):
        with pytest.raises(WorkspaceLimitError, match="is not a workspace path"):
            await workspace.write("t1", bad, "x")


async def test_the_file_cap_counts_bytes_not_characters(workspace: Workspace):
    euros = "€" * (MAX_FILE_BYTES // 3 + 1)  # fewer characters than the cap, more bytes
    assert len(euros) < MAX_FILE_BYTES
    with pytest.raises(WorkspaceLimitError, match=f"holds at most {MAX_FILE_BYTES} bytes"):
        await workspace.write("t1", "big.txt", euros)
    assert await workspace.read("t1", "big.txt") is None
    assert await workspace.write("t1", "fits.txt", "€" * (MAX_FILE_BYTES // 3)) <= MAX_FILE_BYTES


async def test_at_the_file_count_cap_only_a_new_file_is_refused(workspace: Workspace):
    for n in range(MAX_FILES):
        await workspace.write("t1", f"dir/f{n}.txt", "x")
    await workspace.write("t1", "dir/f0.txt", "overwritten")
    assert await workspace.read("t1", "dir/f0.txt") == "overwritten"
    with pytest.raises(WorkspaceLimitError, match=r"holds 200 files, its most \(200\)"):
        await workspace.write("t1", "new.txt", "x")
    # A directory's path is not a file: writing there is a new file, refused too.
    with pytest.raises(WorkspaceLimitError, match="dir was not created"):
        await workspace.write("t1", "dir", "x")
    assert await workspace.delete("t1", "dir/f1.txt")
    await workspace.write("t1", "new.txt", "x")
    # Another task's workspace is its own.
    await workspace.write("t2", "new.txt", "y")


async def test_the_tools_answer_the_model_in_words_it_can_act_on(workspace: Workspace):
    def args(**values: str) -> str:
        return json.dumps(values)

    empty = await workspace.call("workspace_list", "t1", "{}")
    assert (empty.text, empty.failed) == ("the workspace is empty", False)
    wrote = await workspace.call("workspace_write", "t1", args(path="/n.md", content="hi €"))
    assert wrote.text == "wrote n.md (6 bytes)"
    assert (await workspace.call("workspace_list", "t1", "")).text == "n.md (6 bytes)"
    assert (await workspace.call("workspace_read", "t1", args(path="n.md"))).text == "hi €"
    missing = await workspace.call("workspace_read", "t1", args(path="nope"))
    assert missing.failed and missing.text == "there is no file 'nope'"
    attached = await workspace.call("workspace_attach", "t1", args(path="n.md"))
    assert attached.text == "n.md is attached to the answer"
    assert attached.artifacts == (
        {
            "artifactId": "t1:workspace:n.md",
            "name": "n.md",
            "parts": [{"text": "hi €", "filename": "n.md", "mediaType": "text/plain"}],
        },
    )
    bad = await workspace.call("workspace_write", "t1", args(path="../x", content="x"))
    assert bad.failed and "not a workspace path" in bad.text
    assert (await workspace.call("workspace_write", "t1", "[1]")).failed
    gone = await workspace.call("workspace_delete", "t1", args(path="n.md"))
    assert gone.text == "deleted n.md"


async def test_the_stores_workspace_survives_a_reopen(tmp_path: Path):
    store = TaskStore(tmp_path / "a.sqlite3")
    await Workspace(StoreWorkspace(store)).write("t1", "keep.md", "kept")
    store.close()
    store = TaskStore(tmp_path / "a.sqlite3")
    assert await Workspace(StoreWorkspace(store)).read("t1", "keep.md") == "kept"
    store.close()
