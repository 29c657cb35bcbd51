"""Abuse case 1: header spoofing when the host authenticates (a participant resolver).

With ``Harness(participant=resolver)`` the ``X-Participant-Id`` header is never read: a caller the
host knows as alice who claims to be admin is still alice, reaches none of admin's tasks, and
changes nothing of them. A resolver that fails answers 500 and never falls back to the header.
"""

from __future__ import annotations

import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidRequestError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict
from starlette.requests import Request

from harness_core import ScriptedModel, TurnOutput
from harness_core.store import content_digest
from harness_core.tasks.service import derive_task_id
from tests.conftest import a2a_client, serving, user_message
from tests.integration.test_a2a_methods import collect, send_blocking
from tests.security.victim import snapshot

pytestmark = pytest.mark.anyio

TOKENS = {"tok-alice": "alice", "tok-admin": "admin"}


def resolver(request: Request) -> str | None:
    """The host's authentication: a bearer token names the user."""
    token = request.headers.get("authorization", "").removeprefix("Bearer ")
    if token == "tok-broken":
        raise RuntimeError("the session store is down: secret-session-detail")
    return TOKENS.get(token)


def as_user(token: str | None, *, claims: str | None = None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if claims is not None:
        headers["X-Participant-Id"] = claims
    return headers


async def test_a_spoofed_participant_header_is_ignored_when_a_resolver_is_set(make_harness):
    """Given admin's open task (input required) on an agent with a resolver
    When alice, claiming to be admin with X-Participant-Id, uses every task method on it
    Then each answers not found (ListTasks lists nothing of admin's), her own message starts a
    task on which she is the participant, and admin's task is unchanged."""
    model = ScriptedModel([TurnOutput("which account?", action="ask"), "alice's answer"])
    harness = make_harness(model, options={"participant": resolver})
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False, headers=as_user("tok-admin")) as admin:
            admins = await send_blocking(admin, user_message("close my account"))
        assert admins.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        before = await snapshot(harness, admins.id, "admin")

        spoof = as_user("tok-alice", claims="admin")
        async with a2a_client(url, headers=spoof) as alice:
            with pytest.raises(TaskNotFoundError):
                await alice.get_task(GetTaskRequest(id=admins.id))
            with pytest.raises(TaskNotFoundError):
                await alice.cancel_task(CancelTaskRequest(id=admins.id))
            with pytest.raises(TaskNotFoundError):
                await collect(alice.subscribe(SubscribeToTaskRequest(id=admins.id)))
            with pytest.raises(TaskNotFoundError):
                await collect(
                    alice.send_message(
                        SendMessageRequest(message=user_message("yes", task_id=admins.id))
                    )
                )
            listed = await alice.list_tasks(ListTasksRequest())
            own = await collect(
                alice.send_message(SendMessageRequest(message=user_message("mine")))
            )
        after = await snapshot(harness, admins.id, "admin")
        own_id = own[0].task.id
        alice_view = await harness.tasks.view(own_id, "alice")
        admin_view = await harness.tasks.view(own_id, "admin")

    assert listed.tasks == []
    assert after == before
    assert alice_view is not None and alice_view.participants == ("alice",)
    assert admin_view is None
    # Only admin's first turn and alice's own task reached the model.
    assert [[m.text for m in t.history] for t in model.turns] == [["close my account"], ["mine"]]


async def test_with_a_resolver_a_caller_it_does_not_name_can_send_nothing_and_read_nothing(
    make_harness,
):
    """Given admin's task on an agent with a resolver
    When a caller with no credentials but an X-Participant-Id: admin header calls
    Then its message is refused, admin's task is not found, and no task was started for it."""
    harness = make_harness(ScriptedModel(["done"]), options={"participant": resolver})
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False, headers=as_user("tok-admin")) as admin:
            admins = await send_blocking(admin, user_message("report"))
        before = await snapshot(harness, admins.id, "admin")
        async with a2a_client(url, streaming=False, headers=as_user(None, claims="admin")) as anon:
            refused_message = user_message("let me in", message_id="m-anon")
            with pytest.raises(InvalidRequestError) as refused:
                await send_blocking(anon, refused_message)
            with pytest.raises(TaskNotFoundError):
                await anon.get_task(GetTaskRequest(id=admins.id))
            listed = await anon.list_tasks(ListTasksRequest())
        after = await snapshot(harness, admins.id, "admin")
        for claimed in (None, "admin"):
            digest = content_digest(MessageToDict(refused_message))
            started = derive_task_id(harness.agent_id, claimed, "m-anon", digest)
            assert await harness.tasks.view(started, claimed) is None
    assert "authenticated sender" in str(refused.value)
    assert listed.tasks == []
    assert after == before


async def test_a_failing_resolver_answers_500_and_never_falls_back_to_the_header(
    make_harness,
):
    """Given a resolver that raises for a broken session
    When that caller claims X-Participant-Id: admin and sends a message or reads admin's task
    Then every request is a 500 with a request id and no exception text, and admin's task is
    unchanged."""
    harness = make_harness(ScriptedModel(["done"]), options={"participant": resolver})
    async with serving(harness) as url:
        async with a2a_client(url, streaming=False, headers=as_user("tok-admin")) as admin:
            admins = await send_blocking(admin, user_message("report"))
        before = await snapshot(harness, admins.id, "admin")
        headers = {**as_user("tok-broken", claims="admin"), "A2A-Version": "1.0"}
        async with httpx.AsyncClient(headers=headers) as http:
            read = await http.get(f"{url}/tasks/{admins.id}")
            sent = await http.post(
                f"{url}/",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {
                        "message": {
                            "messageId": "m-broken",
                            "role": "ROLE_USER",
                            "taskId": admins.id,
                            "parts": [{"text": "approve"}],
                        }
                    },
                },
            )
        after = await snapshot(harness, admins.id, "admin")
    assert read.status_code == sent.status_code == 500
    for response in (read, sent):
        assert "internal error (request " in response.json()["error"]
        assert "secret-session-detail" not in response.text
    assert after == before


async def test_the_resolver_runs_only_for_a2a_calls_that_pass_the_limits(make_harness):
    """Given a resolver that fails without credentials, a rate limit and CORS
    Then the card and a browser's preflight are answered without it, and requests refused by the
    rate limit never reach it."""
    calls: list[str] = []

    def strict(request: Request) -> str | None:
        calls.append(request.url.path)
        token = request.headers.get("authorization", "")
        if not token:
            raise PermissionError("no credentials")
        return TOKENS.get(token.removeprefix("Bearer "))

    harness = make_harness(
        options={"participant": strict},
        server={"rate_limit_per_minute": 3, "cors_origins": ["https://app.example.test"]},
    )
    async with serving(harness) as url, httpx.AsyncClient() as http:
        preflight = await http.options(
            f"{url}/",
            headers={
                "Origin": "https://app.example.test",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,a2a-version",
            },
        )
        card = await http.get(f"{url}/.well-known/agent-card.json")
        listed = [
            await http.get(
                f"{url}/tasks", headers={"Authorization": "Bearer tok-alice", "A2A-Version": "1.0"}
            )
            for _ in range(4)
        ]
    assert preflight.status_code == 200
    assert card.status_code == 200
    assert [r.status_code for r in listed] == [200, 200, 429, 429]
    assert calls == ["/tasks", "/tasks"]
