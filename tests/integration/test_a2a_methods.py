"""Every A2A method through the real a2a-sdk client, real HTTP on loopback and real Temporal.

Only the model is scripted. Each test runs on asyncio and on Trio.
"""

from __future__ import annotations

import base64
import uuid

import anyio
import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from harness_core import (
    Ask,
    Complete,
    Gate,
    Harness,
    HarnessGroup,
    ScriptedModel,
    TurnContext,
    TurnOutput,
)
from harness_core.agents.turn import TurnResult
from tests.conftest import a2a_client, agent_settings, serving, user_message

pytestmark = pytest.mark.anyio

# Tests that hold a turn mid-way run it as a regular activity: a local activity keeps its workflow
# task open, so reads and cancels of the task would wait for the turn (that is the fast path's cost).
HELD = {"local_activity": False}


async def send_blocking(client, message) -> Task:
    events = [e async for e in client.send_message(SendMessageRequest(message=message))]
    assert len(events) == 1
    assert events[0].HasField("task")
    return events[0].task


async def send_immediately(client, message) -> Task:
    """SendMessage with returnImmediately: the task as it is when the message was accepted."""
    request = SendMessageRequest(
        message=message, configuration=SendMessageConfiguration(return_immediately=True)
    )
    events = [e async for e in client.send_message(request)]
    assert len(events) == 1
    return events[0].task


async def collect(stream) -> list[StreamResponse]:
    return [event async for event in stream]


def kinds(events: list[StreamResponse]) -> list[str]:
    return [str(e.WhichOneof("payload")) for e in events]


async def wait_for_state(client, task_id: str, state: int) -> Task:
    with anyio.fail_after(30):
        while True:
            task = await client.get_task(GetTaskRequest(id=task_id))
            if task.status.state == state:
                return task
            await anyio.sleep(0.05)


async def test_a_blocking_send_returns_the_completed_task_with_the_models_answer(make_harness):
    harness = make_harness(ScriptedModel(["forty-two"]))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("what is the answer?"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.message_id == f"{task.id}:final"
    assert [p.text for p in task.status.message.parts] == ["forty-two"]
    assert [a.parts[0].text for a in task.artifacts] == ["forty-two"]
    assert [m.parts[0].text for m in task.history] == ["what is the answer?", "forty-two"]


async def test_return_immediately_answers_before_the_turn_ends_and_the_task_completes_later(
    make_harness,
):
    gate = Gate()
    harness = make_harness(ScriptedModel(["done"], gate=gate), model=HELD)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        request = SendMessageRequest(
            message=user_message("slow job"),
            configuration=SendMessageConfiguration(return_immediately=True),
        )
        [event] = [e async for e in client.send_message(request)]
        assert event.task.status.state in (
            TaskState.TASK_STATE_SUBMITTED,
            TaskState.TASK_STATE_WORKING,
        )
        await gate.wait_entered()
        gate.release()
        task = await wait_for_state(client, event.task.id, TaskState.TASK_STATE_COMPLETED)
    assert task.artifacts[0].parts[0].text == "done"


async def test_a_streaming_send_yields_the_task_then_working_artifact_and_completed(make_harness):
    harness = make_harness(ScriptedModel(["streamed answer"]))
    async with serving(harness) as url, a2a_client(url) as client:
        events = await collect(client.send_message(SendMessageRequest(message=user_message("hi"))))
    assert kinds(events) == ["task", "status_update", "artifact_update", "status_update"]
    assert events[1].status_update.status.state == TaskState.TASK_STATE_WORKING
    assert events[2].artifact_update.artifact.parts[0].text == "streamed answer"
    assert events[3].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    seqs = [e.status_update.metadata["harness.seq"] for e in (events[1], events[3])]
    assert seqs == [1, 3]


async def test_get_task_applies_the_history_length(make_harness):
    harness = make_harness(ScriptedModel(["a1"]))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("q1"))
        full = await client.get_task(GetTaskRequest(id=task.id))
        last = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        none = await client.get_task(GetTaskRequest(id=task.id, history_length=0))
    assert [m.parts[0].text for m in full.history] == ["q1", "a1"]
    assert [m.parts[0].text for m in last.history] == ["a1"]
    assert len(none.history) == 0


