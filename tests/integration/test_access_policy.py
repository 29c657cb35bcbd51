"""The access policy in header mode: a task a participant is not on reads as not found.

Participants are named by ``X-Participant-Id`` (as a gateway asserts them). A named participant
reaches the tasks they are on; an anonymous caller reaches the tasks started anonymously; nobody
reaches anybody else's, through any task method, running or ended.
"""

from __future__ import annotations

import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from harness_core import Gate, ScriptedModel, TurnOutput
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import HELD, collect, send_blocking, send_immediately

pytestmark = pytest.mark.anyio


def who(participant: str | None) -> dict[str, str]:
    return {"X-Participant-Id": participant} if participant else {}


async def test_participants_reach_only_their_own_tasks_through_every_method(make_harness):
    """Given alice's ended task, alice's open task, and an anonymous task
    When bob, alice and an anonymous caller read, list, follow, cancel and message them
    Then each reaches exactly the tasks the policy gives them."""
    model = ScriptedModel(["done", TurnOutput("more?", action="ask"), "anon done"])
    harness = make_harness(model)
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False, headers=who("alice")) as alice:
            ended = await send_blocking(alice, user_message("one"))
            open_task = await send_blocking(alice, user_message("two"))
        async with a2a_client(url, streaming=False) as anonymous:
            anons = await send_blocking(anonymous, user_message("three"))
        assert open_task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

        listed: dict[str | None, list[str]] = {}
        readable: dict[str | None, list[str]] = {}
        for caller in ("alice", "bob", None):
            async with a2a_client(url, headers=who(caller)) as client:
                page = await client.list_tasks(ListTasksRequest())
                listed[caller] = sorted(t.id for t in page.tasks)
                readable[caller] = []
                for task in (ended, open_task, anons):
                    try:
                        await client.get_task(GetTaskRequest(id=task.id))
                    except TaskNotFoundError:
                        continue
                    readable[caller].append(task.id)

        async with a2a_client(url, headers=who("bob")) as bob:
            with pytest.raises(TaskNotFoundError):
                await bob.cancel_task(CancelTaskRequest(id=open_task.id))
            with pytest.raises(TaskNotFoundError):
                await collect(bob.subscribe(SubscribeToTaskRequest(id=open_task.id)))
            with pytest.raises(TaskNotFoundError):
                await collect(
                    bob.send_message(
                        SendMessageRequest(message=user_message("hijack", task_id=open_task.id))
                    )
                )
        async with a2a_client(url, streaming=False) as anonymous:
            with pytest.raises(TaskNotFoundError):
                await anonymous.cancel_task(CancelTaskRequest(id=open_task.id))
        async with a2a_client(url, streaming=False, headers=who("alice")) as alice:
            await send_blocking(alice, user_message("yes", task_id=open_task.id))
            answered = await alice.get_task(GetTaskRequest(id=open_task.id))

    assert listed == {"alice": sorted([ended.id, open_task.id]), "bob": [], None: [anons.id]}
    assert readable == {"alice": [ended.id, open_task.id], "bob": [], None: [anons.id]}
    # bob's and the anonymous caller's attempts left alice's task as it was.
    assert [m.parts[0].text for m in answered.history] == ["two", "more?", "yes", "anon done"]


async def test_a_running_task_is_listed_only_for_its_participant(make_harness):
    gate = Gate()
    harness = make_harness(ScriptedModel(["held"], gate=gate), model=HELD)
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False, headers=who("alice")) as alice:
            task = await send_immediately(alice, user_message("slow"))
            await gate.wait_entered()
            mine = await alice.list_tasks(ListTasksRequest())
        async with a2a_client(url, streaming=False, headers=who("bob")) as bob:
            theirs = await bob.list_tasks(ListTasksRequest())
        gate.release()
    assert [t.id for t in mine.tasks] == [task.id]
    assert theirs.tasks == []
