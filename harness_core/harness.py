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
import os
from collections.abc import AsyncGenerator, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import attrs
from anyio.abc import TaskStatus
from temporalio.client import Client

from harness_core.activities import WORKER_GRACE, AgentActivities
from harness_core.agent_tokens import AgentCredential
from harness_core.agents.builtin import agent_from_config, model_loop_from_config
from harness_core.agents.modes import LLM_INPUT_MODES, TEXT_MODES
from harness_core.agents.turn import Agent, AgentFunction
from harness_core.config import Settings
from harness_core.delegation.activities import DelegationActivities
from harness_core.delegation.directory import KnownAgents
from harness_core.errors import (
    ConfigError,
    HarnessAlreadyStartedError,
    HarnessNotStartedError,
    TemporalConnectionError,
)
from harness_core.live import LiveHub
from harness_core.logs import agent_context, install_record_redaction, quiet_client_errors
from harness_core.model import Model, as_agent
from harness_core.payloads import TaskStart
from harness_core.plugins import AgentPlugins, Plugin, load_plugins
from harness_core.pool import pool
from harness_core.push.delivery import PushActivities
from harness_core.secrets import SECRETS
from harness_core.store import TaskStore
from harness_core.tasks.pace import TurnPace
from harness_core.tasks.service import TaskService
from harness_core.temporal.codec import payload_store_of
from harness_core.urls import normalize_prefix, public_url
from harness_core.worker import run_worker, sync_heartbeat_schedule

if TYPE_CHECKING:
    from starlette.requests import Request

    from harness_core.face import HarnessApp

__all__ = ["AgentState", "Harness", "ParticipantResolver", "RouteOptions"]

#: Who sends a request, from the host's own authentication (``request.state``, ``scope["user"]``).
#: Synchronous, because it runs before the request reaches the A2A routes; it may return None
#: (nobody), and an exception it raises answers the request with a 500, never a fallback.
ParticipantResolver = Callable[["Request"], "str | None"]


@attrs.frozen
class RouteOptions:
    """Which of the harness's own HTTP behaviours its app carries (the A2A routes always)."""

    #: ``[server] max_request_bytes`` (413) and ``rate_limit_per_minute`` (429). Turn off only
    #: when the host limits request size and rate itself.
    limits: bool = True
    #: CORS for ``[server] cors_origins`` (when set).
    cors: bool = True
    #: ``GET /_monitor``: the agent's state and its running tasks.
    monitor: bool = True
    #: ``/ui``: the static files of ``[server] ui_dir`` (when set).
    ui: bool = True
    #: Streams get what a turn of this process emits at once (``harness_core.live``); off, they
    #: follow the durable event log only (polled), as streams served by another process do.
    live: bool = True
    #: Delegations ask the other agent to push its updates to ``<public url>/a2a/push/<id>``
    #: (where this app receives them); off, they follow the other agent's task by polling.
    push: bool = True


log = logging.getLogger("harness")


