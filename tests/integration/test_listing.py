"""The listing index: reads and listings never wait for a turn, pages are keyset cursors, every
ListTasks filter of A2A 1.0 works, and the index is right after a restart.

Real HTTP on loopback, the real a2a-sdk client and real Temporal; only the model is scripted.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator
from typing import cast

import anyio
import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf.timestamp_pb2 import Timestamp

from harness_core import Gate, ScriptedModel, TurnOutput
from harness_core.payloads import Archive, IndexEntry
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import send_blocking

pytestmark = pytest.mark.anyio


async def test_reads_answer_while_a_blocking_turn_holds_its_workflow_task(make_harness):
    """Given a blocking send whose turn (a local activity: it holds the workflow task) waits on a
    gate that opens only after the reads, when another caller lists, gets and subscribes, then
    each answers with the task WORKING (SUBMITTED, as its sender listed it, for the turn's first
    50 ms); had any waited for the turn, the test would hang."""
    gate = Gate()
    harness = make_harness(ScriptedModel(["at last"], gate=gate))
    answers: list[Task] = []
    async with (
        serving(harness) as url,
        a2a_client(url, streaming=False) as client,
        a2a_client(url) as reader,
        anyio.create_task_group() as tg,
    ):

        async def send() -> None:
            answers.append(await send_blocking(client, user_message("think hard")))

        tg.start_soon(send)
        with anyio.fail_after(30):
            await gate.wait_entered()
            while True:
                listed = await reader.list_tasks(ListTasksRequest())
                assert listed.total_size == 1
                [task] = listed.tasks
                if task.status.state == TaskState.TASK_STATE_WORKING:
                    break
                # Listed by its sender; a quick first turn writes its start after 50 ms.
                assert task.status.state == TaskState.TASK_STATE_SUBMITTED
                await anyio.sleep(0.02)
            got = await reader.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_WORKING
            assert [m.parts[0].text for m in got.history] == ["think hard"]
            stream = cast(
                "AsyncGenerator[StreamResponse]",
                reader.subscribe(SubscribeToTaskRequest(id=task.id)),
            )
            first = await anext(stream)
            await stream.aclose()
            assert first.task.status.state == TaskState.TASK_STATE_WORKING
        gate.release()
    assert answers[0].status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_cancel_reaches_a_blocking_turn_that_holds_its_workflow_task(make_harness):
    """Given a blocking send whose turn never ends by itself, when another caller cancels the task,
    then CancelTask returns it CANCELED and the blocked sender gets it CANCELED too."""
    gate = Gate()
    harness = make_harness(ScriptedModel(["never"], gate=gate))
    answers: list[Task] = []
    async with (
        serving(harness) as url,
        a2a_client(url, streaming=False) as client,
        anyio.create_task_group() as tg,
    ):

        async def send() -> None:
            answers.append(await send_blocking(client, user_message("forever")))

        tg.start_soon(send)
        with anyio.fail_after(30):
            await gate.wait_entered()
            [task] = (await client.list_tasks(ListTasksRequest())).tasks
            canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert answers[0].status.state == TaskState.TASK_STATE_CANCELED
    assert gate.entered == 1


async def test_pages_are_keyset_cursors_with_an_exact_total_under_concurrent_change(make_harness):
    """Given seven tasks waiting for input, when a client walks the list three at a time while one
    task it has seen and one it has not yet seen change, and a new task starts, then every task
    that did not change appears exactly once, none appears twice, and each page's total is exact."""
    harness = make_harness(ScriptedModel([TurnOutput("and then?", action="ask")]))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        tasks = [await send_blocking(client, user_message(f"task {n}")) for n in range(7)]
        first = await client.list_tasks(ListTasksRequest(page_size=3))
        seen = [t.id for t in first.tasks]
        unseen = [t.id for t in tasks if t.id not in seen]
        # Newest first: the walk's order is the tasks' in reverse.
        assert seen == [t.id for t in reversed(tasks)][:3]
        await send_blocking(client, user_message("more", task_id=seen[0]))
        await send_blocking(client, user_message("more", task_id=unseen[0]))
        await send_blocking(client, user_message("a new one"))
        pages = [first]
        while pages[-1].next_page_token:
            pages.append(
                await client.list_tasks(
                    ListTasksRequest(page_size=3, page_token=pages[-1].next_page_token)
                )
            )
    walked = [t.id for page in pages for t in page.tasks]
    assert len(walked) == len(set(walked))
    unchanged = {t.id for t in tasks} - {seen[0], unseen[0]}
    assert unchanged <= set(walked)
    assert unseen[0] not in walked  # it moved to the front, behind the walk
    assert [p.total_size for p in pages] == [7, 8, 8][: len(pages)]
    assert all(len(p.tasks) <= 3 for p in pages)


