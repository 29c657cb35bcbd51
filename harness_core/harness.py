"""One agent: its settings, its model, its lifecycle, and its states.

An agent's life is one child task of its group (``Harness.run_agent``): a pool lease, inside it the
store, the worker and the heartbeat schedule, nested so that cancellation unwinds them in reverse (the
worker stops before the lease closes the client or the embedded dev server). The HTTP layer only reads
``state`` and uses ``tasks`` once the agent is ready.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import AsyncGenerator
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus
from temporalio.client import Client

from harness_core.activities import AgentActivities
from harness_core.config import Settings
from harness_core.errors import HarnessAlreadyStartedError, HarnessNotStartedError
from harness_core.model import Model, model_from_config
from harness_core.pool import pool
from harness_core.store import TaskStore
from harness_core.tasks import TaskService
from harness_core.worker import run_worker, sync_heartbeat_schedule

if TYPE_CHECKING:
    from harness_asgi.app import HarnessApp

__all__ = ["AgentState", "Harness"]

log = logging.getLogger("harness")


class AgentState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class Harness:
    """One durable A2A agent.

    Construction does no I/O. ``async with harness:`` (or a ``HarnessGroup``) starts it;
    ``asgi_app()`` is its HTTP face, which exists from construction and answers 503 until ready.
    ``model`` overrides ``[model]``; ``client`` is a Temporal client of yours, never closed here.
    """

    def __init__(
        self, settings: Settings, *, model: Model | None = None, client: Client | None = None
    ) -> None:
        self.settings = settings
        self.model: Model = model if model is not None else model_from_config(settings.model)
        self._client = client
        self.state = AgentState.STOPPED
        self.failure: str | None = None
        self._tasks: TaskService | None = None
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        self._app: HarnessApp | None = None
        self._group: Any = None
        self._bound_url: str | None = None
        self._mount_path = ""

    @property
    def agent_id(self) -> str:
        return self.settings.agent_id

    @property
    def public_url(self) -> str:
        """Where clients reach this agent: ``[server] base_url`` without a trailing slash.

        With no ``base_url`` configured, the address the server actually bound (port 0 included).
        """
        base = self.settings.base_url
        if self.settings.server.base_url is None and self._bound_url is not None:
            base = self._bound_url
        return base + self._mount_path

    def mounted_at(self, path: str) -> None:
        """Record the path the group's app serves this agent under (part of its public URL)."""
        self._mount_path = "/" + path.strip("/") if path.strip("/") else ""

    def bound(self, host: str, port: int) -> None:
        """Record where the HTTP server listens (used for the public URL when none is set)."""
        host = f"[{host}]" if ":" in host else host
        self._bound_url = f"http://{host}:{port}"

    @property
    def ready(self) -> bool:
        return self.state is AgentState.READY

    @property
    def tasks(self) -> TaskService:
        """The agent's tasks; raises ``HarnessNotStartedError`` unless the agent is ready."""
        if self._tasks is None or self.state is not AgentState.READY:
            raise HarnessNotStartedError(f"agent {self.agent_id} is not started")
        return self._tasks

    def asgi_app(self) -> HarnessApp:
        """This agent's ASGI app (the same object on every call)."""
        if self._app is None:
            from harness_asgi.app import HarnessApp

            self._app = HarnessApp(self)
        return self._app

    async def run_agent(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the agent until cancelled: lease, store, worker, heartbeat; then unwind in reverse.

        Ready once the worker polls and the heartbeat schedule matches the configuration. If starting
        fails, what started is undone in reverse, the state becomes ``failed`` and the error
        propagates. Claims are the group's job and must be held before this runs.
        """
        settings = self.settings
        self.state, self.failure = AgentState.STARTING, None
        self._done = anyio.Event()
        graceful = settings.server.graceful_timeout
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with pool.lease(settings, client=self._client) as connection:
                    store = await anyio.to_thread.run_sync(TaskStore, settings.store_path)
                    try:
                        activities = AgentActivities(self.agent_id, self.model, store)
                        async with anyio.create_task_group() as tg:
                            queue = settings.effective_task_queue
                            await tg.start(
                                partial(
                                    run_worker,
                                    connection,
                                    queue,
                                    activities,
                                    graceful_timeout=graceful,
                                )
                            )
                            await sync_heartbeat_schedule(
                                connection, self.agent_id, queue, settings.heartbeat.interval
                            )
                            self._tasks = TaskService(
                                agent_id=self.agent_id,
                                queue=queue,
                                connection=connection,
                                store=store,
                                local_activity=settings.model.local_activity,
                                turn_timeout=settings.model.turn_timeout,
                            )
                            self.state = AgentState.READY
                            log.info("agent %s ready on task queue %s", self.agent_id, queue)
                            task_status.started()
                            try:
                                await anyio.sleep_forever()
                            finally:
                                self.state = AgentState.STOPPING
                                self._tasks = None
                                tg.cancel_scope.cancel()
                    finally:
                        store.close()
        except BaseException as exc:
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                self.state = AgentState.FAILED
                self.failure = f"{type(exc).__name__}: {exc}"
                log.error("agent %s failed: %s", self.agent_id, self.failure)
            raise
        finally:
            self._tasks = None
            self._scope = None
            if self.state is not AgentState.FAILED:
                self.state = AgentState.STOPPED
            self._done.set()

    async def stop_agent(self) -> None:
        """Cancel the running agent and wait until it has unwound."""
        if self._scope is not None:
            self._scope.cancel()
        if self._done is not None:
            await self._done.wait()

    # -- a group of one ---------------------------------------------------------------------------

    async def __aenter__(self) -> Harness:
        from harness_core.group import HarnessGroup

        if self._group is not None or self.state in (AgentState.STARTING, AgentState.READY):
            raise HarnessAlreadyStartedError(f"agent {self.agent_id} is already running")
        group = HarnessGroup(self)
        await group.__aenter__()
        self._group = group
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        group, self._group = self._group, None
        if group is not None:
            await group.__aexit__(*exc_info)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncGenerator[None, None]:
        """A Starlette/FastAPI lifespan that runs this agent while the host app runs."""
        async with self:
            yield
