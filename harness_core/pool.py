"""The process-wide, reference-counted Temporal pool.

Agents with the same connection share one client: embedded agents that name the same database share one
dev server; remote agents share a client per (address, namespace, sha256 of the API key). The first lease
of a connection opens it, and that lease stays its owner: when it is released while other leases still
hold the connection, it waits for them, so the resources are closed by the task that opened them (anyio
cancel scopes must be left by the task that entered them). A client passed in by the user is never closed.

Under Trio the pool also owns the single Temporal bridge thread of the process, started with the first
lease and stopped with the last.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any, Generic, TypeVar

import anyio
import attrs
from temporalio.client import Client
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

from harness_core import telemetry
from harness_core.bridge import TemporalBridge, current_backend, open_bridge
from harness_core.config import Settings
from harness_core.embedded import EmbeddedServer, open_embedded_temporal
from harness_core.errors import ConfigError, EmbeddedServerInUse, EmbeddedTemporalError
from harness_core.temporal.codec import PayloadStore, claim_check_converter, payload_store_of

__all__ = ["TemporalConnection", "TemporalPool", "pool"]

T = TypeVar("T")
_log = logging.getLogger("harness")

#: Seconds a process waits for the embedded server another process of its directory is starting
#: (that process itself gives its server 30 s).
SHARED_SERVER_WAIT = 60.0


@attrs.frozen
class TemporalConnection:
    """A leased Temporal client and the bridge every call on it must go through."""

    client: Client
    bridge: TemporalBridge
    namespace: str
    address: str
    #: The embedded dev server behind it (None for a remote service).
    server: EmbeddedServer | None = None
    #: The claim check's payload directory (None: a client passed in without it).
    payloads: PayloadStore | None = None

    @property
    def up(self) -> bool:
        """False while the embedded dev server is dead and being started again."""
        return self.server is None or self.server.up


class _Shared(Generic[T]):
    """One resource shared by leases: the first lease opens it and stays its owner.

    Later leases join it. The owner's release waits (shielded) until every joined lease has been
    released, then closes the resource in the task that opened it.
    """

    def __init__(self) -> None:
        self.value: T | None = None
        self._users = 0
        self._ready = anyio.Event()
        self._released = anyio.Event()
        self._joiners: set[anyio.CancelScope] = set()
        self._owner_failed = False

    @contextlib.asynccontextmanager
    async def own(self, opening: AbstractAsyncContextManager[T]) -> AsyncGenerator[T, None]:
        try:
            async with opening as value:
                self.value, self._users = value, 1
                self._ready.set()
                try:
                    yield value
                except BaseException as exc:
                    if not isinstance(exc, anyio.get_cancelled_exc_class()):
                        # The owner failed: the resource goes with it. Waiting for the joiners
                        # to let go by themselves would wait for ever (their group learns of
                        # this failure only once the owner has unwound): stop them now.
                        self._owner_failed = True
                        for scope in list(self._joiners):
                            scope.cancel()
                    raise
                finally:
                    self._users -= 1
                    if self._users:
                        with anyio.CancelScope(shield=True):
                            await self._released.wait()
                    self.value = None
        finally:
            self._ready.set()  # a failed opening must not leave joiners waiting

    @contextlib.asynccontextmanager
    async def join(self) -> AsyncGenerator[T, None]:
        await self._ready.wait()
        value = self.value
        if value is None:
            raise RuntimeError("the shared Temporal connection failed to open or has closed")
        self._users += 1
        scope = anyio.CancelScope()
        self._joiners.add(scope)
        try:
            with scope:
                yield value
        finally:
            self._joiners.discard(scope)
            self._users -= 1
            if self._users == 0:
                self._released.set()
        if scope.cancelled_caught and self._owner_failed:
            # Stopped, not failed: the failure is the owner's, and reaches its group from there.
            _log.warning("the agent that opened a shared Temporal connection failed: stopping")


def connection_key(settings: Settings) -> str:
    """The pool key of an agent's connection; never contains a secret."""
    if settings.temporal.mode == "embedded":
        return f"embedded:{settings.database_path}"
    key = settings.api_key() or ""
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"remote:{settings.temporal.address}|{settings.temporal.namespace}|{digest}"


