"""``HarnessGroup``: several agents in one process, as one nursery.

``run`` claims every agent's id, queue and store file (a clash raises before any connection), then
starts each agent as a child task in order and, on cancellation, stops them one by one in reverse.
``serve`` adds the HTTP server: Hypercorn on the configured bind until cancelled or until SIGINT or
SIGTERM, which stop accepting, let in-flight requests finish within the grace period, then stop the
agents.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup, TaskStatus

from harness_core.claims import claims
from harness_core.config import split_host_port
from harness_core.errors import (
    ConfigError,
    HarnessAlreadyStartedError,
    HarnessConflictError,
    HarnessError,
    HarnessStoppedError,
)
from harness_core.harness import Harness

if TYPE_CHECKING:
    from starlette.types import ASGIApp

__all__ = ["HarnessGroup", "harnesses_lifespan"]

log = logging.getLogger("harness")


class HarnessGroup:
    """Several agents run together; a group of one behaves exactly like the agent alone.

    Entry points: ``async with group``, ``await task_group.start(group.run)``,
    ``anyio.run(group.serve)`` (add ``backend="trio"`` for Trio) and ``group.lifespan``.
    """

    def __init__(self, *harnesses: Harness, bind: str | None = None) -> None:
        if not harnesses:
            raise HarnessError("a HarnessGroup needs at least one Harness")
        ids = [h.agent_id for h in harnesses]
        for agent_id in ids:
            if ids.count(agent_id) > 1:
                raise HarnessConflictError(
                    f"agent id {agent_id!r} appears twice in this group "
                    "(agents in one process need their own id)"
                )
        if bind is not None:
            try:
                split_host_port(bind)
            except ValueError as exc:
                raise ConfigError(f"bind {bind!r}: {exc}") from None
        self.harnesses = harnesses
        # Every agent of the group reaches the others by id (delegation).
        peers = {h.agent_id: h for h in harnesses}
        for h in harnesses:
            h.peers = peers
            _check_chosen_agents(h, peers)
        self.bind = bind or harnesses[0].settings.server.bind
        self._running = False
        self._ran = False
        self._stack: contextlib.AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._app: ASGIApp | None = None

    def harness(self, agent_id: str) -> Harness:
        for h in self.harnesses:
            if h.agent_id == agent_id:
                return h
        raise KeyError(agent_id)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run every agent until cancelled. Ready once every agent is ready.

        If an agent fails to start, the agents already started are stopped in reverse and the error
        propagates. On cancellation the agents stop in reverse order, each fully before the next.
        """
        if self._running:
            raise HarnessAlreadyStartedError("this HarnessGroup is already running")
        if self._ran:
            raise HarnessStoppedError(
                "this HarnessGroup has stopped; create a new one to run again"
            )
        self._running = self._ran = True
        try:
            # What each agent can tell without starting anything (its plugins' secrets).
            for h in self.harnesses:
                h.preflight()
            with contextlib.ExitStack() as held:
                for h in self.harnesses:
                    held.enter_context(
                        claims.hold(h.settings, f"the harness of agent {h.agent_id!r}")
                    )
                async with anyio.create_task_group() as tg:
                    try:
                        await self._start_all(tg)
                        task_status.started()
                        await anyio.sleep_forever()
                    finally:
                        with anyio.CancelScope(shield=True):
                            for h in reversed(self.harnesses):
                                await h.stop_agent()
        finally:
            self._running = False

    async def _start_all(self, tg: TaskGroup) -> None:
        """Start the first agent, which opens what the agents share (the embedded dev server, the
        connection) and so owns it, then every other agent at once (each waits on its own lease,
        worker and schedule, not on the others); return when all are ready. The first failure
        stops the starting and is raised as it was."""
        first, *rest = self.harnesses
        await tg.start(first.run_agent)
        failure: list[BaseException] = []
        async with anyio.create_task_group() as starting:
            for h in rest:

                async def start(h: Harness = h) -> None:
                    try:
                        await tg.start(h.run_agent)
                    except Exception as exc:
                        if not failure:
                            failure.append(exc)
                        starting.cancel_scope.cancel()

                starting.start_soon(start)
        if failure:
            raise failure[0]

    async def __aenter__(self) -> HarnessGroup:
        stack = contextlib.AsyncExitStack()
        tg = await stack.enter_async_context(anyio.create_task_group())
        try:
            await tg.start(self.run)
        except BaseException:
            await stack.aclose()
            raise
        self._stack, self._tg = stack, tg
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, tg = self._stack, self._tg
        self._stack = self._tg = None
        if stack is None or tg is None:
            return
        tg.cancel_scope.cancel()
        await stack.aclose()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncGenerator[None, None]:
        """A Starlette/FastAPI lifespan that runs the group while the host app runs."""
        async with self:
            yield

    def asgi_app(self) -> ASGIApp:
        """The group's HTTP face: a lone agent without a prefix is served at the root; otherwise
        each agent under its prefix, or ``/agents/<id>`` when it has none.

        (Several agents as tenants of one endpoint come with a later release.)
        """
        if len(self.harnesses) == 1 and not self.harnesses[0].prefix:
            return self.harnesses[0].asgi_app()
        if self._app is None:
            from harness_core.face import group_app

            self._app = group_app(self)
        return self._app

    async def serve(
        self, *, task_status: TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Start the agents, then serve HTTP with Hypercorn on ``bind`` until cancelled or signalled.

        Ready (``task_status.started((host, port))``) once the socket listens. SIGINT and SIGTERM
        (when called from the main thread) stop accepting connections, let in-flight requests finish
        within ``[server] graceful_timeout``, then stop the agents in reverse; ``serve`` returns.
        """
        from harness_core.face import serve_group

        await serve_group(self, task_status=task_status)


def harnesses_lifespan(
    *harnesses: Harness,
) -> Callable[[object], contextlib.AbstractAsyncContextManager[None]]:
    """One Starlette/FastAPI lifespan that starts every harness in order and stops them in
    reverse: ``Starlette(routes=[Mount(...), ...], lifespan=harnesses_lifespan(a, b))``.

    The same as ``HarnessGroup(*harnesses).lifespan``, with the group's claims and checks."""
    return HarnessGroup(*harnesses).lifespan


def _check_chosen_agents(harness: Harness, peers: dict[str, Harness]) -> None:
    """Each agent named in ``[model] agents`` is one of the group's others or in ``[[agents]]``."""
    settings = harness.settings
    known = [a for a in peers if a != harness.agent_id] + [r.id for r in settings.agents]
    for index, agent_id in enumerate(settings.model.agents or ()):
        if agent_id not in known:
            label = settings.label
            allowed = ", ".join(repr(a) for a in known) or "none: it runs alone, with no [[agents]]"
            raise ConfigError(
                f"{label}: 'model.agents[{index}]' is {agent_id!r}: not an agent it can ask "
                f"(the other agents of its group and of [[agents]]: {allowed})"
            )