async def test_an_unknown_task_is_not_found_through_get_cancel_and_subscribe(make_harness):
    harness = make_harness()
    async with serving(harness) as url, a2a_client(url) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(CancelTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotFoundError):
            await collect(client.subscribe(SubscribeToTaskRequest(id="no-such-task")))
        with pytest.raises(TaskNotFoundError):
            await collect(
                client.send_message(
                    SendMessageRequest(message=user_message("x", task_id="no-such-task"))
                )
            )


async def test_list_tasks_shows_running_and_ended_tasks_filtered_by_context(make_harness):
    gate = Gate()
    harness = make_harness(ScriptedModel(["ok"], gate=gate), model=HELD)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        gate.release()
        done = await send_blocking(client, user_message("first"))
        held = Gate()
        harness.agent.gate = held  # pyright: ignore[reportAttributeAccessIssue]  # the next turn is held: its task stays running
        running = await send_immediately(client, user_message("second"))
        await held.wait_entered()
        listed = await client.list_tasks(ListTasksRequest())
        by_context = await client.list_tasks(ListTasksRequest(context_id=done.context_id))
        completed = await client.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, include_artifacts=True)
        )
        held.release()
        await wait_for_state(client, running.id, TaskState.TASK_STATE_COMPLETED)
    assert {t.id for t in listed.tasks} == {done.id, running.id}
    assert listed.total_size == 2
    assert [t.id for t in by_context.tasks] == [done.id]
    assert [t.id for t in completed.tasks] == [done.id]
    assert completed.tasks[0].artifacts[0].parts[0].text == "ok"
    assert all(len(t.artifacts) == 0 for t in listed.tasks)


async def test_cancel_ends_a_running_task_as_canceled_and_an_ended_task_is_not_cancelable(
    make_harness,
):
    gate = Gate()
    harness = make_harness(ScriptedModel(["never"], gate=gate), model=HELD)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_immediately(client, user_message("long job"))
        await gate.wait_entered()
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))
        gate.release()
        again = await client.get_task(GetTaskRequest(id=task.id))
    assert again.status.state == TaskState.TASK_STATE_CANCELED
    assert len(again.artifacts) == 0


async def test_subscribe_replays_every_event_from_the_start_and_resumes_after_last_event_id(
    make_harness,
):
    harness = make_harness(ScriptedModel(["replayed"]))
    async with serving(harness) as url:
        async with a2a_client(url) as client:
            sent = await collect(
                client.send_message(SendMessageRequest(message=user_message("hi")))
            )
            task_id = sent[0].task.id
            # A2A 1.0 3.1.6: an ended task cannot be subscribed to ...
            with pytest.raises(UnsupportedOperationError):
                await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
        # ... but a client resuming a stream it lost gets the rest of it, from any point.
        async with a2a_client(url, headers={"Last-Event-ID": "0"}) as again:
            replay = await collect(again.subscribe(SubscribeToTaskRequest(id=task_id)))
        async with a2a_client(url, headers={"Last-Event-ID": "2"}) as resumed:
            tail = await collect(resumed.subscribe(SubscribeToTaskRequest(id=task_id)))
    assert kinds(replay) == ["task", "status_update", "artifact_update", "status_update"]
    assert replay[1:] == sent[1:]
    assert kinds(tail) == ["task", "status_update"]
    assert tail[1] == sent[3]


async def test_a_retried_first_message_gets_the_same_task_not_a_second_one(make_harness):
    model = ScriptedModel(["once"])
    harness = make_harness(model)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        message = user_message("do it once", message_id="retry-me")
        first = await send_blocking(client, message)
        second = await send_blocking(client, message)
        listed = await client.list_tasks(ListTasksRequest())
    assert second.id == first.id
    assert second.status.state == TaskState.TASK_STATE_COMPLETED
    assert [t.id for t in listed.tasks] == [first.id]
    assert len(model.turns) == 1


