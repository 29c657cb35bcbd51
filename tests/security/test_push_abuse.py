# pyright: strict
"""Abuse cases of push notifications (webhooks): the holes that were found, one test each.

Each case below failed on the code before its fix (the failures are in the issue's closing note);
the tests of what already held keep it from regressing.

1. A webhook on someone else's task. ``SendMessage`` to alice's task id from mallory, with a push
   config, is refused as not found, but ``TaskService.send`` has already kept the config (it stores
   it before ``_deliver_existing`` checks access): mallory's webhook then hears alice's task, and
   with alice's config id it replaces hers (``INSERT OR REPLACE`` by task and id).
2. Co-participants and config ids. A config id should belong to its owner: bob, on a task he
   shares with alice, must not replace alice's config by reusing its id, nor read or delete it.
   Today A2A never puts a second named participant on a task (a non-participant's message is
   refused as not found), so the share is written into the store the way
   ``tests/integration/test_listing.py`` simulates a lost start; the ids are the same hole as in 1.
3. DNS rebinding. ``webhook_problem`` resolves the webhook's host to check it, and httpx resolves
   it again to connect. A name that answers an allowed address to the check and another address to
   the connection reaches the other. Loopback only: the "legit" receiver listens on 127.0.0.2:P,
   the "victim" on 127.0.0.1:P (Linux routes all of 127/8 to lo), ``[push] allow_hosts`` names
   127.0.0.2, and ``socket.getaddrinfo`` is replaced by a resolver whose answer for one made-up
   name flips after the checks.
4. Only globally routable addresses. The SSRF guard was a denylist of ``ipaddress`` flags; some
   addresses that are not globally routable passed it (carrier-grade NAT, the rest of 192.0.0.0/24,
   6to4 addresses that embed a private IPv4 address). Addresses it refused already are listed
   separately, so the fix keeps refusing them: on Python 3.11 ``is_global`` alone
   would let NAT64 (``64:ff9b::/96``), IPv4-compatible (``::a.b.c.d``) and multicast addresses
   through.

Real components throughout: the session's Temporal dev server, agents and webhook receivers over
loopback HTTP, the a2a-sdk client, the agent's SQLite store. Participants are named with the
``X-Participant-Id`` header (header mode).
"""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import threading
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from a2a.client import Client
from a2a.types import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, InvalidRequestError, TaskNotFoundError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from temporalio.testing import ActivityEnvironment

from harness_core import Harness, ScriptedModel, TurnOutput
from harness_core.bridge import open_bridge
from harness_core.payloads import PushBatch, TaskEvent
from harness_core.push.delivery import PushActivities
from harness_core.push.guard import webhook_problem
from harness_core.store import TaskStore
from tests.conftest import a2a_client, serving, user_message

pytestmark = pytest.mark.anyio


MakeHarness = Callable[..., Harness]  # the ``make_harness`` fixture of tests/conftest.py


def who(participant: str) -> dict[str, str]:
    return {"X-Participant-Id": participant}