class TemporalPool:
    def __init__(self) -> None:
        self._connections: dict[str, _Shared[TemporalConnection]] = {}
        self._bridge: _Shared[TemporalBridge] | None = None
        self._bridge_backend = ""

    @contextlib.asynccontextmanager
    async def _lease_bridge(self) -> AsyncGenerator[TemporalBridge, None]:
        backend = current_backend()
        if self._bridge is not None:
            if self._bridge_backend != backend:
                raise RuntimeError(
                    f"the Temporal pool is open under {self._bridge_backend}; "
                    f"it cannot serve {backend}"
                )
            async with self._bridge.join() as bridge:
                yield bridge
            return
        shared = self._bridge = _Shared[TemporalBridge]()
        self._bridge_backend = backend
        try:
            async with shared.own(open_bridge()) as bridge:
                yield bridge
        finally:
            self._bridge = None

    @contextlib.asynccontextmanager
    async def lease(
        self, settings: Settings, *, client: Client | None = None
    ) -> AsyncGenerator[TemporalConnection, None]:
        """Lease the connection ``settings`` describe (or wrap ``client``, which is never closed)."""
        async with self._lease_bridge() as bridge:
            if client is not None:
                yield TemporalConnection(
                    client=client,
                    bridge=bridge,
                    namespace=client.namespace,
                    address=str(settings.temporal.address or ""),
                    payloads=payload_store_of(client.data_converter),
                )
                return
            key = connection_key(settings)
            shared = self._connections.get(key)
            if shared is not None:
                async with shared.join() as connection:
                    if connection.namespace != settings.temporal.namespace:
                        raise ConfigError(
                            f"agent {settings.agent_id}: agents that share the embedded database "
                            f"{settings.database_path} must use one namespace "
                            f"({connection.namespace!r}, not {settings.temporal.namespace!r})"
                        )
                    # The connection's payload directory is its first agent's; another agent
                    # joins it unless it names a different one.
                    payloads = connection.payloads
                    named = (
                        settings.temporal.payloads is not None or settings.store.blobs is not None
                    )
                    if (
                        named
                        and payloads is not None
                        and payloads.location != settings.payloads_location
                    ):
                        raise ConfigError(
                            f"agent {settings.agent_id}: agents that share a Temporal connection "
                            f"must share its payloads ([temporal] payloads or [store] blobs: "
                            f"{payloads.location}, not {settings.payloads_location})"
                        )
                    yield connection
                return
            shared = self._connections[key] = _Shared[TemporalConnection]()
            try:
                async with shared.own(self._open(settings, bridge)) as connection:
                    yield connection
            finally:
                del self._connections[key]

    @staticmethod
    async def _stack_embedded(
        settings: Settings, namespace: str
    ) -> AbstractAsyncContextManager[EmbeddedServer]:
        """The embedded server, entered as far as its lock: a database another process holds
        raises ``EmbeddedServerInUse`` here, before anything starts."""
        stack = contextlib.AsyncExitStack()
        try:
            server = await stack.enter_async_context(
                open_embedded_temporal(
                    settings.database_path,
                    namespaces=(namespace,),
                    ui_port=settings.temporal.embedded.ui_port,
                )
            )
        except BaseException:
            await stack.aclose()
            raise

        @contextlib.asynccontextmanager
        async def entered() -> AsyncGenerator[EmbeddedServer, None]:
            async with stack:
                yield server

        return entered()

    @classmethod
    async def _own_or_share(
        cls,
        settings: Settings,
        bridge: TemporalBridge,
        data_converter: Any,
        payloads: PayloadStore,
    ) -> AbstractAsyncContextManager[EmbeddedServer] | TemporalConnection:
        """The embedded server to enter, or, when another process holds its database, a
        connection to the server that process runs."""
        namespace = settings.temporal.namespace
        deadline = anyio.current_time() + SHARED_SERVER_WAIT
        while True:
            try:
                return await cls._stack_embedded(settings, namespace)
            except EmbeddedServerInUse as busy:
                # Another `harness serve` of this directory runs the server: use it (its
                # address is in the database's state file) rather than refuse to start. That
                # process may have started just now, with its server not ready yet (or not
                # started: its state file names no port): wait for it as it does. Were it to
                # exit meanwhile, the lock is free and this process starts its own.
                address = await anyio.to_thread.run_sync(_shared_address, settings)
                try:
                    if address is None:
                        raise
                    client = await bridge.call(
                        partial(_connect_shared, address, namespace, data_converter)
                    )
                except EmbeddedTemporalError:
                    if anyio.current_time() >= deadline:
                        raise
                    await anyio.sleep(0.25)
                    continue
                logging.getLogger("harness.temporal").info(
                    "the embedded Temporal dev server of %s runs in process %s: this process "
                    "uses it on %s (it stops with that process)",
                    busy.database,
                    busy.owner if busy.owner is not None else "(unknown)",
                    address,
                )
                return TemporalConnection(client, bridge, namespace, address, None, payloads)

    @contextlib.asynccontextmanager
    async def _open(
        self, settings: Settings, bridge: TemporalBridge
    ) -> AsyncGenerator[TemporalConnection, None]:
        namespace = settings.temporal.namespace
        payloads = await anyio.to_thread.run_sync(PayloadStore, settings.payloads_location)
        data_converter = claim_check_converter(payloads)
        if settings.temporal.mode == "embedded":
            opened = await self._own_or_share(settings, bridge, data_converter, payloads)
            if isinstance(opened, TemporalConnection):
                yield opened
                return
            async with opened as server:

                async def connect_embedded() -> Client:
                    from harness_core.errors import EmbeddedTemporalError

                    connecting = Client.connect(
                        server.address,
                        namespace=namespace,
                        data_converter=data_converter,
                        runtime=temporal_runtime(),
                        interceptors=telemetry.client_interceptors(),
                    )
                    try:
                        return await connecting
                    except RuntimeError as exc:  # "Failed client connect: <Rust transport error>"
                        raise EmbeddedTemporalError.connect_failed(server.address, exc) from exc

                client = await bridge.call(connect_embedded)
                yield TemporalConnection(
                    client, bridge, namespace, server.address, server, payloads
                )
            return
        address = str(settings.temporal.address)
        api_key = settings.api_key()
        tls = settings.tls_enabled

        async def connect() -> Client:
            from harness_core.errors import TemporalConnectionError

            connecting = Client.connect(
                address,
                namespace=namespace,
                api_key=api_key,
                tls=tls,
                data_converter=data_converter,
                runtime=temporal_runtime(),
                interceptors=telemetry.client_interceptors(),
            )
            try:
                return await connecting
            except RuntimeError as exc:  # "Failed client connect: <Rust transport error>"
                raise TemporalConnectionError.connect_failed(address, exc) from exc

        client = await bridge.call(connect)
        yield TemporalConnection(client, bridge, namespace, address, payloads=payloads)


