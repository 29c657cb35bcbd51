"""Agents work together: a turn delegates to other agents of its group over A2A, durably.

The seed's scenario in one process: a delegates to b and c, b to d; every call is real A2A over
loopback HTTP to the agents' prefixed routes, each delegation a stand-in child workflow on real
Temporal. Only the agents' decisions are scripted.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from harness_core import (
    Ask,
    Complete,
    ConfigError,
    Delegate,
    Delegation,
    Gate,
    Harness,
    HarnessGroup,
    RouteOptions,
    TurnContext,
)
from harness_core.agents.turn import TurnResult
from tests.conftest import (
    a2a_client,
    agent_settings,
    free_port,
    serving,
    unique_id,
    user_message,
)
from tests.integration.test_a2a_methods import send_blocking, send_immediately
from tests.servers import STARTUP_SECONDS

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.anyio


class Team:
    """Four scripted agents and how many turns each ran (turns run on the Temporal thread)."""

    def __init__(self) -> None:
        self.turns: collections.Counter[str] = collections.Counter()
        self.seen: dict[str, list[tuple[str | None, str]]] = collections.defaultdict(list)
        self._lock = threading.Lock()
        self.ids = {name: unique_id(name) for name in "abcd"}
        self.targets: dict[str, str] = {}  # what a's turn context said of the other agents

    def _count(self, name: str, ctx: TurnContext) -> None:
        with self._lock:
            self.turns[name] += 1
            self.seen[name].extend((m.sender, m.text) for m in ctx.new_messages)

    async def a(self, ctx: TurnContext) -> TurnResult:
        self._count("a", ctx)
        self.targets = dict(ctx.agents)
        if ctx.number == 1:
            return Delegate(
                [
                    Delegation(self.ids["b"], "ask d for the answer"),
                    Delegation(self.ids["c"], "what colour?"),
                ],
                message="asking b and c",
            )
        return Complete(" | ".join(sorted(m.text for m in ctx.new_messages)))

    async def b(self, ctx: TurnContext) -> TurnResult:
        self._count("b", ctx)
        if ctx.number == 1:
            return Delegate(Delegation(self.ids["d"], "what is the answer?"))
        return Complete(f"b heard: {ctx.new_messages[-1].text}")

    async def c(self, ctx: TurnContext) -> TurnResult:
        self._count("c", ctx)
        return Complete("c says blue")

    async def d(self, ctx: TurnContext) -> TurnResult:
        self._count("d", ctx)
        return Complete("d says 42")


def delegation_settings(updates: str, stream_for: str = "2s") -> dict[str, Any]:
    """``[delegation]`` for a way of taking the answers: "ask" (the default: a turn whose
    senders all wait asks with a blocking send first, within its workflow task), "stream"
    (stand-ins read the answer on the send's own stream), "push" or "follow" (stand-ins, from the
    start: ``stream_for = 0``)."""
    return {
        "stream_for": stream_for if updates in ("ask", "stream") else 0,
        "block_for": "2s" if updates == "ask" else 0,
    }


async def stand_ins(address: str, task_id: str, turn: int = 1, count: int = 2) -> list[str]:
    """The stand-in workflows that the ``turn``'s first ``count`` delegations of a task started
    (its delegations that were followed), by their ids. Temporal's client needs asyncio: it
    runs on a loop of its own in a thread, whichever backend the test runs on."""

    async def look() -> list[str]:
        client = await Client.connect(address)
        found: list[str] = []
        for key in range(1, count + 1):
            stand_in = f"{task_id}:delegate:{turn}:{key}"
            try:
                await client.get_workflow_handle(stand_in).describe()
            except RPCError as error:
                assert error.status == RPCStatusCode.NOT_FOUND
                continue
            found.append(stand_in)
        return found

    return await anyio.to_thread.run_sync(asyncio.run, look())


def team_harnesses(tmp_path: Path, address: str, team: Team, updates: str) -> list[Harness]:
    """a..d of one group, taking answers as ``updates`` says (``delegation_settings``)."""
    return [
        Harness(
            agent_settings(
                tmp_path / name,
                address,
                team.ids[name],
                push={"agent_hosts": ["127.0.0.1"]},
                delegation=delegation_settings(updates),
            ),
            agent=getattr(team, name),
            prefix=f"/agents/{team.ids[name]}",
            routes=RouteOptions(push=updates == "push"),
        )
        for name in "abcd"
    ]


@pytest.mark.parametrize("updates", ["ask", "stream", "push", "follow"])
async def test_a_delegates_to_b_and_c_and_b_to_d_and_a_completes_with_all_three(
    tmp_path, temporal_address, updates
):
    """Given agents a..d of one group, when a's participant asks a, then a's first turn hands work
    to b and c, b's to d, each answer returns to its delegating task as a message from
    ``agent:<id>``, a completes with b's (which carries d's) and c's contributions, and every
    model ran one turn per message it got."""
    team = Team()
    harnesses = team_harnesses(tmp_path, temporal_address, team, updates)
    async with serving(*harnesses) as url:
        a_url = f"{url}/agents/{team.ids['a']}"
        async with a2a_client(
            a_url, streaming=False, headers={"X-Participant-Id": "alice"}
        ) as client:
            task = await send_blocking(client, user_message("what do we know?"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "b heard: d says 42 | c says blue"
    assert team.turns == {"a": 2, "b": 2, "c": 1, "d": 1}
    b_id, c_id = team.ids["b"], team.ids["c"]
    # The turn context names every agent a may delegate to, with what it says of itself.
    assert sorted(team.targets) == sorted(team.ids[name] for name in "bcd")
    assert team.targets[b_id].startswith(b_id)
    assert sorted(team.seen["a"][1:]) == [
        (f"agent:{b_id}", "b heard: d says 42"),
        (f"agent:{c_id}", "c says blue"),
    ]
    # The participant's identity travelled with every call.
    assert team.seen["b"][0] == ("alice", "ask d for the answer")
    assert team.seen["d"] == [("alice", "what is the answer?")]
    answers = [
        MessageToDict(m)["metadata"]["harness.delegation"]
        for m in task.history
        if "harness.delegation" in MessageToDict(m).get("metadata", {})
    ]
    assert sorted((x["agent"], x["state"]) for x in answers) == [
        (b_id, "TASK_STATE_COMPLETED"),
        (c_id, "TASK_STATE_COMPLETED"),
    ]
    # Push, follow or stream, as asked: with push, a's two delegations registered webhooks at b
    # and c, whose tokens a keeps only as digests; else none (the answers came first).
    with sqlite3.connect(harnesses[0].settings.store_path) as db:
        tokens = db.execute("SELECT digest FROM push_tokens").fetchall()
    with sqlite3.connect(harnesses[1].settings.store_path) as db:
        hooks = db.execute("SELECT body FROM push_configs").fetchall()
    assert len(tokens) == (2 if updates == "push" else 0)
    assert len(hooks) == (1 if updates == "push" else 0)
    assert all(len(d) == 64 for (d,) in tokens)
    # Asked first, the answers came within a's workflow task: no stand-in; else one for each.
    followed = await stand_ins(temporal_address, task.id)
    assert len(followed) == (0 if updates == "ask" else 2)


@pytest.mark.parametrize("updates", ["stream", "push", "follow"])
async def test_the_delegating_task_streams_the_progress_of_the_agents_it_asked(
    tmp_path, temporal_address, updates
):
    """Given a → b → d, where b says "asking d" as it delegates and d says "d is thinking"
    before it answers (held until a's stream showed a relayed word), when a's participant streams a
    message to a, then a's stream shows b's progress (``path`` [b]) once, and d's through b
    ([b, d]) once where the updates carry every event (stream, push), before a's answer. A follow
    reads only the latest status of b's task, which may already be d's progress (GetTask shows a
    running turn's progress): it shows one of them, each at most once."""
    gate = Gate()
    ids = {name: unique_id(name) for name in "abd"}

    async def a(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            return Delegate(Delegation(ids["b"], "go"), message="asking b")
        return Complete(ctx.new_messages[-1].text)

    async def b(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            return Delegate(Delegation(ids["d"], "think"), message="asking d")
        return Complete(f"b: {ctx.new_messages[-1].text}")

    async def d(ctx: TurnContext) -> TurnResult:
        await ctx.progress("step:1", "d is thinking")
        await gate.pass_through()
        return Complete("42")

    harnesses = [
        Harness(
            agent_settings(
                tmp_path / name,
                temporal_address,
                ids[name],
                push={"agent_hosts": ["127.0.0.1"]},
                # The longest window: b's first turn must fall in it on a slow, loaded machine,
                # or a's stand-in follows b and may read only d's progress as b's latest status.
                delegation={"stream_for": "10s" if updates == "stream" else 0},
            ),
            agent=agent,
            prefix=f"/agents/{ids[name]}",
            routes=RouteOptions(push=updates == "push"),
        )
        for name, agent in (("a", a), ("b", b), ("d", d))
    ]
    relayed: list[tuple[tuple[str, ...], str, str]] = []
    final = None
    async with (
        serving(*harnesses) as url,
        a2a_client(f"{url}/agents/{ids['a']}", headers={"X-Participant-Id": "alice"}) as client,
    ):
        # Three agents and two delegations: a minute or more on a slow, shared 2-core machine.
        with anyio.fail_after(150):
            async for event in client.send_message(
                SendMessageRequest(message=user_message("what do we know?"))
            ):
                if not event.HasField("status_update"):
                    continue
                status = MessageToDict(event.status_update.status)
                message = status.get("message", {})
                delegation = message.get("metadata", {}).get("harness.delegation")
                if delegation is not None:
                    text = message["parts"][0]["text"]
                    relayed.append((tuple(delegation["path"]), text, message["messageId"]))
                    assert delegation["agent"] == ids["b"] and delegation["taskId"]
                    # Any relayed word opens d's gate: a missed "asking d" fails the count
                    # below rather than holding d (and the stream) forever.
                    gate.release()
                final = status
    assert final is not None and final["state"] == "TASK_STATE_COMPLETED"
    assert final["message"]["parts"][0]["text"] == "b: 42"
    shown = [(path, text) for path, text, _ in relayed]
    b_said, d_said = ((ids["b"],), "asking d"), ((ids["b"], ids["d"]), "d is thinking")
    if updates == "follow":
        assert shown and set(shown) <= {b_said, d_said}
        assert len(shown) == len(set(shown))
    else:
        assert shown.count(b_said) == 1
        assert shown.count(d_said) == 1
    assert len({message_id for _, _, message_id in relayed}) == len(relayed)


@pytest.mark.parametrize("updates", ["ask", "stream", "push", "follow"])
async def test_a_answers_the_question_of_the_agent_it_asked(tmp_path, temporal_address, updates):
    """Given d asks a question before it answers, when a delegates to d, then a's next turn gets
    d's question (INPUT_REQUIRED, with d's task id), a answers it by continuing d's task, and a
    completes with d's answer: d's standing question is never taken for its answer."""
    a_id, d_id = unique_id("a"), unique_id("d")
    heard: list[tuple[str, str]] = []

    async def a(ctx: TurnContext) -> TurnResult:
        last = ctx.new_messages[-1]
        if ctx.number == 1:
            return Delegate(Delegation(d_id, "pick a colour"))
        info = last.metadata["harness.delegation"]
        heard.append((info["state"], last.text))
        if info["state"] == "TASK_STATE_INPUT_REQUIRED":
            return Delegate(Delegation(d_id, "blue", task_id=info["taskId"]))
        return Complete(f"d chose {last.text}")

    async def d(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            return Ask("light or dark?")
        # The question stays d's status meanwhile, past the send's stream.
        await anyio.sleep(0.8)
        return Complete(f"{ctx.new_messages[-1].text}, dark")

    harnesses = [
        Harness(
            agent_settings(
                tmp_path / name,
                temporal_address,
                agent_id,
                push={"agent_hosts": ["127.0.0.1"]},
                delegation=delegation_settings(updates, stream_for="0.5s"),
            ),
            agent=agent,
            prefix=f"/agents/{agent_id}",
            routes=RouteOptions(push=updates == "push"),
        )
        for name, agent_id, agent in (("a", a_id, a), ("d", d_id, d))
    ]
    async with (
        serving(*harnesses) as url,
        a2a_client(f"{url}/agents/{a_id}", streaming=False) as client,
    ):
        task = await send_blocking(client, user_message("choose for me"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "d chose blue, dark"
    assert heard == [
        ("TASK_STATE_INPUT_REQUIRED", "light or dark?"),
        ("TASK_STATE_COMPLETED", "blue, dark"),
    ]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_team_survives_a_sigkill_while_d_thinks_and_no_turn_completes_twice(
    tmp_path: Path, backend: str
) -> None:
    """Given examples/multi_agent served by ``harness serve`` (a..e on one embedded dev server;
    e reached by URL with pushes), when a's participant asks a and the host is SIGKILLed while d is mid-turn, then after
    a restart everything completes: a answers with b's (carrying d's) and c's contributions, and
    every agent completed exactly one turn per message it got (d's killed attempt ran again)."""
    example = ROOT / "examples" / "multi_agent"
    configs = []
    port = free_port()
    for name in "abcde":
        # The example's port (in bind and in a's [[agents]] URL for e) becomes a free one.
        text = (example / f"{name}.toml").read_text().replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        (tmp_path / f"{name}.toml").write_text(text)
        configs.append(str(tmp_path / f"{name}.toml"))
    journal = tmp_path / "journal.txt"

    def serve(delay: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "examples"),
            "MULTI_AGENT_JOURNAL": str(journal),
            "MULTI_AGENT_D_DELAY": delay,
        }
        log = (tmp_path / f"serve-{delay}.log").open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness_core.cli",
                "serve",
                *configs,
                "--bind",
                f"127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=env,
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while "serving 5 agent(s)" not in (tmp_path / f"serve-{delay}.log").read_text():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)  # another process: its log is the only signal
        return process

    url = f"http://127.0.0.1:{port}/agents/a/"
    headers = {"A2A-Version": "1.0", "X-Participant-Id": "alice"}
    message = {"messageId": "q-1", "role": "ROLE_USER", "parts": [{"text": "how to build it"}]}
    first = serve("30")
    try:
        sent = httpx.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message, "configuration": {"returnImmediately": True}},
            },
            headers=headers,
            timeout=30,
        ).json()
        task_id = sent["result"]["task"]["id"]
        deadline = time.monotonic() + 60
        while "d start" not in (journal.read_text() if journal.exists() else ""):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # c and e answer at once: their turns are done before the kill only once their tasks'
        # workflows closed (a turn whose result Temporal has not recorded yet runs again, as
        # d's does). Temporal's own count of them says so.
        for name in "ce":
            while (
                f"{name} done" not in journal.read_text()
                or httpx.get(f"http://127.0.0.1:{port}/agents/{name}/_monitor", timeout=10).json()[
                    "runningTasks"
                ]
                != 0
            ):
                assert time.monotonic() < deadline
                time.sleep(0.1)  # another process: polling is the only signal
        first.kill()  # SIGKILL, d mid-turn
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    second = serve("0")
    try:
        deadline = time.monotonic() + 90
        while True:
            got = httpx.post(
                url,
                json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}},
                headers=headers,
                timeout=30,
            ).json()["result"]
            if got["status"]["state"] == "TASK_STATE_COMPLETED" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    assert got["status"]["state"] == "TASK_STATE_COMPLETED", got
    assert got["status"]["message"]["parts"][0]["text"] == (
        "the team says: b found: d says 42 | c drew it in blue | e waves from afar"
    )
    done = collections.Counter(
        line.split()[0] for line in journal.read_text().splitlines() if line.split()[1] == "done"
    )
    started = collections.Counter(
        line.split()[0] for line in journal.read_text().splitlines() if line.split()[1] == "start"
    )
    assert done == {"a": 2, "b": 2, "c": 1, "d": 1, "e": 1}
    assert started["d"] == 2  # the killed attempt, and the one after the restart


