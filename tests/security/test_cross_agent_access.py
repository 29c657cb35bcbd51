"""Abuse case 2: one agent's client reaching for another agent's task, in the same process and the
same Temporal namespace.

Every task operation of agent a on agent b's task answers not found (push configs: not supported),
over both A2A bindings, and b's task is left exactly as it was.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from a2a.client import ClientConfig
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from harness_core import Gate, ScriptedModel, TurnOutput
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import (
    HELD,
    collect,
    send_blocking,
    send_immediately,
    wait_for_state,
)
from tests.security.victim import snapshot

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_every_task_operation_of_agent_a_on_agent_bs_task_is_not_found(
    make_harness, binding: str
):
    """Given agent b's task waiting for input, and agent a in the same process and namespace
    When a's client calls GetTask, ListTasks, CancelTask, SubscribeToTask, SendMessage with the
    task's id and the push-config methods on it
    Then each is refused as not found (push: not supported) and b's task is unchanged."""
    b = make_harness(ScriptedModel([TurnOutput("which account?", action="ask"), "ok"]))
    a = make_harness(ScriptedModel(["a's answer"]))
    async with serving(b, a) as url:
        async with a2a_client(f"{url}/agents/{b.agent_id}", streaming=False) as victim:
            task = await send_blocking(victim, user_message("close my account"))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        before = await snapshot(b, task.id, None)
        async with _client(f"{url}/agents/{a.agent_id}", binding) as intruder:
            with pytest.raises(TaskNotFoundError):
                await intruder.get_task(GetTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await intruder.cancel_task(CancelTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await collect(intruder.subscribe(SubscribeToTaskRequest(id=task.id)))
            with pytest.raises(TaskNotFoundError):
                await collect(
                    intruder.send_message(
                        SendMessageRequest(message=user_message("yes", task_id=task.id))
                    )
                )
            listed = await intruder.list_tasks(ListTasksRequest())
            with pytest.raises(TaskNotFoundError):
                await intruder.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=task.id, url="http://127.0.0.1:9/")
                )
            with pytest.raises(TaskNotFoundError):
                await intruder.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task.id, id="x")
                )
            with pytest.raises(TaskNotFoundError):
                await intruder.list_task_push_notification_configs(
                    ListTaskPushNotificationConfigsRequest(task_id=task.id)
                )
            with pytest.raises(TaskNotFoundError):
                await intruder.delete_task_push_notification_config(
                    DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="x")
                )
        after = await snapshot(b, task.id, None)
    assert listed.tasks == []
    assert after == before
    assert after["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_another_agents_running_and_ended_tasks_stay_out_of_reach(make_harness):
    """Given b's task mid-turn (running) and another that ended (read from b's store)
    Then agent a reads neither, and b's running task goes on to complete untouched."""
    model = ScriptedModel(["first", "mine"])
    b = make_harness(model, model=HELD)
    a = make_harness()
    async with serving(b, a) as url:
        async with a2a_client(f"{url}/agents/{b.agent_id}", streaming=False) as victim:
            ended = await send_blocking(victim, user_message("done already"))
            model.gate = gate = Gate()
            running = await send_immediately(victim, user_message("private"))
            await gate.wait_entered()
        async with a2a_client(f"{url}/agents/{a.agent_id}") as intruder:
            for task_id in (ended.id, running.id):
                with pytest.raises(TaskNotFoundError):
                    await intruder.get_task(GetTaskRequest(id=task_id))
                with pytest.raises(TaskNotFoundError):
                    await intruder.cancel_task(CancelTaskRequest(id=task_id))
            listed = await intruder.list_tasks(ListTasksRequest())
        gate.release()
        async with a2a_client(f"{url}/agents/{b.agent_id}", streaming=False) as victim:
            done = await wait_for_state(victim, running.id, TaskState.TASK_STATE_COMPLETED)
    assert listed.tasks == []
    assert [m.parts[0].text for m in done.history] == ["private", "mine"]


def _client(url: str, binding: str):
    """The a2a-sdk client for ``url``, on one binding."""
    import contextlib

    from a2a.client import A2ACardResolver, ClientFactory

    @contextlib.asynccontextmanager
    async def open_client():
        async with httpx.AsyncClient(timeout=30) as http:
            card = await A2ACardResolver(http, url).get_agent_card()
            config = ClientConfig(
                streaming=True, httpx_client=http, supported_protocol_bindings=[binding]
            )
            client = ClientFactory(config).create(card)
            try:
                yield client
            finally:
                await client.close()

    return open_client()


async def test_a_task_workflow_on_another_queue_is_not_found_even_if_it_names_this_agent(
    make_harness,
):
    """Given a TaskWorkflow that claims agent a's id but runs on another task queue (as one started
    by another deployment would)
    Then agent a reads it as not found through every method, by its queue alone, and leaves it
    running."""
    from temporalio.client import Client, WorkflowExecutionStatus

    from harness_core.payloads import TaskStart
    from harness_core.tasks.workflow import TaskWorkflow

    a = make_harness()
    task_id = f"forged-{uuid.uuid4().hex}"
    async with serving(a) as url:
        connection = a.tasks.connection

        async def start(client: Client) -> None:
            await client.start_workflow(
                TaskWorkflow.run,
                TaskStart(
                    task_id=task_id,
                    context_id="c",
                    agent_id=a.agent_id,
                    local_activity=False,
                    turn_timeout=60.0,
                ),
                id=task_id,
                task_queue=f"elsewhere-{uuid.uuid4().hex}",  # no worker polls it
            )

        async def status(client: Client) -> WorkflowExecutionStatus | None:
            return (await client.get_workflow_handle(task_id).describe()).status

        async def terminate(client: Client) -> None:
            await client.get_workflow_handle(task_id).terminate()

        await connection.bridge.call(lambda: start(connection.client))
        try:
            async with a2a_client(url) as client:
                with pytest.raises(TaskNotFoundError):
                    await client.get_task(GetTaskRequest(id=task_id))
                with pytest.raises(TaskNotFoundError):
                    await client.cancel_task(CancelTaskRequest(id=task_id))
                with pytest.raises(TaskNotFoundError):
                    await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
                with pytest.raises(TaskNotFoundError):
                    await collect(
                        client.send_message(
                            SendMessageRequest(message=user_message("hi", task_id=task_id))
                        )
                    )
                listed = await client.list_tasks(ListTasksRequest())
            still = await connection.bridge.call(lambda: status(connection.client))
        finally:
            await connection.bridge.call(lambda: terminate(connection.client))
    assert task_id not in [t.id for t in listed.tasks]
    assert still == WorkflowExecutionStatus.RUNNING