class AgentState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class Harness(KnownAgents):
    """One durable A2A agent.

    Construction does no I/O. ``async with harness:`` (or a ``HarnessGroup``) starts it;
    ``asgi_app()`` is its HTTP face, which exists from construction and answers 503 until ready.
    ``agent`` (an object with ``async def turn(ctx)``, an async function of a turn context, or a
    ``Model``) overrides ``[model]``; ``model`` is its older name. ``client`` is a Temporal client of
    yours, never closed here.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        agent: Agent | AgentFunction | Model | None = None,
        model: Agent | AgentFunction | Model | None = None,
        client: Client | None = None,
        prefix: str | None = None,
        participant: ParticipantResolver | None = None,
        routes: RouteOptions | None = None,
        plugins: Sequence[Plugin] = (),
    ) -> None:
        self.settings = settings
        #: The agent's plugins (``[agent] plugins``, then ``plugins``), checked.
        self.plugins = load_plugins(settings, plugins)
        chosen = agent if agent is not None else model
        #: The turn agent; None when the workflow runs the LLM loop of ``[model]``.
        self.agent: Agent | None = (
            as_agent(chosen) if chosen is not None else agent_from_config(settings)
        )
        self.model_loop = (
            model_loop_from_config(settings, self.plugins) if self.agent is None else None
        )
        if self.model_loop is not None:
            self.model_loop.delegates = self._delegates
        #: The media types the agent accepts and produces (its card's modes); a message with a
        #: part of another type is refused.
        self.input_modes, self.output_modes = self._modes()
        store = payload_store_of(client.data_converter) if client is not None else None
        # The client's payload directory is the agent's, unless the agent names another.
        named = settings.temporal.payloads is not None or settings.store.blobs is not None
        if client is not None and (
            store is None or (named and store.location != settings.payloads_location)
        ):
            raise ConfigError(
                f"agent {settings.agent_id}: connect the Temporal client you pass with "
                "data_converter=harness_core.temporal.codec.data_converter_for(settings) (the "
                "runtime's payloads and its claim check over [temporal] payloads need it)"
            )
        self._client = client
        #: The live fan-out of this agent's turns to its open streams in this process.
        self.live = LiveHub()
        self._prefix = normalize_prefix(prefix)
        # A disagreeing prefix fails here, before any lifespan runs.
        public_url(settings.base_url, self._prefix)
        self.participant_resolver = participant
        self.routes = routes if routes is not None else RouteOptions()
        self.state = AgentState.STOPPED
        self.failure: str | None = None
        self._tasks: TaskService | None = None
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        #: The agents of this agent's group, by id (set by the group): delegation targets.
        self.peers: dict[str, Harness] = {self.agent_id: self}
        # What the cards of [[agents]] say (name, description, skills), once fetched.
        self._remote_cards: dict[str, str] = {}
        self._app: HarnessApp | None = None
        self._group: Any = None
        self._bound_url: str | None = None

    @property
    def agent_id(self) -> str:
        return self.settings.agent_id

    @property
    def prefix(self) -> str:
        """The path this agent is mounted under (``""`` at the root), normalized: ``/agents/a``."""
        return self._prefix

    @property
    def public_url(self) -> str:
        """Where clients reach this agent, without a trailing slash: ``[server] base_url`` with
        the prefix (see ``harness_core.urls.public_url``).

        With no ``base_url`` configured, the address the server actually bound (port 0 included).
        """
        base = self.settings.base_url
        if self.settings.server.base_url is None and self._bound_url is not None:
            base = self._bound_url
        return public_url(base, self._prefix)

    @property
    def public_url_is_a_guess(self) -> bool:
        """No ``[server] base_url`` and no server of the runtime's own told where it listens."""
        return self.settings.server.base_url is None and self._bound_url is None

    def serve_under(self, prefix: str) -> None:
        """Give an agent built without a prefix the one its group's app serves it under.

        Raises ``ConfigError`` when the agent has another prefix or its base_url disagrees.
        """
        prefix = normalize_prefix(prefix)
        if self._prefix and self._prefix != prefix:
            raise ConfigError(f"agent {self.agent_id} has prefix {self._prefix!r}, not {prefix!r}")
        public_url(self.settings.base_url, prefix)
        self._prefix = prefix

    def bound(self, host: str, port: int) -> None:
        """Record where the HTTP server listens (used for the public URL when none is set)."""
        host = f"[{host}]" if ":" in host else host
        self._bound_url = f"http://{host}:{port}"

    @property
    def client(self) -> Client:
        """The agent's Temporal client; raises ``HarnessNotStartedError`` unless it is ready.

        Under Trio it lives on the runtime's asyncio thread: call it through
        ``harness.tasks``, or from that loop."""
        return self.tasks.connection.client

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
            from harness_core.face import agent_app

            self._app = agent_app(self)
        return self._app

    def preflight(self) -> None:
        """Refuse to start, before anything is claimed or opened, for what the agent can tell
        alone: a secret its plugins declare, or the store's password, unset or empty
        (``ConfigError``)."""
        try:
            self.plugins.check_secrets(self.settings.label)
            self.settings.store_location()  # the store's password, when it has one
        except ConfigError as exc:
            self.state, self.failure = AgentState.FAILED, f"{type(exc).__name__}: {exc}"
            log.error("agent %s failed: %s", self.agent_id, self.failure)
            raise

    async def run_agent(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the agent until cancelled: lease, store, worker, heartbeat; then unwind in reverse.

        Ready once the worker polls and the heartbeat schedule matches the configuration. If starting
        fails, what started is undone in reverse, the state becomes ``failed`` and the error
        propagates. Claims are the group's job and must be held before this runs.
        """
        self.state, self.failure = AgentState.STARTING, None
        done = self._done = anyio.Event()
        install_record_redaction()
        quiet_client_errors()
        # The agent's own lines (ready, failed, its worker's) carry its id too.
        with agent_context(self.agent_id):
            await self._run(done, task_status)

    async def _run(self, done: anyio.Event, task_status: TaskStatus[None]) -> None:
        settings = self.settings
        graceful = settings.server.graceful_timeout
        try:
            # Every redactor in the process masks this agent's secrets while it runs.
            self.plugins.check_secrets(settings.label)  # as preflight, for a start without a group
            SECRETS.register(self.agent_id, _secret_values(settings, self.plugins))
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with pool.lease(settings, client=self._client) as connection:
                    store = await anyio.to_thread.run_sync(TaskStore, settings.store_location())
                    try:
                        await anyio.to_thread.run_sync(self.plugins.open, store, settings.label)
                    except BaseException:
                        store.close()
                        raise
                    pace = TurnPace()
                    self._open_workspace(store)
                    credential = self._credential()
                    pusher = PushActivities(
                        self.agent_id,
                        store,
                        allow=settings.push.allow_hosts,
                        agents=settings.push.agent_hosts,
                        timeout=settings.push.timeout,
                        credential=credential,
                    )
                    try:
                        if self.model_loop is not None:
                            # The MCP servers' tools, on the loop that will call them (their
                            # sessions are closed with the model loop, below).
                            await connection.bridge.call(self.model_loop.start_mcp)
                        activities = AgentActivities(
                            self.agent_id,
                            self.agent,
                            store,
                            self.model_loop,
                            payloads=connection.payloads,
                            ended_ttl=settings.retention.ended_ttl,
                            delegation=DelegationActivities(
                                self.agent_id,
                                self.peer_url,
                                store=store,
                                push_base=self._push_base,
                                remote=self.remote,
                                stream_for=settings.delegation.stream_for,
                                live=self.live,
                                credential=credential,
                            ),
                            push=pusher,
                            delegates=self._delegates,
                            pace=pace,
                            live=self.live,
                            plugins=self.plugins,
                        )
                        async with anyio.create_task_group() as tg:
                            queue = settings.effective_task_queue
                            await tg.start(
                                partial(
                                    run_worker,
                                    connection,
                                    queue,
                                    activities,
                                    # What is left of the grace period after the requests:
                                    # a turn still running then is handed back to Temporal.
                                    graceful_timeout=min(graceful, WORKER_GRACE),
                                )
                            )
                            await sync_heartbeat_schedule(
                                connection, self.agent_id, queue, settings.heartbeat.interval
                            )
                            tg.start_soon(self._check_remotes)
                            self._tasks = TaskService(
                                agent_id=self.agent_id,
                                queue=queue,
                                connection=connection,
                                store=store,
                                start=self._task_start(),
                                pace=pace,
                                pusher=pusher,
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
                        if self.model_loop is not None:
                            with anyio.CancelScope(shield=True):
                                await connection.bridge.call(self.model_loop.aclose)
        except BaseException as exc:
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                raise
            missing = _namespace_missing(exc, settings)
            self.state = AgentState.FAILED
            self.failure = f"{type(missing or exc).__name__}: {missing or exc}"
            log.error("agent %s failed: %s", self.agent_id, self.failure)
            if missing is not None:
                raise missing from None
            raise
        finally:
            SECRETS.unregister(self.agent_id)
            self._tasks = None
            self._scope = None
            if self.state is not AgentState.FAILED:
                self.state = AgentState.STOPPED
            done.set()

    def _open_workspace(self, store: TaskStore) -> None:
        """The LLM agent's task workspaces: a plugin's backing, else the agent's store."""
        loop = self.model_loop
        if loop is not None and loop.offers_workspace:
            from harness_core.agents.workspace import StoreWorkspace, Workspace

            loop.workspace = Workspace(self.plugins.workspace() or StoreWorkspace(store))

    def _modes(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``[agent] input_modes``/``output_modes``, else the agent's own ``input_modes`` and
        ``output_modes`` attributes, else what its kind handles."""
        config = self.settings.agent
        default_in = LLM_INPUT_MODES if self.model_loop is not None else TEXT_MODES
        declared_in = tuple(getattr(self.agent, "input_modes", ()) or ())
        declared_out = tuple(getattr(self.agent, "output_modes", ()) or ())
        inputs = config.input_modes or declared_in or default_in
        outputs = config.output_modes or declared_out or TEXT_MODES
        return tuple(str(m) for m in inputs), tuple(str(m) for m in outputs)

    def _task_start(self) -> TaskStart:
        """How this agent's tasks run (each task fills in its ids)."""
        model = self.settings.model
        return TaskStart(
            task_id="",
            context_id="",
            agent_id=self.agent_id,
            local_activity=model.local_activity,
            turn_timeout=model.turn_timeout,
            loop="llm" if self.model_loop is not None else "turn",
            max_steps=model.max_steps,
            turn_seconds=model.turn_budget,
            idle_seconds=self.settings.retention.idle_timeout,
            expired_state=f"TASK_STATE_{self.settings.retention.expired_state.upper()}",
            block_for=self.settings.delegation.block_for,
            record_in_turn=True,
        )

    def _credential(self) -> AgentCredential | None:
        """The agent's own credential for its calls to other agents: tokens signed with its card
        key (``[card] signing_key_env``), or None without one."""
        key = self.settings.card_signing_key()
        if key is None:
            return None
        auth = self.settings.auth
        return AgentCredential(
            key,
            agent_id=self.agent_id,
            url=lambda: self.public_url,
            identity_claim=auth.identity_claim,
            tenant_claim=auth.tenant_claim,
        )

    def _push_base(self) -> str | None:
        """Where other agents push this agent's delegations' updates (None: they may not)."""
        if not self.routes.push:
            return None
        return self.public_url.rstrip("/") + "/a2a/push/"

    @property
    def temporal_up(self) -> bool:
        """False while the agent's embedded dev server is dead and being started again."""
        tasks = self._tasks
        return tasks is None or tasks.connection.up

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
            raise HarnessAlreadyStartedError(
                f"agent {self.agent_id} is already running (started twice? e.g. by "
                "harnesses_lifespan and by its FastAPI router's own lifespan: use one)"
            )
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


def _namespace_missing(error: BaseException, settings: Settings) -> TemporalConnectionError | None:
    """The error for a start that failed because the Temporal service has no such namespace (the
    worker's validation or a client call says so, in Temporal's words), in ours; else None."""
    namespace = settings.temporal.namespace
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
            continue
        text = str(current)
        if f"Namespace {namespace} " in text and "not found" in text:
            address = settings.temporal.address
            return TemporalConnectionError(
                f"the namespace {namespace!r} does not exist on the Temporal service at "
                f"{address}: create it (temporal operator namespace create --namespace "
                f"{namespace} --address {address}) or set [temporal] namespace"
            )
    return None


def _secret_values(settings: Settings, plugins: AgentPlugins) -> list[str]:
    """The agent's secrets: the Temporal API key and the store's password, when configured, the values of the
    headers it sends to other agents (``[[agents]] headers``) and its plugins' secrets."""
    values: list[str] = []
    for plugin in plugins.plugins:
        values.extend(os.environ.get(name, "").strip() for name in plugin.secrets)
    values = [value for value in values if value]
    if settings.temporal.api_key_env is not None:
        key = settings.api_key()
        if key:
            values.append(key)
    password = settings.store_password()
    if password:
        values.append(password)
    for remote in settings.agents:
        for header in remote.headers:
            value = os.environ.get(header.split("=", 1)[1], "")
            if value:
                values.append(value)
    for server in settings.mcp:
        # What an MCP server is given: its headers' values and the variables passed to it.
        names = [*(h.split("=", 1)[1] for h in server.headers), *server.env]
        values.extend(v for v in (os.environ.get(n, "").strip() for n in names) if v)
    return values
