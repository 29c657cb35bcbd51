"""Push notifications to A2A clients: the four config methods, delivery of every update to the
webhook (retried when it fails), its token and auth headers, and the SSRF guard.

A real webhook receiver (a Starlette app on Hypercorn, loopback), real Temporal, the real a2a-sdk
client; only the model is scripted.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from a2a.types import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from harness_core import ScriptedModel, TurnOutput
from tests.conftest import a2a_client, serving, serving_app, user_message

pytestmark = pytest.mark.anyio


class Receiver:
    """A webhook that records what it gets; it fails its first call (so delivery must retry)."""

    def __init__(self, *, fail_first: bool = True) -> None:
        self.calls: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.failed = 0 if fail_first else 1
        self._arrived = anyio.Event()
        self.app = Starlette(routes=[Route("/hook", self.hook, methods=["POST"])])

    async def hook(self, request: Request) -> JSONResponse:
        if self.failed == 0:  # the first call only, unless told otherwise
            self.failed += 1
            return JSONResponse({"error": "not now"}, status_code=503)
        self.calls.append((dict(request.headers), await request.json()))
        arrived, self._arrived = self._arrived, anyio.Event()
        arrived.set()
        return JSONResponse({})

    async def wait_for(self, state: str) -> None:
        """Return once a status update with ``state`` has arrived."""
        with anyio.fail_after(30):
            while True:
                arrived = self._arrived
                if state in self.states():
                    return
                await arrived.wait()

    def states(self) -> list[str]:
        return [
            body["statusUpdate"]["status"]["state"]
            for _, body in self.calls
            if "statusUpdate" in body
        ]


async def test_every_update_reaches_the_webhook_with_its_token_and_auth(make_harness):
    """Given a webhook registered with the first message (token and Bearer auth), when the task
    asks for input and is then answered, then the webhook gets each status update in order, the
    first delivery retried after a 503, each with X-A2A-Notification-Token and Authorization; the
    config can be read, listed and deleted; the card declares pushNotifications."""
    receiver = Receiver()
    harness = make_harness(
        ScriptedModel([TurnOutput("which one?", action="ask"), "that one"]),
        push={"allow_hosts": ["127.0.0.1"]},
    )
    async with serving_app(receiver.app) as hook_base, serving(harness) as url:
        webhook = TaskPushNotificationConfig(
            url=f"{hook_base}/hook",
            token="tok-1",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="sekrit"),
        )
        async with a2a_client(url, streaming=False) as client:
            [event] = [
                e
                async for e in client.send_message(
                    SendMessageRequest(
                        message=user_message("pick one"),
                        configuration=SendMessageConfiguration(
                            task_push_notification_config=webhook
                        ),
                    )
                )
            ]
            task: Task = event.task
            await receiver.wait_for("TASK_STATE_INPUT_REQUIRED")
            second = await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task.id, url=f"{hook_base}/hook", id="second")
            )
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            got = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="second")
            )
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="second")
            )
            after = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            [answered] = [
                e
                async for e in client.send_message(
                    SendMessageRequest(message=user_message("the red one", task_id=task.id))
                )
            ]
            await receiver.wait_for("TASK_STATE_COMPLETED")
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{url}/.well-known/agent-card.json")).json()
    assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert receiver.failed == 1
    states = receiver.states()
    assert states[:2] == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]
    assert states[-1] == "TASK_STATE_COMPLETED"
    seqs = [body[next(iter(body))]["metadata"]["harness.seq"] for _, body in receiver.calls]
    assert seqs == sorted(seqs)
    headers = receiver.calls[0][0]
    assert headers["x-a2a-notification-token"] == "tok-1"
    assert headers["authorization"] == "Bearer sekrit"
    assert second.id == "second" and second.task_id == task.id
    assert len(listed.configs) == 2
    assert "second" in [c.id for c in listed.configs]
    assert got.url == f"{hook_base}/hook"
    assert len(after.configs) == 1
    assert "second" not in [c.id for c in after.configs]
    assert card["capabilities"]["pushNotifications"] is True


async def test_a_webhook_on_loopback_or_not_http_is_refused_without_an_allow_list(make_harness):
    """Given an agent without [push] allow_hosts, when a client registers a webhook on loopback,
    a private address or another scheme, then each is refused with -32602 and nothing is kept."""
    harness = make_harness(ScriptedModel([TurnOutput("more?", action="ask")]))
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        [event] = [
            e async for e in client.send_message(SendMessageRequest(message=user_message("hi")))
        ]
        task_id = event.task.id
        for hook in ("http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "ftp://example.com/x"):
            with pytest.raises(InvalidParamsError, match="webhook URL is refused"):
                await client.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=task_id, url=hook)
                )
        kept = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
    assert list(kept.configs) == []


async def test_a_webhook_that_reads_the_task_on_completed_finds_it_completed(make_harness):
    """Given a webhook that reads the task (GetTask over JSON-RPC) as soon as it hears a terminal
    state, then what it reads is that terminal state: the final record is stored before any
    webhook hears that the task ended."""
    read: list[str] = []
    agent_url: list[str] = []

    async def hook(request: Request) -> JSONResponse:
        body = await request.json()
        status = body.get("statusUpdate", {}).get("status", {})
        if status.get("state") == "TASK_STATE_COMPLETED":
            task_id = body["statusUpdate"]["taskId"]
            async with httpx.AsyncClient() as http:
                answer = await http.post(
                    f"{agent_url[0]}/",
                    headers={"A2A-Version": "1.0"},
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "GetTask",
                        "params": {"id": task_id},
                    },
                )
            read.append(answer.json()["result"]["status"]["state"])
        return JSONResponse({})

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    harness = make_harness(ScriptedModel(["done"]), push={"allow_hosts": ["127.0.0.1"]})
    async with serving_app(app) as hook_base, serving(harness) as url:
        agent_url.append(url)
        webhook = TaskPushNotificationConfig(url=f"{hook_base}/hook", token="t")
        async with a2a_client(url, streaming=False) as client:
            for n in range(3):
                request = SendMessageRequest(
                    message=user_message(f"task {n}"),
                    configuration=SendMessageConfiguration(task_push_notification_config=webhook),
                )
                _ = [e async for e in client.send_message(request)]
            with anyio.fail_after(30):
                while len(read) < 3:
                    await anyio.sleep(0.05)
    assert read == ["TASK_STATE_COMPLETED"] * 3


async def test_a_run_continues_as_new_while_its_webhook_hangs_and_the_next_run_pushes_the_rest(
    make_harness,
):
    """Given a webhook that holds every request, when a task's run fills up (a 600 KB message) and
    the task waits for input, then the run continues as new at once (it does not wait for the
    webhook), and once the webhook answers, every update reaches it in order, with no gap."""
    release = anyio.Event()
    seqs: list[int] = []
    states: list[str] = []

    async def hook(request: Request) -> JSONResponse:
        await release.wait()
        body = await request.json()
        update = body[next(iter(body))]
        seqs.append(update["metadata"]["harness.seq"])
        states.append(update.get("status", {}).get("state", ""))
        return JSONResponse({})

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    harness = make_harness(
        ScriptedModel([TurnOutput("which one?", action="ask"), "done"]),
        push={"allow_hosts": ["127.0.0.1"], "timeout": "60s"},
        server={"max_request_bytes": 2_000_000},
    )
    async with serving_app(app) as hook_base, serving(harness) as url:
        webhook = TaskPushNotificationConfig(url=f"{hook_base}/hook", token="t")
        async with a2a_client(url, streaming=False) as client:
            request = SendMessageRequest(
                message=user_message("x" * 600_000),
                configuration=SendMessageConfiguration(task_push_notification_config=webhook),
            )
            [event] = [e async for e in client.send_message(request)]
            task_id = event.task.id
            connection = harness.tasks.connection

            async def runs() -> int:
                async def count(c: Any) -> int:
                    return len([w async for w in c.list_workflows(f"WorkflowId = '{task_id}'")])

                return await connection.bridge.call(lambda: count(connection.client))

            with anyio.fail_after(30):
                while await runs() < 2:
                    await anyio.sleep(0.2)
            assert seqs == []  # the webhook has answered nothing yet
            release.set()
            [answered] = [
                e
                async for e in client.send_message(
                    SendMessageRequest(message=user_message("that one", task_id=task_id))
                )
            ]
            last = answered.task
            with anyio.fail_after(30):
                while "TASK_STATE_COMPLETED" not in states:
                    await anyio.sleep(0.05)
    assert last.status.state == TaskState.TASK_STATE_COMPLETED
    assert sorted(set(seqs)) == list(range(1, max(seqs) + 1))
    assert seqs == sorted(seqs)


async def test_a_retried_first_message_registers_its_webhook_and_an_ended_task_says_how_it_ended(
    make_harness,
):
    """Given a task that completed, when its first message is sent again (a retry whose answer
    was lost) with a webhook, then the webhook is registered and hears COMPLETED at once; the
    same retry again keeps one config (the same id), and a message with no webhook changes
    nothing. Before, the retry got the task and the webhook heard nothing."""
    receiver = Receiver(fail_first=False)
    harness = make_harness(ScriptedModel(["done"]), push={"allow_hosts": ["127.0.0.1"]})
    async with serving_app(receiver.app) as hook_base, serving(harness) as url:
        webhook = TaskPushNotificationConfig(url=f"{hook_base}/hook", id="late", token="t")
        first = user_message("do it", message_id="retried-1")
        async with a2a_client(url, streaming=False) as client:
            [done] = [e async for e in client.send_message(SendMessageRequest(message=first))]
            assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
            retry = SendMessageRequest(
                message=first,
                configuration=SendMessageConfiguration(task_push_notification_config=webhook),
            )
            retried = [[e async for e in client.send_message(retry)] for _ in range(2)]
            await receiver.wait_for("TASK_STATE_COMPLETED")
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=done.task.id)
            )
    assert [r[0].task.id for r in retried] == [done.task.id, done.task.id]
    assert receiver.states() == ["TASK_STATE_COMPLETED", "TASK_STATE_COMPLETED"]
    assert [c.id for c in listed.configs] == ["late"]
    headers, body = receiver.calls[0]
    assert headers["x-a2a-notification-token"] == "t"
    assert body["statusUpdate"]["taskId"] == done.task.id