async def collect(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    """Everything SendMessage answers."""
    return [event async for event in client.send_message(request)]


async def send_blocking(client: Client, message: Message) -> Task:
    """The task a blocking SendMessage answers, once it has settled."""
    [event] = await collect(client, SendMessageRequest(message=message))
    return event.task


class Hooks:
    """Webhook receivers: ``POST /{name}`` records the update under ``name`` and the local address
    it arrived at (one app may listen on several addresses), and answers 200."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self._arrived = anyio.Event()
        self.app = Starlette(routes=[Route("/{name}", self.hook, methods=["POST"])])

    async def hook(self, request: Request) -> JSONResponse:
        server = request.scope.get("server") or ("?", 0)
        self.calls.append((str(server[0]), request.path_params["name"], await request.json()))
        arrived, self._arrived = self._arrived, anyio.Event()
        arrived.set()
        return JSONResponse({})

    def states(self, name: str | None = None, *, at: str | None = None) -> list[str]:
        """What was heard (by ``name``, at local address ``at``): each status update's state, and
        the kind of any other update."""
        return [
            body["statusUpdate"]["status"]["state"] if "statusUpdate" in body else next(iter(body))
            for host, hook, body in self.calls
            if (name is None or hook == name) and (at is None or host == at)
        ]

    async def wait_until(self, done: Callable[[], bool]) -> None:
        """Return once ``done()`` holds, checked after each arrival."""
        with anyio.fail_after(30):
            while True:
                arrived = self._arrived
                if done():
                    return
                await arrived.wait()


@contextlib.asynccontextmanager
async def listening(app: Any, bind: str) -> AsyncGenerator[str]:
    """Serve ``app`` with Hypercorn on ``bind`` (any loopback address; ``serving_app`` of
    ``tests/conftest.py`` binds 127.0.0.1 only); yield its base URL."""
    from harness_asgi.serve import serve_http

    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve_http, app, bind, 2.0, stop.wait)
        try:
            yield f"http://{host}:{port}"
        finally:
            stop.set()


def kept_configs(harness: Harness, task_id: str) -> list[tuple[str, str, str]]:
    """(config id, owner, url) of every push config the agent's store keeps for the task: what
    delivery reads, whoever may list it."""
    store = harness.tasks._store  # pyright: ignore[reportPrivateUsage]
    return [(cid, owner, str(body.get("url"))) for cid, owner, body in store.push_configs(task_id)]


# -- 1. a webhook on someone else's task ---------------------------------------------------------


@pytest.mark.parametrize("mallorys_id", ["mallory-hook", "alice-hook"], ids=["new-id", "alices-id"])
async def test_a_webhook_sent_with_a_message_to_someone_elses_task_is_not_kept_and_hears_nothing(
    make_harness: MakeHarness, mallorys_id: str
):
    """Given alice's task waiting for input, with alice's webhook ``alice-hook``
    When mallory sends a message to alice's task id with a webhook of hers (a new config id, or
    alice's), then alice adds a second webhook and answers, and the task completes
    Then mallory is refused as not found, the store keeps no config of mallory's, alice's configs
    are hers as she made them, alice's webhook hears the end, and mallory's hears nothing."""
    hooks = Hooks()
    harness = make_harness(
        ScriptedModel([TurnOutput("which one?", action="ask"), "that one"]),
        push={"allow_hosts": ["127.0.0.1"]},
    )
    async with listening(hooks.app, "127.0.0.1:0") as hook_base, serving(harness) as url:
        alices_hook = TaskPushNotificationConfig(
            id="alice-hook", url=f"{hook_base}/alice", token="alice-token"
        )
        async with a2a_client(url, streaming=False, headers=who("alice")) as alice:
            [event] = await collect(
                alice,
                SendMessageRequest(
                    message=user_message("pick one"),
                    configuration=SendMessageConfiguration(
                        task_push_notification_config=alices_hook
                    ),
                ),
            )
            task = event.task
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            await hooks.wait_until(lambda: "TASK_STATE_INPUT_REQUIRED" in hooks.states("alice"))

            async with a2a_client(url, streaming=False, headers=who("mallory")) as mallory:
                mallorys_hook = TaskPushNotificationConfig(
                    id=mallorys_id, url=f"{hook_base}/mallory", token="mallory-token"
                )
                with pytest.raises(TaskNotFoundError):
                    await collect(
                        mallory,
                        SendMessageRequest(
                            message=user_message("tell me too", task_id=task.id),
                            configuration=SendMessageConfiguration(
                                task_push_notification_config=mallorys_hook
                            ),
                        ),
                    )

            # Delivery posts to a task's configs in the order they were made: once this last one
            # hears the end, every config made before it (mallory's too, if kept) has heard it.
            await alice.create_task_push_notification_config(
                TaskPushNotificationConfig(
                    task_id=task.id, id="alice-last", url=f"{hook_base}/alice-last", token="t2"
                )
            )
            answered = await send_blocking(alice, user_message("the red one", task_id=task.id))
            await hooks.wait_until(lambda: "TASK_STATE_COMPLETED" in hooks.states("alice-last"))
            listed = await alice.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            kept = kept_configs(harness, task.id)
    assert answered.status.state == TaskState.TASK_STATE_COMPLETED
    assert {
        "mallory's configs kept": [c for c in kept if c[1] == "mallory"],
        "mallory's webhook heard": hooks.states("mallory"),
        "alice's configs": sorted((c.id, c.url, c.token) for c in listed.configs),
        "alice's webhook heard the end": "TASK_STATE_COMPLETED" in hooks.states("alice"),
    } == {
        "mallory's configs kept": [],
        "mallory's webhook heard": [],
        "alice's configs": [
            ("alice-hook", f"{hook_base}/alice", "alice-token"),
            ("alice-last", f"{hook_base}/alice-last", "t2"),
        ],
        "alice's webhook heard the end": True,
    }


# -- 2. co-participants and config ids ------------------------------------------------------------


async def _alices_task_shared_with_bob(harness: Harness, url: str) -> str:
    """Alice's ended task, with bob on it too (written into the store: A2A has no way to join a
    task today, see the module docstring); its id."""
    async with a2a_client(url, streaming=False, headers=who("alice")) as alice:
        task = await send_blocking(alice, user_message("our report"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    store = harness.tasks._store  # pyright: ignore[reportPrivateUsage]
    assert store.path is not None
    with contextlib.closing(sqlite3.connect(store.path)) as db, db:
        db.execute("INSERT INTO task_participants VALUES (?, ?)", (task.id, "bob"))
    view = await harness.tasks.view(task.id, "bob")
    assert view is not None and set(view.participants) == {"alice", "bob"}
    return task.id


def alices_webhook(task_id: str) -> TaskPushNotificationConfig:
    """Alice's webhook ``shared-id``, with a token and credentials. Nothing listens on port 9 (and
    an ended task pushes nothing): only the config matters here."""
    return TaskPushNotificationConfig(
        task_id=task_id,
        id="shared-id",
        url="http://127.0.0.1:9/alice",
        token="alice-token",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="alice-credentials"),
    )


async def test_a_co_participant_cannot_take_over_a_webhook_by_reusing_its_id(
    make_harness: MakeHarness,
):
    """Given a task alice shares with bob, and alice's webhook ``shared-id``
    When bob creates a webhook with the id ``shared-id``
    Then (whether bob's is refused or kept apart as his own) alice's webhook is still hers: she
    lists it as she made it, and the store keeps it under her name."""
    harness = make_harness(ScriptedModel(["done"]), push={"allow_hosts": ["127.0.0.1"]})
    async with serving(harness) as url:
        task_id = await _alices_task_shared_with_bob(harness, url)
        async with a2a_client(url, streaming=False, headers=who("alice")) as alice:
            await alice.create_task_push_notification_config(alices_webhook(task_id))
            async with a2a_client(url, streaming=False, headers=who("bob")) as bob:
                # Refusing the id is one way to keep it alice's; keeping bob's apart is another.
                with contextlib.suppress(InvalidParamsError, InvalidRequestError):
                    await bob.create_task_push_notification_config(
                        TaskPushNotificationConfig(
                            task_id=task_id,
                            id="shared-id",
                            url="http://127.0.0.1:9/bob",
                            token="bob-token",
                        )
                    )
            listed = await alice.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task_id)
            )
            kept = kept_configs(harness, task_id)
    assert {
        "alice's configs": [(c.id, c.url, c.token) for c in listed.configs],
        "kept under alice": [c for c in kept if c[1] == "alice"],
    } == {
        "alice's configs": [("shared-id", "http://127.0.0.1:9/alice", "alice-token")],
        "kept under alice": [("shared-id", "alice", "http://127.0.0.1:9/alice")],
    }


async def test_a_co_participant_neither_reads_nor_deletes_anothers_webhook(
    make_harness: MakeHarness,
):
    """Given a task alice shares with bob, and alice's webhook with a token and credentials
    When bob lists the task's webhooks, reads alice's by id and deletes it
    Then he lists none, reading it is refused, and alice's webhook is still there, whole."""
    harness = make_harness(ScriptedModel(["done"]), push={"allow_hosts": ["127.0.0.1"]})
    async with serving(harness) as url:
        task_id = await _alices_task_shared_with_bob(harness, url)
        async with a2a_client(url, streaming=False, headers=who("alice")) as alice:
            await alice.create_task_push_notification_config(alices_webhook(task_id))
            async with a2a_client(url, streaming=False, headers=who("bob")) as bob:
                bobs_list = await bob.list_task_push_notification_configs(
                    ListTaskPushNotificationConfigsRequest(task_id=task_id)
                )
                with pytest.raises(InvalidParamsError):
                    await bob.get_task_push_notification_config(
                        GetTaskPushNotificationConfigRequest(task_id=task_id, id="shared-id")
                    )
                await bob.delete_task_push_notification_config(
                    DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="shared-id")
                )
            mine = await alice.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="shared-id")
            )
    assert list(bobs_list.configs) == []
    assert "alice-token" not in str(bobs_list) and "alice-credentials" not in str(bobs_list)
    assert (mine.url, mine.token, mine.authentication.credentials) == (
        "http://127.0.0.1:9/alice",
        "alice-token",
        "alice-credentials",
    )


