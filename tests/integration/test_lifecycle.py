"""The group's lifecycle: states, start and stop order, claims, failures, and a clean shutdown."""

from __future__ import annotations

import threading
from datetime import timedelta

import anyio
import httpx
import pytest
from anyio.abc import TaskStatus
from starlette.applications import Starlette
from starlette.routing import Mount

from harness_asgi.serve import serve_http
from harness_core import (
    AgentState,
    Harness,
    HarnessAlreadyStartedError,
    HarnessConflictError,
    HarnessGroup,
    HarnessStoppedError,
    ScriptedModel,
)
from harness_core.worker import heartbeat_schedule_id
from tests.conftest import agent_settings, unique_id

pytestmark = pytest.mark.anyio


def leftover_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("harness-")]


class RecordingHarness(Harness):
    """A real harness that records when its agent task starts and ends."""

    def __init__(self, *args: object, journal: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.journal = journal

    async def run_agent(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self.journal.append(f"start {self.agent_id}")
        try:
            await super().run_agent(task_status=task_status)
        finally:
            self.journal.append(f"stop {self.agent_id}")


async def test_agents_start_in_order_and_stop_in_reverse_with_their_states(
    tmp_path, temporal_address
):
    journal: list[str] = []
    a_id, b_id = unique_id("a"), unique_id("b")
    a = RecordingHarness(agent_settings(tmp_path, temporal_address, a_id), journal=journal)
    b = RecordingHarness(agent_settings(tmp_path, temporal_address, b_id), journal=journal)
    assert a.state is AgentState.STOPPED
    group = HarnessGroup(a, b)
    async with group:
        assert (a.state, b.state) == (AgentState.READY, AgentState.READY)
        reply = await a.tasks.send(
            {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            participant=None,
            wait=True,
        )
        assert reply.view.task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert journal == [f"start {a_id}", f"start {b_id}", f"stop {b_id}", f"stop {a_id}"]
    assert (a.state, b.state) == (AgentState.STOPPED, AgentState.STOPPED)
    assert leftover_threads() == []


async def test_a_group_runs_inside_an_existing_task_group_and_reports_readiness(
    tmp_path, temporal_address
):
    harness = Harness(agent_settings(tmp_path, temporal_address))
    async with anyio.create_task_group() as tg:
        await tg.start(HarnessGroup(harness).run)
        assert harness.ready
        tg.cancel_scope.cancel()
    assert harness.state is AgentState.STOPPED
    assert leftover_threads() == []


async def test_a_mounted_app_answers_503_until_its_agent_is_ready(tmp_path, temporal_address):
    harness = Harness(agent_settings(tmp_path, temporal_address))
    # Under a Mount the host's lifespan (not the agent's app) decides when the agent runs.
    host_app = Starlette(routes=[Mount("/", app=harness.asgi_app())])
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve_http, host_app, "127.0.0.1:0", 1.0, stop.wait)
        url = f"http://{host}:{port}/.well-known/agent-card.json"
        async with httpx.AsyncClient() as http:
            before = await http.get(url)
            async with harness:
                during = await http.get(url)
            after = await http.get(url)
        stop.set()
        assert before.status_code == 503
        assert before.json() == {"error": f"agent {harness.agent_id} is not started"}
        assert during.status_code == 200
        assert during.json()["name"] == harness.agent_id
        assert after.status_code == 503


async def test_a_top_level_app_starts_and_stops_its_agent_with_the_servers_lifespan(
    tmp_path, temporal_address
):
    harness = Harness(agent_settings(tmp_path, temporal_address))
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        host, port = await tg.start(serve_http, harness.asgi_app(), "127.0.0.1:0", 1.0, stop.wait)
        async with httpx.AsyncClient() as http:
            card = await http.get(f"http://{host}:{port}/.well-known/agent-card.json")
        assert card.status_code == 200
        assert harness.ready
        with pytest.raises(HarnessAlreadyStartedError):
            async with harness:
                pass
        stop.set()
    assert harness.state is AgentState.STOPPED
    assert leftover_threads() == []


async def test_two_agents_with_one_id_are_refused_before_any_connection(tmp_path, temporal_address):
    agent_id = unique_id()
    first = Harness(agent_settings(tmp_path / "one", temporal_address, agent_id))
    # Port 1 on loopback: a connection attempt would fail differently, so the claim came first.
    second = Harness(agent_settings(tmp_path / "two", "127.0.0.1:1", agent_id))
    async with first:
        with pytest.raises(HarnessConflictError) as clash:
            async with second:
                pass
    assert f"agent id {agent_id!r} is already claimed by the harness of agent {agent_id!r}" in str(
        clash.value
    )
    assert second.state is AgentState.STOPPED
    with pytest.raises(HarnessConflictError, match="appears twice"):
        HarnessGroup(first, Harness(agent_settings(tmp_path / "three", temporal_address, agent_id)))


async def test_a_shared_queue_or_store_file_is_refused(tmp_path, temporal_address):
    first = Harness(
        agent_settings(tmp_path, temporal_address, temporal={"task_queue": "shared-queue"})
    )
    same_queue = Harness(
        agent_settings(tmp_path / "q", temporal_address, temporal={"task_queue": "shared-queue"})
    )
    same_store = Harness(
        agent_settings(tmp_path, temporal_address, store={"path": str(first.settings.store_path)})
    )
    async with first:
        with pytest.raises(HarnessConflictError, match="task queue 'shared-queue'"):
            async with same_queue:
                pass
        with pytest.raises(HarnessConflictError, match="store file"):
            async with same_store:
                pass
        assert first.ready


async def test_a_failure_during_start_undoes_what_started_and_raises(tmp_path, temporal_address):
    good = Harness(agent_settings(tmp_path, temporal_address))
    broken = Harness(
        agent_settings(tmp_path / "b", "127.0.0.1:1"),
    )
    with pytest.raises(Exception):  # noqa: B017 - the connection error is Temporal's own
        async with HarnessGroup(good, broken):
            pass
    assert good.state is AgentState.STOPPED
    assert broken.state is AgentState.FAILED
    assert broken.failure
    assert leftover_threads() == []


async def test_a_group_runs_once(tmp_path, temporal_address):
    group = HarnessGroup(Harness(agent_settings(tmp_path, temporal_address)))
    async with group:
        pass
    with pytest.raises(HarnessStoppedError):
        async with group:
            pass


async def test_the_heartbeat_schedule_is_created_then_follows_a_changed_interval(
    tmp_path, temporal_address
):
    agent_id = unique_id()
    first = Harness(
        agent_settings(tmp_path, temporal_address, agent_id, heartbeat={"interval": "1h"})
    )
    async with first:
        connection = first.tasks._connection  # pyright: ignore[reportPrivateUsage]
        schedule_id = heartbeat_schedule_id(agent_id)

        async def interval() -> timedelta:
            described = await connection.client.get_schedule_handle(schedule_id).describe()
            return described.schedule.spec.intervals[0].every

        assert await connection.bridge.call(interval) == timedelta(hours=1)
    second = Harness(
        agent_settings(tmp_path, temporal_address, agent_id, heartbeat={"interval": "5m"}),
        model=ScriptedModel(),
    )
    async with second:
        connection = second.tasks._connection  # pyright: ignore[reportPrivateUsage]
        assert await connection.bridge.call(interval) == timedelta(minutes=5)
    assert heartbeat_schedule_id("harness") == "harness-heartbeat"
    assert schedule_id == f"harness-heartbeat-{agent_id}"


async def test_workflow_payload_classes_cross_the_sandbox_unchanged(
    tmp_path, temporal_address, monkeypatch
):
    """The sandbox must not re-import payload classes per run (cattrs caches would grow)."""
    from harness_core import converter, payloads

    seen: list[type | None] = []
    json_converter = converter._AttrsJSONPayloadConverter  # pyright: ignore[reportPrivateUsage]
    original = json_converter.from_payload

    def recording(self, payload, type_hint=None):
        seen.append(type_hint)
        return original(self, payload, type_hint)

    monkeypatch.setattr(json_converter, "from_payload", recording)
    harness = Harness(agent_settings(tmp_path, temporal_address))
    async with harness:
        for n in range(4):
            await harness.tasks.send(
                {"messageId": f"m{n}", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
                participant=None,
                wait=True,
            )
    named = {
        c for c in seen if getattr(c, "__name__", "") in {"TaskStart", "Inbound", "TurnOutcome"}
    }
    assert named == {payloads.TaskStart, payloads.Inbound, payloads.TurnOutcome}


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # connecting a client needs asyncio
async def test_a_client_without_the_runtimes_converter_is_refused_at_construction(
    tmp_path, temporal_address, anyio_backend
):
    from temporalio.client import Client

    from harness_core import ConfigError
    from harness_core.converter import data_converter
    from harness_core.temporal.codec import data_converter_for

    settings = agent_settings(tmp_path, temporal_address)
    plain = await Client.connect(temporal_address)
    without_claim_check = await Client.connect(temporal_address, data_converter=data_converter)
    for client in (plain, without_claim_check):
        with pytest.raises(ConfigError, match=r"data_converter_for\(settings\)"):
            Harness(settings, client=client)
    ours = await Client.connect(temporal_address, data_converter=data_converter_for(settings))
    Harness(settings, client=ours)


async def test_a_failing_agent_stops_the_group_at_once_even_when_it_owns_the_shared_connection(
    tmp_path, temporal_address, monkeypatch
):
    """Given two agents on one shared connection, the first (which opened it) failing after
    start, when its worker raises, then the group ends with that error at once: the other agent
    is stopped, not waited for (the owner used to wait for it while it waited for the group)."""
    import harness_core.harness as harness_module

    real_run_worker = harness_module.run_worker
    owner_id, other_id = unique_id("owner"), unique_id("other")
    fail = anyio.Event()

    async def failing_worker(connection, queue, activities, **kwargs):  # type: ignore[no-untyped-def]
        if queue != owner_id:
            await real_run_worker(connection, queue, activities, **kwargs)
            return
        task_status = kwargs.pop("task_status")
        async with anyio.create_task_group() as tg:
            await tg.start(
                lambda task_status: real_run_worker(
                    connection, queue, activities, task_status=task_status, **kwargs
                )
            )
            task_status.started()
            await fail.wait()
            raise RuntimeError("the owner's worker broke")

    monkeypatch.setattr(harness_module, "run_worker", failing_worker)
    owner = Harness(agent_settings(tmp_path, temporal_address, owner_id))
    other = Harness(agent_settings(tmp_path, temporal_address, other_id))
    errors: list[Exception] = []
    with anyio.move_on_after(8) as deadline:
        try:
            async with HarnessGroup(owner, other):
                assert (owner.state, other.state) == (AgentState.READY, AgentState.READY)
                fail.set()
                await anyio.sleep_forever()
        except Exception as exc:  # an exception group holding the worker's error
            errors.append(exc)
    assert not deadline.cancelled_caught, "the group hung after its agent failed"
    assert "the owner's worker broke" in repr(errors)
    assert owner.state is AgentState.FAILED
    assert other.state in (AgentState.STOPPED, AgentState.FAILED)
    assert leftover_threads() == []