pool = TemporalPool()

_runtime: Runtime | None = None


def temporal_runtime() -> Runtime:
    """The process's Temporal runtime for the harness's clients, created once: its core's log
    lines (warnings and errors; Rust's own, in colour on stderr by default) go to the Python logger
    ``temporalio.core``, so they take the configured format like every other line."""
    global _runtime
    if _runtime is None:
        _runtime = Runtime(
            telemetry=TelemetryConfig(
                logging=LoggingConfig(
                    filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                    forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
                )
            )
        )
    return _runtime


def _shared_address(settings: Settings) -> str | None:
    """The loopback address of the embedded server another process runs on this agent's
    database (its state file), or None when it names none."""
    from harness_core.embedded.command import LOOPBACK
    from harness_core.embedded.database import read_state_port, sibling

    port = read_state_port(sibling(settings.database_path.resolve(), ".server.json"))
    return f"{LOOPBACK}:{port}" if port is not None else None


async def _connect_shared(address: str, namespace: str, data_converter: Any) -> Client:
    try:
        return await Client.connect(
            address,
            namespace=namespace,
            data_converter=data_converter,
            runtime=temporal_runtime(),
            interceptors=telemetry.client_interceptors(),
        )
    except RuntimeError as exc:  # "Failed client connect: <Rust transport error>"
        raise EmbeddedTemporalError.connect_failed(address, exc) from exc
