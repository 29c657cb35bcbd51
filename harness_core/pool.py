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
from collections.abc import AsyncGenerator

import anyio
import attrs
from temporalio.client import Client

from harness_core.bridge import TemporalBridge, current_backend, open_bridge
from harness_core.config import Settings
from harness_core.converter import data_converter
from harness_core.embedded import open_embedded_temporal
from harness_core.errors import ConfigError

__all__ = ["TemporalConnection", "TemporalPool", "pool"]


@attrs.frozen
class TemporalConnection:
    """A leased Temporal client and the bridge every call on it must go through."""

    client: Client
    bridge: TemporalBridge
    namespace: str
    address: str


@attrs.define
class _Entry:
    connection: TemporalConnection | None = None
    users: int = 0
    ready: anyio.Event = attrs.field(factory=anyio.Event)
    released: anyio.Event = attrs.field(factory=anyio.Event)
    failed: bool = False


def connection_key(settings: Settings) -> str:
    """The pool key of an agent's connection; never contains a secret."""
    if settings.temporal.mode == "embedded":
        return f"embedded:{settings.database_path}"
    key = settings.api_key() or ""
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"remote:{settings.temporal.address}|{settings.temporal.namespace}|{digest}"


class TemporalPool:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._bridge: TemporalBridge | None = None
        self._bridge_backend = ""
        self._bridge_users = 0
        self._bridge_released: anyio.Event | None = None

    @contextlib.asynccontextmanager
    async def _lease_bridge(self) -> AsyncGenerator[TemporalBridge, None]:
        backend = current_backend()
        if self._bridge is not None and self._bridge_backend == backend:
            self._bridge_users += 1
            try:
                yield self._bridge
            finally:
                self._bridge_users -= 1
                if self._bridge_users == 0 and self._bridge_released is not None:
                    self._bridge_released.set()
            return
        if self._bridge is not None:
            raise RuntimeError(
                f"the Temporal pool is open under {self._bridge_backend}; it cannot serve {backend}"
            )
        async with open_bridge() as bridge:
            self._bridge, self._bridge_backend = bridge, backend
            self._bridge_users, self._bridge_released = 1, anyio.Event()
            try:
                yield bridge
            finally:
                self._bridge_users -= 1
                if self._bridge_users:
                    with anyio.CancelScope(shield=True):
                        await self._bridge_released.wait()
                self._bridge, self._bridge_released = None, None

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
                )
                return
            key = connection_key(settings)
            entry = self._entries.get(key)
            if entry is not None:
                await entry.ready.wait()
                if entry.connection is None:
                    raise RuntimeError("the shared Temporal connection failed to open")
                if entry.connection.namespace != settings.temporal.namespace:
                    raise ConfigError(
                        f"agent {settings.agent_id}: agents that share the embedded database "
                        f"{settings.database_path} must use one namespace "
                        f"({entry.connection.namespace!r}, not {settings.temporal.namespace!r})"
                    )
                entry.users += 1
                try:
                    yield entry.connection
                finally:
                    entry.users -= 1
                    if entry.users == 0:
                        entry.released.set()
                return
            entry = _Entry(users=1)
            self._entries[key] = entry
            try:
                async with self._open(settings, bridge) as connection:
                    entry.connection = connection
                    entry.ready.set()
                    try:
                        yield connection
                    finally:
                        entry.users -= 1
                        if entry.users:
                            with anyio.CancelScope(shield=True):
                                await entry.released.wait()
            finally:
                entry.ready.set()
                del self._entries[key]

    @contextlib.asynccontextmanager
    async def _open(
        self, settings: Settings, bridge: TemporalBridge
    ) -> AsyncGenerator[TemporalConnection, None]:
        namespace = settings.temporal.namespace
        if settings.temporal.mode == "embedded":
            async with open_embedded_temporal(
                settings.database_path, namespaces=(namespace,)
            ) as server:

                async def connect_embedded() -> Client:
                    return await Client.connect(
                        server.address, namespace=namespace, data_converter=data_converter
                    )

                client = await bridge.call(connect_embedded)
                yield TemporalConnection(client, bridge, namespace, server.address)
            return
        address = str(settings.temporal.address)
        api_key = settings.api_key()
        tls = settings.tls_enabled

        async def connect() -> Client:
            return await Client.connect(
                address,
                namespace=namespace,
                api_key=api_key,
                tls=tls,
                data_converter=data_converter,
            )

        client = await bridge.call(connect)
        yield TemporalConnection(client, bridge, namespace, address)


pool = TemporalPool()