async def test_list_filters_by_status_time_state_context_history_and_artifacts(make_harness):
    """Given an answered task and a task waiting for input, when ListTasks filters by each A2A 1.0
    parameter, then each keeps the right tasks and shapes them as asked; a negative historyLength
    is refused."""
    harness = make_harness(ScriptedModel(["done", TurnOutput("which one?", action="ask")]))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        done = await send_blocking(client, user_message("one"))
        asking = await send_blocking(client, user_message("two"))
        plain = await client.list_tasks(ListTasksRequest())
        with_artifacts = await client.list_tasks(ListTasksRequest(include_artifacts=True))
        short = await client.list_tasks(ListTasksRequest(history_length=1))
        none = await client.list_tasks(ListTasksRequest(history_length=0))
        waiting = await client.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_INPUT_REQUIRED)
        )
        by_context = await client.list_tasks(ListTasksRequest(context_id=done.context_id))
        after = Timestamp()
        after.CopyFrom(asking.status.timestamp)
        since = await client.list_tasks(ListTasksRequest(status_timestamp_after=after))
        after.FromSeconds(after.seconds + 3600)
        later = await client.list_tasks(ListTasksRequest(status_timestamp_after=after))
        with pytest.raises(InvalidParamsError, match="historyLength"):
            await client.list_tasks(ListTasksRequest(history_length=-1))
    assert [t.id for t in plain.tasks] == [asking.id, done.id]
    assert all(not t.artifacts for t in plain.tasks)
    assert [[m.parts[0].text for m in t.history] for t in plain.tasks] == [
        ["two", "which one?"],
        ["one", "done"],
    ]
    assert [len(t.artifacts) for t in with_artifacts.tasks] == [0, 1]
    assert [[m.parts[0].text for m in t.history] for t in short.tasks] == [["which one?"], ["done"]]
    assert all(not t.history for t in none.tasks)
    assert [t.id for t in waiting.tasks] == [asking.id]
    assert waiting.total_size == 1
    assert [t.id for t in by_context.tasks] == [done.id]
    assert [t.id for t in since.tasks] == [asking.id]
    assert (later.total_size, list(later.tasks)) == (0, [])


async def test_a_task_listed_before_a_start_that_never_happened_is_forgotten(make_harness):
    """Given a task the index learned of before its workflow started, whose process died before
    the start (simulated: the entry alone, written 60 s ago), when it is read or listed, then it is
    not found and not listed, and its entry is gone; a real task beside it is untouched."""
    harness = make_harness(ScriptedModel(["real"]))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        real = await send_blocking(client, user_message("real one"))
        store = harness.tasks._store  # pyright: ignore[reportPrivateUsage]
        ghost = "00000000-0000-4000-8000-00000000dead"
        store.checkpoint(
            IndexEntry(
                archive=Archive(
                    task_id=ghost,
                    agent_id=harness.agent_id,
                    context_id="ctx",
                    first_message=0,
                    messages=({"messageId": "g", "role": "ROLE_USER", "parts": [{"text": "?"}]},),
                    events=(),
                    participants=(),
                ),
                status={"state": "TASK_STATE_SUBMITTED", "timestamp": "2030-01-01T00:00:00Z"},
                last_seq=0,
                messages=1,
                busy=True,
            ),
            partial=True,
        )
        with sqlite3.connect(store.path) as db:  # the entry's age: its process died a while ago
            db.execute(
                "UPDATE task_index SET written_at = written_at - 60000000 WHERE task_id = ?",
                (ghost,),
            )
        listed = await client.list_tasks(ListTasksRequest())
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=ghost))
        row = store.index_row(ghost)
    assert [t.id for t in listed.tasks] == [real.id]
    assert listed.total_size == 1
    assert row is None