async def test_a_client_that_disconnects_mid_stream_neither_cancels_nor_loses_the_task(
    make_harness,
):
    gate = Gate()
    harness = make_harness(ScriptedModel(["finished anyway"], gate=gate), model=HELD)
    async with serving(harness) as url:
        async with a2a_client(url) as client:
            stream = client.send_message(SendMessageRequest(message=user_message("go")))
            first = await anext(stream)
            await stream.aclose()  # type: ignore[attr-defined]  # the client goes away mid-stream
        task_id = first.task.id
        await gate.wait_entered()
        gate.release()
        async with a2a_client(url, headers={"Last-Event-ID": "0"}) as client:
            task = await wait_for_state(client, task_id, TaskState.TASK_STATE_COMPLETED)
            replay = await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
    assert task.artifacts[0].parts[0].text == "finished anyway"
    assert kinds(replay) == ["task", "status_update", "artifact_update", "status_update"]


async def test_a_task_that_asks_for_input_continues_with_the_next_message(make_harness):
    model = ScriptedModel([TurnOutput("which city?", action="ask"), "sunny in Paris"])
    harness = make_harness(model)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        asked = await send_blocking(client, user_message("weather?"))
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert asked.status.message.message_id == f"{asked.id}:ask:1"
        answered = await send_blocking(client, user_message("Paris", task_id=asked.id))
        whole = await client.get_task(GetTaskRequest(id=asked.id))
    assert answered.id == asked.id
    assert answered.status.state == TaskState.TASK_STATE_COMPLETED
    # A send answers with its own exchange; GetTask shows the whole task.
    assert [m.parts[0].text for m in answered.history] == ["Paris", "sunny in Paris"]
    assert [m.parts[0].text for m in whole.history] == [
        "weather?",
        "which city?",
        "Paris",
        "sunny in Paris",
    ]
    assert [t.history[-1].text for t in model.turns] == ["weather?", "Paris"]


async def test_a_message_to_an_ended_task_is_refused_with_a_clear_error(make_harness):
    harness = make_harness(ScriptedModel(["done"]))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("one"))
        # A2A 1.0 3.1.1: a message to a task in a terminal state is an unsupported operation.
        with pytest.raises(UnsupportedOperationError) as refused:
            await send_blocking(client, user_message("two", task_id=task.id))
        after = await client.get_task(GetTaskRequest(id=task.id))
    assert f"task {task.id} is completed" in str(refused.value)
    assert [m.parts[0].text for m in after.history] == ["one", "done"]


class ExplodingModel:
    async def reply(self, turn):
        raise RuntimeError("db password=hunter2")


async def test_a_failing_model_fails_the_task_without_leaking_the_exception_text(make_harness):
    harness = make_harness(ExplodingModel())
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("boom"))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "hunter2" not in str(task)


async def test_a_request_without_a_message_gets_invalid_params_not_a_traceback(make_harness):
    harness = make_harness()
    async with serving(harness) as url, httpx.AsyncClient() as http:
        response = await http.post(
            f"{url}/",
            headers={"A2A-Version": "1.0"},
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}},
        )
        bad_role = await http.post(
            f"{url}/",
            headers={"A2A-Version": "1.0"},
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "SendMessage",
                "params": {"message": {"messageId": "m", "role": "user", "parts": [{"text": "x"}]}},
            },
        )
    assert response.json()["error"]["code"] == -32602
    assert bad_role.json()["error"]["code"] == -32602
    assert "Traceback" not in response.text + bad_role.text