# -- 3. DNS rebinding -----------------------------------------------------------------------------


class Rebinder:
    """A resolver for one made-up name whose answer changes, as an attacker's DNS with a zero TTL
    does: the first ``checks`` lookups of ``name`` answer ``first``, every later one ``then``. Any
    other name, and numeric hosts (Trio asks with ``AI_NUMERICHOST`` first), go to the real
    resolver. Installed as ``socket.getaddrinfo``, which every backend's lookup calls in a thread."""

    def __init__(self, name: str, *, first: str, then: str, checks: int) -> None:
        self.name = name
        self.first = first
        self.then = then
        self.checks = checks
        self.lookups = 0
        self._real = socket.getaddrinfo
        self._lock = threading.Lock()

    def __call__(
        self, host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[tuple[Any, ...]]:
        name = host.decode() if isinstance(host, bytes) else host
        if name != self.name or flags & socket.AI_NUMERICHOST:
            return self._real(host, port, family, type, proto, flags)
        if family not in (0, socket.AF_INET):
            raise socket.gaierror(socket.EAI_NONAME, "no such address")
        with self._lock:
            self.lookups += 1
            address = self.first if self.lookups <= self.checks else self.then
        number = int(port.decode() if isinstance(port, bytes) else port or 0)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, number))]


async def test_a_webhook_name_that_rebinds_after_the_check_reaches_only_the_checked_address(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
):
    """Given an agent whose [push] allow_hosts names 127.0.0.2 only, and a webhook name that
    answers 127.0.0.2 to the checks (when it is registered, and before the first delivery) and
    127.0.0.1 after them
    When a task with that webhook runs and its first update is delivered
    Then the update reaches the receiver on 127.0.0.2 and nothing reaches the one on 127.0.0.1
    (on the same port)."""
    hooks = Hooks()
    rebinder = Rebinder("rebind.test", first="127.0.0.2", then="127.0.0.1", checks=2)
    monkeypatch.setattr(socket, "getaddrinfo", rebinder)
    harness = make_harness(ScriptedModel(["done"]), push={"allow_hosts": ["127.0.0.2"]})
    async with listening(hooks.app, "127.0.0.1:0") as victim_base:
        port = urlsplit(victim_base).port
        async with listening(hooks.app, f"127.0.0.2:{port}"), serving(harness) as url:
            webhook = TaskPushNotificationConfig(url=f"http://rebind.test:{port}/hook", token="t")
            async with a2a_client(url, streaming=False) as client:
                await collect(
                    client,
                    SendMessageRequest(
                        message=user_message("report"),
                        configuration=SendMessageConfiguration(
                            task_push_notification_config=webhook
                        ),
                    ),
                )
            await hooks.wait_until(lambda: bool(hooks.calls))
    assert {
        "the victim (127.0.0.1) heard": hooks.states(at="127.0.0.1"),
        "the legit receiver (127.0.0.2) heard something": bool(hooks.states(at="127.0.0.2")),
    } == {
        "the victim (127.0.0.1) heard": [],
        "the legit receiver (127.0.0.2) heard something": True,
    }


