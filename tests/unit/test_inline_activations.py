"""The worker runs workflow activations on its own event loop (``InlineActivations``): each one is
the loop's next callback, on the loop's thread, and the loop is the thread's running loop again
afterwards (an activation sets the workflow's own loop and clears it when done)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from harness_core.bridge import InlineActivations


def test_an_activation_runs_on_the_loop_thread_and_the_loop_stays_the_running_one() -> None:
    seen: list[object] = []

    def activation(value: int) -> int:
        seen.append(threading.current_thread())
        asyncio.events._set_running_loop(None)  # pyright: ignore[reportPrivateUsage] - as temporalio's activate does
        return value * 2

    async def main() -> None:
        loop = asyncio.get_running_loop()
        executor = InlineActivations()
        result = await loop.run_in_executor(executor, activation, 21)
        assert result == 42
        assert asyncio.get_running_loop() is loop
        with pytest.raises(ZeroDivisionError):
            await loop.run_in_executor(executor, lambda: 1 / 0)
        assert asyncio.get_running_loop() is loop
        executor.shutdown()

    asyncio.run(main())
    assert seen == [threading.main_thread()]
