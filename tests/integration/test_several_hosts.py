"""Two hosts serve one agent: two ``harness serve`` processes with the same agent id and task
queue, on one Temporal service (the session's dev server, as a cluster would be), one PostgreSQL
store and one object store for the claim check's payloads (an S3-compatible server on loopback).
Host 1 runs asyncio, host 2 Trio.

A task started on host 1 is read, listed, followed (resumed with ``Last-Event-ID``) and canceled
through host 2; host 1 is killed with SIGKILL mid-turn and host 2 finishes that turn, nothing lost.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port, unique_id
from tests.integration.test_cli import Server, rpc, write_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

CONFIG = """
[agent]
id = "{agent}"

[temporal]
mode = "remote"
address = "{address}"

[server]
bind = "127.0.0.1:{port}"

[store]
url = "{url}"
blobs = "{blobs}"

[heartbeat]
interval = "1h"

[model]
kind = "echo"
delay = "{delay}"
local_activity = false
"""


def host(
    tmp_path: Path,
    name: str,
    backend: str,
    *,
    agent: str,
    address: str,
    url: str,
    blobs: str,
    delay: str,
) -> Server:
    directory = tmp_path / name
    directory.mkdir()
    port = free_port()
    config = write_config(
        directory,
        CONFIG.format(
            agent=agent,
            address=address,
            port=port,
            url=url,
            blobs=blobs,
            delay=delay,
        ),
    )
    return Server(config, port, "--backend", backend)


def state_of(server: Server, task_id: str) -> str:
    return str(rpc(server.url, "GetTask", {"id": task_id})["result"]["status"]["state"])


def wait_for(server: Server, task_id: str, state: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        task = rpc(server.url, "GetTask", {"id": task_id})["result"]
        if task["status"]["state"] == state:
            return task
        assert time.monotonic() < deadline, (task, server.log)
        time.sleep(0.1)  # another process: polling is the only signal


def send(server: Server, text: str) -> str:
    message = {"messageId": unique_id("m"), "role": "ROLE_USER", "parts": [{"text": text}]}
    params = {"message": message, "configuration": {"returnImmediately": True}}
    return str(rpc(server.url, "SendMessage", params)["result"]["task"]["id"])


def test_a_task_started_on_one_host_is_served_by_the_other_and_survives_a_sigkill(
    tmp_path: Path, temporal_address: str, postgres_url: str, s3_bucket: str
) -> None:
    agent = unique_id("shared")
    options = {
        "agent": agent,
        "address": temporal_address,
        "url": postgres_url,
        "blobs": f"s3://{s3_bucket}/payloads",
        # Long enough for host 2 to start and serve the reads while host 1's turn runs, on a
        # loaded machine too (checked before the kill).
        "delay": "25s",
    }
    # Over the claim check's 16 KiB: host 2 reads what host 1 stored, from the object store.
    long_text = "keep me " + "x" * 40_000
    first = host(tmp_path, "host1", "asyncio", **options)
    second: Server | None = None
    streamed: list[dict[str, Any]] = []
    try:
        # Host 1 alone: its worker takes both turns.
        kept, dropped = send(first, long_text), send(first, "drop me")
        for task_id in (kept, dropped):
            wait_for(first, task_id, "TASK_STATE_WORKING")
        second = host(tmp_path, "host2", "trio", **options)

        # Read and listed through host 2, while host 1 runs the turns.
        got = rpc(second.url, "GetTask", {"id": kept})["result"]
        assert [m["parts"][0]["text"] for m in got["history"]] == [long_text]
        listed = rpc(second.url, "ListTasks", {})["result"]
        assert {t["id"] for t in listed["tasks"]} == {kept, dropped}

        # Canceled through host 2: host 1's turn sees the request in the shared store.
        canceled = rpc(second.url, "CancelTask", {"id": dropped})["result"]
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"

        # Followed through host 2 from event 1 on, while host 1 dies mid-turn.
        def follow() -> None:
            body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": kept}}
            headers = {"A2A-Version": "1.0", "Last-Event-ID": "1"}
            assert second is not None
            with httpx.stream(
                "POST", f"{second.url}/", json=body, headers=headers, timeout=90
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        streamed.append(json.loads(line[5:]))

        follower = threading.Thread(target=follow)
        follower.start()
        try:
            assert state_of(second, kept) == "TASK_STATE_WORKING", "the turn ended before the kill"
            os.kill(first.process.pid, signal.SIGKILL)
            first.process.wait()
            # Host 2's worker takes the turn over once host 1's stops heartbeating.
            task = wait_for(second, kept, "TASK_STATE_COMPLETED", timeout=90)
        finally:
            follower.join(timeout=90)
        assert not follower.is_alive()
        assert [m["parts"][0]["text"] for m in task["history"]] == [long_text, long_text]
        assert task["artifacts"][0]["parts"][0]["text"] == long_text
        assert state_of(second, dropped) == "TASK_STATE_CANCELED"
        assert second.stop() == 0
    finally:
        first.kill()
        if second is not None:
            second.kill()

    # The stream resumed after event 1 and ended with the turn host 2 finished.
    assert streamed and all("error" not in event for event in streamed), streamed
    updates = [e["result"]["statusUpdate"] for e in streamed if "statusUpdate" in e["result"]]
    seqs = [float(u["metadata"]["harness.seq"]) for u in updates]
    assert seqs and min(seqs) > 1 and seqs == sorted(seqs)
    assert updates[-1]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert second is not None and "Traceback" not in second.log
    # The long message crossed Temporal as a reference: its content is in the object store.
    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    stored = s3.list_objects_v2(Bucket=s3_bucket, Prefix="payloads/sha256/")
    assert stored.get("KeyCount", 0) >= 1
