"""The core's one door to its HTTP face (``harness_asgi``), opened only when a host asks for it.

``harness_core`` imports nothing of ``harness_asgi`` anywhere else: the core (agents, tasks,
Temporal) knows nothing of HTTP, and a process that only runs workers imports no Starlette or
Hypercorn code. The three ways in (an agent's ASGI app, a group's, and serving a group with
Hypercorn) import the face here, lazily, at the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from harness_asgi.app import HarnessApp
    from harness_core.group import HarnessGroup
    from harness_core.harness import Harness

__all__ = ["agent_app", "group_app", "serve_group"]


def agent_app(harness: Harness) -> HarnessApp:
    """``Harness.asgi_app()``: the agent's A2A routes under its prefix."""
    from harness_asgi.app import HarnessApp

    return HarnessApp(harness)


def group_app(group: HarnessGroup) -> ASGIApp:
    """``HarnessGroup.asgi_app()`` for several agents: each under its prefix."""
    from harness_asgi.app import group_app

    return group_app(group)


async def serve_group(
    group: HarnessGroup, *, task_status: TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED
) -> None:
    """``HarnessGroup.serve()``: the agents, then Hypercorn, until cancelled or signalled."""
    from harness_asgi.serve import serve_group

    await serve_group(group, task_status=task_status)
