"""Restarts and crashes are never blamed on the agent: graceful stops do not use up a turn's attempts,
and a SIGKILL with sends in flight loses no accepted message."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.types import GetTaskRequest, TaskState

from harness_core import Complete, TurnContext
from harness_core.agents.turn import TurnResult
from harness_core.tasks.service import derive_task_id
from tests.conftest import a2a_client, free_port, serving, user_message
from tests.integration.test_a2a_methods import HELD, send_blocking, send_immediately, wait_for_state
from tests.integration.test_cli import Server, rpc, write_config

pytestmark = pytest.mark.anyio

RESTARTS = 5


class StubbornAgent:
    """Holds every attempt until released; counts the attempts."""

    def __init__(self) -> None:
        self.attempts = 0
        self.released = threading.Event()
        self._lock = threading.Lock()

    async def turn(self, ctx: TurnContext) -> TurnResult:
        with self._lock:
            self.attempts += 1
        while not self.released.is_set():
            await anyio.sleep(0.01)
        return Complete("finally")

    async def wait_attempts(self, count: int) -> None:
        with anyio.fail_after(60):
            while self.attempts < count:
                await anyio.sleep(0.01)


async def test_five_graceful_restarts_during_one_turn_still_complete_the_task(make_harness):
    agent = StubbornAgent()
    harness = make_harness(agent, model=HELD, server={"graceful_timeout": "200ms"})
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        task = await send_immediately(client, user_message("take your time"))
        await agent.wait_attempts(1)
    done = None
    # Each exit above and below stops the worker while the turn runs (graceful, 200 ms).
    for restart in range(1, RESTARTS + 1):
        async with serving(harness) as url:
            await agent.wait_attempts(restart + 1)
            if restart == RESTARTS:
                agent.released.set()
                async with a2a_client(url, streaming=False) as client:
                    done = await wait_for_state(client, task.id, TaskState.TASK_STATE_COMPLETED)
    assert done is not None
    assert done.status.message.parts[0].text == "finally"
    assert agent.attempts == RESTARTS + 1


def _digest(text: str) -> str:
    parts = json.dumps([{"text": text}], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(parts.encode()).hexdigest()[:32]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_sigkill_with_150_sends_in_flight_loses_no_accepted_message(tmp_path: Path) -> None:
    port = free_port()
    path = write_config(
        tmp_path,
        f"""
        [agent]
        id = "crashy"

        [server]
        bind = "127.0.0.1:{port}"

        [model]
        kind = "echo"
        # Every turn must still run when the last of the 150 sends is taken: on a loaded host
        # (CI runs two test workers on two cores) taking them all can take several seconds.
        delay = "8s"
        """,
    )
    owner = {"X-Participant-Id": "owner", "A2A-Version": "1.0"}
    messages = {
        kind: [(f"{kind}-{n}-{uuid.uuid4().hex[:6]}", f"{kind} {n}") for n in range(50)]
        for kind in ("blocking", "streaming", "immediate")
    }
    first = Server(path, port)

    def send(kind: str, message_id: str, text: str) -> None:
        message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
        method = "SendStreamingMessage" if kind == "streaming" else "SendMessage"
        params: dict[str, object] = {"message": message}
        if kind == "immediate":
            params["configuration"] = {"returnImmediately": True}
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        try:
            with httpx.stream("POST", f"{first.url}/", json=body, headers=owner, timeout=60) as r:
                for _ in r.iter_bytes():
                    pass
        except httpx.HTTPError:
            pass  # cut off by the kill

    try:
        with ThreadPoolExecutor(max_workers=150) as pool:
            for kind, items in messages.items():
                for message_id, text in items:
                    pool.submit(send, kind, message_id, text)
            deadline = time.monotonic() + 60
            while True:
                monitor = httpx.get(f"{first.url}/_monitor", timeout=10).json()
                if monitor.get("runningTasks", 0) >= 150:
                    break
                assert time.monotonic() < deadline, monitor
                time.sleep(0.1)  # another process: polling is the only signal
            first.process.kill()  # SIGKILL, every turn mid-flight
            first.process.wait()
    finally:
        first.kill()

    second = Server(path, port)
    try:
        states: dict[str, str] = {}
        deadline = time.monotonic() + 120
        for items in messages.values():
            for message_id, text in items:
                task_id = derive_task_id("crashy", "owner", message_id, _digest(text))
                while True:
                    answer = httpx.post(
                        f"{second.url}/",
                        json={
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "GetTask",
                            "params": {"id": task_id},
                        },
                        headers=owner,
                        timeout=30,
                    ).json()
                    state = answer.get("result", {}).get("status", {}).get("state", "missing")
                    if state == "TASK_STATE_COMPLETED" or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                states[message_id] = state
                anonymous = rpc(second.url, "GetTask", {"id": task_id})
                assert anonymous["error"]["code"] == -32001  # the owner is on record
        # The listing index is right after the crash: every task listed once, completed.
        listed: list[dict[str, Any]] = []
        token = ""
        while True:
            params: dict[str, object] = {"pageSize": 100, "historyLength": 0, "pageToken": token}
            page = httpx.post(
                f"{second.url}/",
                json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params},
                headers=owner,
                timeout=30,
            ).json()["result"]
            assert page["totalSize"] == 150
            listed.extend(page["tasks"])
            token = page["nextPageToken"]
            if not token:
                break
        assert second.stop() == 0
    finally:
        second.kill()
    assert set(states.values()) == {"TASK_STATE_COMPLETED"}, states
    assert len({t["id"] for t in listed}) == len(listed) == 150
    assert {t["status"]["state"] for t in listed} == {"TASK_STATE_COMPLETED"}


async def test_a_store_that_refuses_writes_leaves_the_record_in_the_workflows_result(make_harness):
    harness = make_harness()
    async with serving(harness) as url, a2a_client(url, streaming=False) as client:
        store = harness.tasks._store  # pyright: ignore[reportPrivateUsage]
        # A real SQLite file that refuses every write, as a full disk would.
        store._db.execute("PRAGMA query_only = ON")  # pyright: ignore[reportPrivateUsage]
        task = await send_blocking(client, user_message("keep me anyway"))
        with anyio.fail_after(30):
            while (record := await harness.tasks._ended_record(task.id)) is None:  # pyright: ignore[reportPrivateUsage]
                await anyio.sleep(0.05)
        again = await client.get_task(GetTaskRequest(id=task.id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert record.unstored is not None  # in the workflow's result, not the store
    assert [m.parts[0].text for m in again.history] == ["keep me anyway", "keep me anyway"]
