"""The Temporal bridge: the same calls under asyncio and Trio, cancellation that reaches Temporal,
AnyIO code that sees asyncio inside activities, and no thread left behind."""

from __future__ import annotations

import threading

import anyio
import anyio.lowlevel
import pytest
import sniffio
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from harness_core import Gate, Harness, HarnessGroup, ScriptedModel, TurnInput, TurnOutput
from harness_core.bridge import current_backend, open_bridge
from harness_core.converter import data_converter
from tests.conftest import agent_settings

pytestmark = pytest.mark.anyio


async def test_a_call_returns_its_result_and_raises_its_error_on_both_backends(temporal_address):
    async with open_bridge() as bridge:
        assert bridge.backend == current_backend()

        async def connect() -> Client:
            return await Client.connect(temporal_address, data_converter=data_converter)

        client = await bridge.call(connect)

        async def system_info() -> str:
            info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
            return info.server_version

        assert await bridge.call(system_info)

        async def fail() -> None:
            raise LookupError("from the Temporal loop")

        with pytest.raises(LookupError, match="from the Temporal loop"):
            await bridge.call(fail)


async def test_cancelling_the_caller_cancels_the_call_on_the_temporal_loop(temporal_address):
    async with open_bridge() as bridge:
        reached = threading.Event()
        cancelled = threading.Event()

        async def wait_forever() -> None:
            reached.set()
            try:
                await anyio.sleep_forever()
            finally:
                cancelled.set()

        with anyio.move_on_after(0.3) as scope:
            await bridge.call(wait_forever)
        assert scope.cancelled_caught
        assert reached.is_set()
        # The asyncio-side task was cancelled and finished before the caller went on.
        assert cancelled.is_set()


async def test_anyio_code_inside_the_temporal_loop_sees_asyncio(temporal_address):
    async with open_bridge() as bridge:

        async def library() -> str:
            await anyio.lowlevel.checkpoint()
            return sniffio.current_async_library()

        assert await bridge.call(library) == "asyncio"


class BackendProbe:
    """A model that reports which backend its turn ran on."""

    async def reply(self, turn: TurnInput) -> TurnOutput:
        await anyio.lowlevel.checkpoint()
        return TurnOutput(sniffio.current_async_library())


async def test_models_run_on_the_temporal_loop_and_no_thread_outlives_the_group(
    tmp_path, temporal_address, anyio_backend
):
    harness = Harness(agent_settings(tmp_path, temporal_address), model=BackendProbe())
    async with HarnessGroup(harness):
        receipt = await harness.tasks.send(
            {"messageId": "probe", "role": "ROLE_USER", "parts": [{"text": "which?"}]},
            participant=None,
            wait=True,
        )
        if anyio_backend == "trio":
            assert "harness-temporal-loop" in {t.name for t in threading.enumerate()}
    assert receipt.view.task["artifacts"][0]["parts"][0]["text"] == "asyncio"
    assert [t.name for t in threading.enumerate() if t.name.startswith("harness-")] == []


async def test_a_cancelled_blocking_send_leaves_the_task_running(tmp_path, temporal_address):
    gate = Gate()
    harness = Harness(
        agent_settings(tmp_path, temporal_address, model={"local_activity": False}),
        model=ScriptedModel(["later"], gate=gate),
    )
    async with HarnessGroup(harness):
        message = {"messageId": "held", "role": "ROLE_USER", "parts": [{"text": "wait"}]}
        with anyio.move_on_after(0.5) as scope:
            await harness.tasks.send(message, participant=None, wait=True)
        assert scope.cancelled_caught
        gate.release()
        with anyio.fail_after(20):
            done = await harness.tasks.send(message, participant=None, wait=True)
    assert done.duplicate
    assert done.view.task["status"]["state"] == "TASK_STATE_COMPLETED"