@pytest.mark.parametrize("updates", ["stream", "push", "follow"])
async def test_an_agent_named_in_agents_is_reached_at_its_url_with_the_configured_headers(
    tmp_path, temporal_address, monkeypatch, updates
):
    """Given a partner agent served by another group (another server), named in a's
    ``[[agents]]`` with a header from an environment variable, when a delegates to it, then the
    answer returns; a partner whose header variable is unset is a clear failed delegation."""
    monkeypatch.setenv("PARTNER_KEY", "k-123")
    seen: list[str | None] = []

    async def partner(ctx: TurnContext) -> TurnResult:
        seen.append(ctx.new_messages[-1].sender)
        return Complete("partner says hi")

    async def a(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            return Delegate([Delegation("partner", "hello"), Delegation("locked", "hello")])
        return Complete(" | ".join(sorted(m.text for m in ctx.new_messages)))

    far = Harness(
        agent_settings(tmp_path / "far", temporal_address, push={"agent_hosts": ["127.0.0.1"]}),
        agent=partner,
    )
    async with serving(far) as far_url:
        near = Harness(
            agent_settings(
                tmp_path / "near",
                temporal_address,
                push={"agent_hosts": ["127.0.0.1"]},
                agents=[
                    {
                        "id": "partner",
                        "url": far_url,
                        "updates": updates,
                        "headers": ["X-Partner-Key=PARTNER_KEY"],
                    },
                    {"id": "locked", "url": far_url, "headers": ["X-Key=NOT_SET_ANYWHERE"]},
                ],
            ),
            agent=a,
        )
        async with (
            serving(near) as near_url,
            a2a_client(near_url, streaming=False, headers={"X-Participant-Id": "bob"}) as client,
        ):
            task = await send_blocking(client, user_message("ask the partner"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    text = task.status.message.parts[0].text
    assert "partner says hi" in text
    assert "the delegation to locked failed" in text
    assert "NOT_SET_ANYWHERE" in text and "k-123" not in text
    assert seen == ["bob"]


async def test_the_model_asks_another_agent_through_a_tool(tmp_path, temporal_address, monkeypatch):
    """Given an LLM agent (a scripted OpenAI-compatible server) in a group with agent b, when the
    model calls the tool ``ask_<b>`` offered to it, then b answers over A2A, the model hears b's
    answer as the tool's result, and answers with it."""
    from tests.fakes.model_servers import serve_fake_openai, text_reply, tool_call_reply

    monkeypatch.setenv("HARNESS_TEST_MODEL_KEY", "sk-test")
    b_id = unique_id("b")

    async def b(ctx: TurnContext) -> TurnResult:
        return Complete(f"b says blue to {ctx.new_messages[-1].text!r}")

    with serve_fake_openai() as server:
        tool = "ask_" + b_id.replace("-", "_")
        server.push(tool_call_reply(tool, {"message": "which colour?"}), text_reply("It is blue."))
        llm = Harness(
            agent_settings(
                tmp_path / "llm",
                temporal_address,
                model={
                    "kind": "openai",
                    "name": "test-model",
                    "base_url": server.base_url,
                    "api_key_env": "HARNESS_TEST_MODEL_KEY",
                },
            ),
            prefix="/agents/llm",
        )
        helper = Harness(
            agent_settings(
                tmp_path / "b", temporal_address, b_id, agent={"description": "knows colours"}
            ),
            agent=b,
            prefix=f"/agents/{b_id}",
        )
        async with (
            serving(llm, helper) as url,
            a2a_client(f"{url}/agents/llm", streaming=False) as client,
        ):
            task = await send_blocking(client, user_message("what colour is it?"))
        first, second = server.requests[0].body, server.requests[1].body
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "It is blue."
    offered = [t["function"] for t in first["tools"]]
    assert [t["name"] for t in offered] == [tool]
    assert "knows colours" in offered[0]["description"]
    results = [m for m in second["messages"] if m.get("role") == "tool"]
    assert results and "b says blue to 'which colour?'" in results[0]["content"]


async def test_model_agents_chooses_which_agents_the_model_may_ask(tmp_path, temporal_address):
    """Given an LLM agent in a group with b and c, with ``[model] agents = [b]``, then the model is
    offered ``ask_<b>`` only; naming an agent that is neither in the group nor in [[agents]] is
    a configuration error naming the key and the agents it could ask."""
    from tests.fakes.model_servers import serve_fake_openai, text_reply

    b_id, c_id = unique_id("b"), unique_id("c")

    async def answer(ctx: TurnContext) -> TurnResult:
        return Complete("ok")

    def model(server_url: str, agents: list[str]) -> dict[str, Any]:
        return {"kind": "openai", "name": "m", "base_url": server_url, "agents": agents}

    with serve_fake_openai() as server:
        server.push(text_reply("nobody to ask today"))
        llm = Harness(
            agent_settings(
                tmp_path / "llm", temporal_address, model=model(server.base_url, [b_id])
            ),
            prefix="/agents/llm",
        )
        helpers = [
            Harness(
                agent_settings(tmp_path / x, temporal_address, x),
                agent=answer,
                prefix=f"/agents/{x}",
            )
            for x in (b_id, c_id)
        ]
        async with (
            serving(llm, *helpers) as url,
            a2a_client(f"{url}/agents/llm", streaming=False) as client,
        ):
            task = await send_blocking(client, user_message("hello"))
        offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert offered == ["ask_" + b_id.replace("-", "_")]

    wrong = Harness(
        agent_settings(
            tmp_path / "wrong", temporal_address, model=model("http://127.0.0.1:9", ["zed"])
        )
    )
    with pytest.raises(ConfigError, match=r"'model.agents\[0\]' is 'zed': not an agent it can ask"):
        HarnessGroup(
            wrong, Harness(agent_settings(tmp_path / "b2", temporal_address), agent=answer)
        )


TERMINAL = (
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_REJECTED,
)


async def ended(client: Any, task_id: str) -> Any:
    """The task once it ended (reading it every 0.1 s, for at most 40 s)."""
    with anyio.fail_after(40):
        while True:
            task = await client.get_task(GetTaskRequest(id=task_id))
            if task.status.state in TERMINAL:
                return task
            await anyio.sleep(0.1)


@pytest.mark.parametrize("stream_for", ["2s", "10s"], ids=["answer-read-first", "send-cut-off"])
async def test_canceling_the_delegating_task_cancels_the_remote_task(
    tmp_path, temporal_address, stream_for
):
    """Given a delegating to d, whose turn is held, when a's participant cancels a's task, then
    a's task is CANCELED and so, through its stand-in, is d's task.

    With ``[delegation] stream_for`` at its most the stand-in's send still reads d's stream when
    the cancel comes, and is cut off: d's task is canceled all the same, since the send noted its
    id in the store as soon as it was known. Before, a stand-in cut off in its send knew no remote
    task, and d's task ran on."""
    gate = Gate()
    a_id, d_id = unique_id("a"), unique_id("d")

    async def a(ctx: TurnContext) -> TurnResult:
        return Delegate(Delegation(d_id, "take forever"))

    async def d(ctx: TurnContext) -> TurnResult:
        await gate.pass_through()
        return Complete("never")

    harnesses = [
        Harness(
            agent_settings(
                tmp_path / "a", temporal_address, a_id, delegation={"stream_for": stream_for}
            ),
            agent=a,
            prefix=f"/agents/{a_id}",
        ),
        Harness(
            agent_settings(tmp_path / "d", temporal_address, d_id),
            agent=d,
            prefix=f"/agents/{d_id}",
        ),
    ]
    headers = {"X-Participant-Id": "carol"}
    try:
        async with (
            serving(*harnesses) as url,
            a2a_client(f"{url}/agents/{a_id}", streaming=False, headers=headers) as client,
            a2a_client(f"{url}/agents/{d_id}", streaming=False, headers=headers) as at_d,
        ):
            task = await send_immediately(client, user_message("start"))
            with anyio.fail_after(60):
                await gate.wait_entered()
            [d_task] = (await at_d.list_tasks(ListTasksRequest())).tasks
            canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
            remote = await ended(at_d, d_task.id)
    finally:
        gate.release()
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert remote.status.state == TaskState.TASK_STATE_CANCELED


def asking_pair(
    tmp_path: Path, address: str, a: tuple[str, Any], d: tuple[str, Any]
) -> list[Harness]:
    """Agents a and d (id, agent) of one group, where a asks d with ``block_for = 0.3``."""
    return [
        Harness(
            agent_settings(tmp_path / "a", address, a[0], delegation={"block_for": 0.3}),
            agent=a[1],
            prefix=f"/agents/{a[0]}",
        ),
        Harness(
            agent_settings(tmp_path / "d", address, d[0]), agent=d[1], prefix=f"/agents/{d[0]}"
        ),
    ]


async def test_an_answer_slower_than_block_for_is_followed_by_a_stand_in(
    tmp_path, temporal_address
):
    """Given a blocking sender and d slower than a's ``[delegation] block_for``, when a delegates
    to d, then a's blocking ask gives up waiting, a stand-in follows d's task, d's model ran once
    (every send of the delegation's message reaches the same task), and a completes with d's
    answer."""
    a_id, d_id = unique_id("a"), unique_id("d")
    turns: collections.Counter[str] = collections.Counter()

    async def a(ctx: TurnContext) -> TurnResult:
        if ctx.number == 1:
            return Delegate(Delegation(d_id, "slowly"))
        return Complete(f"a: {ctx.new_messages[-1].text}")

    async def d(ctx: TurnContext) -> TurnResult:
        turns[ctx.new_messages[-1].text] += 1
        await anyio.sleep(1.5)
        return Complete("done slowly")

    harnesses = asking_pair(tmp_path, temporal_address, (a_id, a), (d_id, d))
    headers = {"X-Participant-Id": "dora"}
    async with (
        serving(*harnesses) as url,
        a2a_client(f"{url}/agents/{a_id}", streaming=False, headers=headers) as client,
        a2a_client(f"{url}/agents/{d_id}", streaming=False, headers=headers) as at_d,
    ):
        task = await send_blocking(client, user_message("go"))
        d_tasks = (await at_d.list_tasks(ListTasksRequest())).tasks
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.status.message.parts[0].text == "a: done slowly"
    assert turns == {"slowly": 1}
    assert [t.status.state for t in d_tasks] == [TaskState.TASK_STATE_COMPLETED]
    assert await stand_ins(temporal_address, task.id, count=1) == [f"{task.id}:delegate:1:1"]


async def test_canceling_a_task_whose_ask_gave_up_cancels_the_remote_task(
    tmp_path, temporal_address
):
    """Given a blocking sender, and d holding its turn past a's ``[delegation] block_for``, when
    the participant cancels a's task while a's ask waits, then a's task and d's are CANCELED: the
    stand-in that takes over is canceled at once, finds d's task (no send named it yet) among
    the participant's tasks at d, and cancels it."""
    gate = Gate()
    a_id, d_id = unique_id("a"), unique_id("d")

    async def a(ctx: TurnContext) -> TurnResult:
        return Delegate(Delegation(d_id, "take forever"))

    async def d(ctx: TurnContext) -> TurnResult:
        await gate.pass_through()
        return Complete("never")

    harnesses = asking_pair(tmp_path, temporal_address, (a_id, a), (d_id, d))
    headers = {"X-Participant-Id": "carol"}
    blocked: list[Any] = []
    canceled = remote = None
    try:
        async with (
            serving(*harnesses) as url,
            a2a_client(f"{url}/agents/{a_id}", streaming=False, headers=headers) as client,
            a2a_client(f"{url}/agents/{d_id}", streaming=False, headers=headers) as at_d,
            anyio.create_task_group() as tg,
        ):

            async def send() -> None:
                blocked.append(await send_blocking(client, user_message("start")))

            tg.start_soon(send)
            with anyio.fail_after(60):
                await gate.wait_entered()
            # While a's ask still waits: the cancel is heard once it gave up.
            [a_task] = (await client.list_tasks(ListTasksRequest())).tasks
            [d_task] = (await at_d.list_tasks(ListTasksRequest())).tasks
            canceled = await client.cancel_task(CancelTaskRequest(id=a_task.id))
            remote = await ended(at_d, d_task.id)
    finally:
        gate.release()
    assert canceled is not None and canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert remote is not None and remote.status.state == TaskState.TASK_STATE_CANCELED
    assert [t.status.state for t in blocked] == [TaskState.TASK_STATE_CANCELED]