async def test_the_rest_binding_serves_the_same_tasks(make_harness):
    harness = make_harness(ScriptedModel(["over rest"]))
    async with serving(harness) as url, httpx.AsyncClient() as http:
        sent = await http.post(
            f"{url}/message:send",
            headers={"A2A-Version": "1.0"},
            json={"message": {"messageId": "r1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
        )
        assert sent.status_code == 200, sent.text
        task_id = sent.json()["task"]["id"]
        got = await http.get(f"{url}/tasks/{task_id}", headers={"A2A-Version": "1.0"})
        missing = await http.get(f"{url}/tasks/nope", headers={"A2A-Version": "1.0"})
    assert got.json()["status"]["state"] == "TASK_STATE_COMPLETED"
    assert missing.status_code == 404


async def test_subscribe_replays_an_ended_task_after_the_agent_restarted(
    agent_dir, temporal_address
):
    settings = agent_settings(agent_dir, temporal_address)
    first = Harness(settings, model=ScriptedModel(["kept"]))
    async with serving(first) as url, a2a_client(url) as client:
        sent = await collect(client.send_message(SendMessageRequest(message=user_message("keep"))))
    again = Harness(settings)  # the same agent and store, a new process life
    async with serving(again) as url, a2a_client(url, headers={"Last-Event-ID": "0"}) as client:
        replay = await collect(client.subscribe(SubscribeToTaskRequest(id=sent[0].task.id)))
        task = await client.get_task(GetTaskRequest(id=sent[0].task.id))
    assert replay[1:] == sent[1:]
    assert task.artifacts[0].parts[0].text == "kept"


async def test_the_heartbeat_schedule_runs_the_agents_heartbeat(make_harness):
    harness = make_harness(heartbeat={"interval": "1s"})
    async with HarnessGroup(harness):
        store = harness.tasks._store  # pyright: ignore[reportPrivateUsage]
        with anyio.fail_after(30):
            while store.get_meta("last_heartbeat") is None:
                await anyio.sleep(0.1)


async def test_a_first_message_is_new_and_its_retry_is_a_duplicate(make_harness):
    """``Delivery.duplicate`` (README, "Use it from code"): False for the message that starts a
    task and for a follow-up, True for a retry of either; a retry gets the task as it is."""

    async def agent(ctx: TurnContext) -> TurnResult:
        return Ask("which one?") if ctx.number == 1 else Complete("done")

    harness = make_harness(options={"agent": agent})
    first = {"messageId": "d1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    async with HarnessGroup(harness):
        sent = await harness.tasks.send(first, participant=None, wait=True)
        again = await harness.tasks.send(first, participant=None, wait=True)
        task_id = str(sent.view.task["id"])
        follow_up = {**first, "messageId": "d2", "taskId": task_id}
        answered = await harness.tasks.send(follow_up, participant=None, wait=True)
        retried = await harness.tasks.send(follow_up, participant=None, wait=True)
    assert (sent.duplicate, again.duplicate, answered.duplicate, retried.duplicate) == (
        False,
        True,
        False,
        True,
    )
    assert again.task_id == task_id
    assert retried.view.task["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_following_an_ended_task_returns_the_rest_of_its_log(make_harness):
    harness = make_harness(ScriptedModel(["x"]))
    async with HarnessGroup(harness):
        receipt = await harness.tasks.send(
            {"messageId": "f1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            participant=None,
            wait=True,
        )
        page = await harness.tasks.follow(str(receipt.view.task["id"]), 1, None)
    assert [e.seq for e in page.events] == [2, 3]
    assert page.view.closed


async def test_a_message_sent_during_a_turn_gets_its_own_turn_before_the_task_settles(
    make_harness,
):
    gate = Gate()
    model = ScriptedModel(["first answer", "second answer"], gate=gate)
    harness = make_harness(model, model=HELD)
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_immediately(client, user_message("one"))
        await gate.wait_entered()
        queued = await send_immediately(client, user_message("two", task_id=task.id))
        gate.release()
        done = await wait_for_state(client, task.id, TaskState.TASK_STATE_COMPLETED)
    assert queued.status.state == TaskState.TASK_STATE_WORKING
    assert [m.parts[0].text for m in done.history] == [
        "one",
        "first answer",
        "two",
        "second answer",
    ]
    assert [a.parts[0].text for a in done.artifacts] == ["first answer", "second answer"]
    assert [[m.text for m in t.history if m.role == "user"] for t in model.turns] == [
        ["one"],
        ["one", "two"],
    ]


async def test_a_message_id_reused_for_another_message_is_refused(make_harness):
    harness = make_harness(ScriptedModel(["ok"]))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        first = await send_blocking(client, user_message("original", message_id="m-reused"))
        with pytest.raises(InvalidParamsError) as refused:
            await send_blocking(
                client, user_message("different", message_id="m-reused", task_id=first.id)
            )
        after = await client.get_task(GetTaskRequest(id=first.id))
        # Without a task id, the same id with other content is another first message.
        other = await send_blocking(client, user_message("different", message_id="m-reused"))
    assert "already used for another message" in str(refused.value)
    assert [m.parts[0].text for m in after.history] == ["original", "ok"]
    assert other.id != first.id


async def test_subscribe_to_a_running_task_follows_it_to_the_end(make_harness):
    gate = Gate()
    harness = make_harness(ScriptedModel(["live"], gate=gate), model=HELD)
    async with serving(harness) as url, a2a_client(url) as client:
        async with a2a_client(url, streaming=False) as sender:
            task = await send_immediately(sender, user_message("watch me"))
        await gate.wait_entered()
        events: list[StreamResponse] = []
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                async for event in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                    events.append(event)

            tg.start_soon(watch)
            with anyio.fail_after(10):
                while not events:
                    await anyio.sleep(0.01)
            gate.release()
    assert kinds(events) == ["task", "status_update", "artifact_update", "status_update"]
    assert events[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_an_unexpected_error_reaches_the_client_as_a_generic_error_with_a_request_id(
    make_harness, monkeypatch, caplog
):
    harness = make_harness()

    async def broken(task_id: str) -> None:
        raise RuntimeError("db password=hunter2")

    async with serving(harness) as url, httpx.AsyncClient() as http:
        monkeypatch.setattr(harness.tasks, "view", broken)
        response = await http.post(
            f"{url}/",
            headers={"A2A-Version": "1.0"},
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "any"}},
        )
    error = response.json()["error"]
    assert error["code"] == -32603
    assert "hunter2" not in response.text
    request_id = error["message"].removeprefix("internal error (request ").removesuffix(")")
    assert len(request_id) == 12
    assert f"GetTask failed (request {request_id})" in caplog.text


async def test_a_streamed_or_immediate_send_is_not_held_by_a_slow_turn_on_the_default_settings(
    make_harness,
):
    gate = Gate()
    harness = make_harness(ScriptedModel(["slow"], gate=gate))  # default: local turns allowed
    async with serving(harness) as url, a2a_client(url) as client:
        stream = client.send_message(SendMessageRequest(message=user_message("stream")))
        with anyio.fail_after(5):  # a local turn would hold this for the whole turn
            first = await anext(stream)
        await gate.wait_entered()
        async with a2a_client(url, streaming=False) as other:
            with anyio.fail_after(5):
                read = await other.get_task(GetTaskRequest(id=first.task.id))
        gate.release()
        rest = [e async for e in stream]
    assert first.HasField("task")
    assert read.status.state == TaskState.TASK_STATE_WORKING
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_many_subscribers_of_one_task_all_see_it_to_the_end(make_harness):
    gate = Gate()
    harness = make_harness(ScriptedModel(["for everyone"], gate=gate), model=HELD)
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False) as sender:
            task = await send_immediately(sender, user_message("broadcast"))
        await gate.wait_entered()
        streams: list[list[StreamResponse]] = []
        async with a2a_client(url) as client, anyio.create_task_group() as tg:

            async def watch() -> None:
                events: list[StreamResponse] = []
                streams.append(events)
                async for event in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                    events.append(event)

            for _ in range(12):  # more than Temporal's 10 updates in flight per workflow
                tg.start_soon(watch)
            with anyio.fail_after(10):
                while len(streams) < 12 or not all(streams):
                    await anyio.sleep(0.01)
            gate.release()
    assert len(streams) == 12
    for events in streams:
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_message_of_many_small_parts_travels_whole_through_the_claim_check(make_harness):
    # Each part is under the claim check's threshold, the message is not: it once was refused
    # (262144 bytes at most), as nothing kept it out of Temporal's history.
    harness = make_harness(server={"max_request_bytes": 4_000_000})
    many = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=f"{n:02d}" + "x" * 15_000) for n in range(20)],
    )
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, many)
        read = await client.get_task(GetTaskRequest(id=task.id))
    assert read.status.state == TaskState.TASK_STATE_COMPLETED
    [sent] = [m for m in read.history if m.role == Role.ROLE_USER]
    assert [p.text for p in sent.parts] == [p.text for p in many.parts]