async def test_one_delivery_looks_the_webhooks_name_up_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Given the push delivery activity (in Temporal's activity environment, called through the
    bridge as the worker calls it) and one webhook at a name that resolves to an allowed address
    When one update is delivered
    Then the webhook gets it, and the name was looked up once: what was checked is what was
    reached."""
    hooks = Hooks()
    counter = Rebinder("once.test", first="127.0.0.1", then="127.0.0.1", checks=0)
    monkeypatch.setattr(socket, "getaddrinfo", counter)
    store = TaskStore(tmp_path / "store.db")
    try:
        async with listening(hooks.app, "127.0.0.1:0") as hook_base, open_bridge() as bridge:
            port = urlsplit(hook_base).port
            hook_url = f"http://once.test:{port}/hook"
            store.put_push_config("t-1", "c-1", "alice", {"id": "c-1", "url": hook_url})
            activities = PushActivities("agent-1", store, allow=["127.0.0.1"], timeout=10.0)
            update = {"taskId": "t-1", "status": {"state": "TASK_STATE_WORKING"}}
            batch = PushBatch(
                agent_id="agent-1",
                task_id="t-1",
                events=(TaskEvent(seq=1, kind="status", body=update),),
            )
            await bridge.call(lambda: ActivityEnvironment().run(activities.push_deliver, batch))
    finally:
        store.close()
    assert (hooks.states("hook"), counter.lookups) == (["TASK_STATE_WORKING"], 1)


# -- 4. only globally routable addresses ----------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        pytest.param("100.64.0.1", id="carrier-grade-nat"),
        pytest.param("100.127.255.254", id="carrier-grade-nat-last"),
        # IETF protocol assignments: only 192.0.0.9 and .10 are globally reachable (IANA). Python
        # 3.11's is_global knows only 192.0.0.0/29 (3.12.4 and later know the /24).
        pytest.param("192.0.0.8", id="ietf-protocol-assignments"),
        # 6to4 (2002::/16) embeds an IPv4 address: .sixtofour unwraps it.
        pytest.param("2002:7f00:1::1", id="6to4-of-loopback"),
        pytest.param("2002:a00:1::1", id="6to4-of-private"),
        pytest.param("2002:a9fe:a9fe::1", id="6to4-of-link-local-metadata"),
    ],
)
def test_a_webhook_at_an_address_that_is_not_globally_routable_is_refused(address: str):
    host = f"[{address}]" if ":" in address else address
    assert webhook_problem(f"http://{host}/hook", allow=[]) is not None


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "169.254.169.254",
        "0.0.0.0",
        "198.18.0.1",  # benchmarking
        "192.0.0.1",
        "224.0.0.1",  # multicast: is_global is True on Python 3.11
        "::1",
        "fe80::1",
        "fc00::1",
        "2001:db8::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:100.64.0.1",  # is_global is True; the mapped address is not
        "::127.0.0.1",  # IPv4-compatible (deprecated): is_global is True
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1: is_global is True on Python 3.11
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    ],
)
def test_a_webhook_at_a_loopback_private_or_special_address_stays_refused(address: str):
    host = f"[{address}]" if ":" in address else address
    assert webhook_problem(f"http://{host}/hook", allow=[]) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "2606:4700:4700::1111"])
def test_a_webhook_at_a_public_address_is_accepted(address: str):
    host = f"[{address}]" if ":" in address else address
    assert webhook_problem(f"http://{host}/hook", allow=[]) is None


def test_an_address_named_in_allow_hosts_is_accepted():
    assert webhook_problem("http://100.64.0.1/hook", allow=["100.64.0.0/10"]) is None
    assert webhook_problem("http://10.1.2.3/hook", allow=["10.0.0.0/8"]) is None
