"""An [[agents]] card that cannot be fetched at start is a warning only once it has failed for a
while (``REMOTE_GRACE``): at start the other agent may be served by the same HTTP server, which
listens only once every agent has started."""

from __future__ import annotations

import logging

import anyio
import pytest

from harness_core.delegation import directory
from tests.conftest import free_port, serving

pytestmark = pytest.mark.anyio


async def test_a_card_that_cannot_be_fetched_is_one_warning_after_the_grace(
    make_harness, caplog, monkeypatch
):
    monkeypatch.setattr(directory, "REMOTE_GRACE", 1.0)
    caplog.set_level(logging.DEBUG, logger="harness")
    closed = f"http://127.0.0.1:{free_port()}/agents/far"  # nothing listens there
    harness = make_harness(agents=[{"id": "far", "url": closed}])

    def warnings() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING and "remote agent far" in r.getMessage()
        ]

    def tries() -> int:
        return len([r for r in caplog.records if "remote agent far" in r.getMessage()])

    async with serving(harness):
        with anyio.fail_after(20):
            while tries() < 1:
                await anyio.sleep(0.02)
        early = warnings()  # the first failure, within the grace: DEBUG only
        with anyio.fail_after(20):
            while not warnings():
                await anyio.sleep(0.05)
        await anyio.sleep(1.5)  # later failures stay at DEBUG
    assert early == []
    [warning] = warnings()
    assert "its card could not be fetched" in warning
    assert tries() >= 3