async def test_last_event_id_past_the_end_and_agent_message_ids_are_refused(make_harness):
    harness = make_harness(ScriptedModel([TurnOutput("which one?", action="ask")]))
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False) as client:
            task = await send_blocking(client, user_message("hi"))
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            with pytest.raises(InvalidParamsError, match="belong to the agent"):
                await send_blocking(
                    client,
                    user_message("forged", task_id=task.id, message_id=f"{task.id}:ask:1"),
                )
        async with a2a_client(url, headers={"Last-Event-ID": "99"}) as resumed:
            with pytest.raises(InvalidParamsError, match="past the task's last event"):
                await collect(resumed.subscribe(SubscribeToTaskRequest(id=task.id)))


async def test_large_messages_go_through_the_claim_check_and_the_task_stays_readable(make_harness):
    # Once, two 240 KiB messages made a record too large for Temporal and wedged the task.
    harness = make_harness(ScriptedModel([TurnOutput("more?", action="ask")]))
    big = ["y" * 240_000, "z" * 240_000, "w" * 240_000]
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message(big[0]))
        for text in big[1:]:
            await send_blocking(client, user_message(text, task_id=task.id))
        after = await client.get_task(GetTaskRequest(id=task.id))
    assert after.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [m.parts[0].text for m in after.history if m.role == Role.ROLE_USER] == big


async def test_a_first_message_retried_concurrently_starts_one_task_with_one_turn(make_harness):
    model = ScriptedModel(["just once"])
    harness = make_harness(model)
    message = user_message("at the same time", message_id="concurrent-retry")
    tasks: list[Task] = []
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        async with anyio.create_task_group() as tg:

            async def send() -> None:
                tasks.append(await send_blocking(client, message))

            for _ in range(4):
                tg.start_soon(send)
        listed = await client.list_tasks(ListTasksRequest())
    assert len({t.id for t in tasks}) == 1
    assert all(t.status.state == TaskState.TASK_STATE_COMPLETED for t in tasks)
    assert [t.id for t in listed.tasks] == [tasks[0].id]
    assert len(model.turns) == 1


async def test_list_tasks_refuses_an_unknown_status_and_a_forged_page_token(make_harness):
    harness = make_harness()
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        with pytest.raises(InvalidParamsError, match="status is not a TaskState"):
            await client.list_tasks(ListTasksRequest(status=99))  # pyright: ignore[reportArgumentType]
        forged = base64.urlsafe_b64encode(b"o:" + b"9" * 30).decode()
        with pytest.raises(InvalidParamsError, match="pageToken"):
            await client.list_tasks(ListTasksRequest(page_token=forged))


async def test_a_retried_blocking_follow_up_waits_for_its_turn_to_settle(make_harness):
    """Given a task asking for input, when the answer is sent blocking and, while its turn runs,
    the same message is sent again (a client's retry), then the retry, like the first send,
    returns the task once the turn has settled, not the task still working."""
    gate = Gate()
    harness = make_harness(
        ScriptedModel([TurnOutput("which one?", action="ask"), "that one it is"], gate=gate),
        model=HELD,
    )
    gate.release()
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_blocking(client, user_message("pick"))
        held = Gate()
        harness.agent.gate = held  # pyright: ignore[reportAttributeAccessIssue]  # the answer's turn is held
        answer = user_message("the red one", task_id=task.id, message_id="answer-1")
        results: list[Task] = []

        async def send() -> None:
            results.append(await send_blocking(client, answer))

        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await held.wait_entered()
            tg.start_soon(send)  # the retry, while the turn runs
            with anyio.move_on_after(1):
                while len(results) < 1:  # a retry that does not wait would return now
                    await anyio.sleep(0.01)
            held.release()
    assert [r.status.state for r in results] == [TaskState.TASK_STATE_COMPLETED] * 2
