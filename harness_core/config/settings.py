"""``Settings``: everything one agent needs, and the values derived from it.

Values derived from the file (task queue, absolute store, database and payload paths, base URL,
the bind address, the API keys read from the environment) are properties of :class:`Settings`,
so every consumer derives them the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from harness_core.config.sections import (
    AgentConfig,
    AuthConfig,
    CardConfig,
    DelegationConfig,
    HeartbeatConfig,
    McpServerConfig,
    ModelConfig,
    PushConfig,
    RemoteAgentConfig,
    RetentionConfig,
    ServerConfig,
    StoreConfig,
    TemporalConfig,
)
from harness_core.config.values import split_host_port
from harness_core.config.wording import NO_FILE, bad_value
from harness_core.errors import ConfigError
from harness_core.store.connection import PostgresLocation

__all__ = ["Settings"]


@attrs.frozen
class Settings:
    """Everything one agent needs, with the values derived from it as properties."""

    agent: AgentConfig = attrs.field(factory=AgentConfig)
    temporal: TemporalConfig = attrs.field(factory=TemporalConfig)
    server: ServerConfig = attrs.field(factory=ServerConfig)
    store: StoreConfig = attrs.field(factory=StoreConfig)
    heartbeat: HeartbeatConfig = attrs.field(factory=HeartbeatConfig)
    model: ModelConfig = attrs.field(factory=ModelConfig)
    retention: RetentionConfig = attrs.field(factory=RetentionConfig)
    push: PushConfig = attrs.field(factory=PushConfig)
    delegation: DelegationConfig = attrs.field(factory=DelegationConfig)
    card: CardConfig = attrs.field(factory=CardConfig)
    auth: AuthConfig = attrs.field(factory=AuthConfig)
    agents: tuple[RemoteAgentConfig, ...] = ()
    mcp: tuple[McpServerConfig, ...] = ()
    #: ``[plugins.<key>]``: each plugin's options, by its key (what the plugin reads is its own).
    plugins: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict[str, Mapping[str, Any]])
    # Set by the loader, never read from TOML.
    source: Path | None = None
    base_dir: Path = attrs.field(default=Path("."))
    #: The file as the user named it (what error messages say); the resolved path otherwise.
    given: str | None = None

    @property
    def agent_id(self) -> str:
        """The agent's id."""
        return self.agent.id

    @property
    def agent_name(self) -> str:
        """The name on the agent card: ``agent.name``, else the id."""
        return self.agent.name if self.agent.name is not None else self.agent.id

    @property
    def effective_task_queue(self) -> str:
        """The Temporal task queue: ``temporal.task_queue``, else the agent id."""
        return self.temporal.task_queue if self.temporal.task_queue is not None else self.agent.id

    @property
    def store_path(self) -> Path:
        """The absolute store file: ``store.path``, else ``.harness/<id>.sqlite3``."""
        configured = self.store.path
        if configured is None:
            configured = Path(".harness") / f"{self.agent.id}.sqlite3"
        return self._absolute(configured)

    @property
    def database_path(self) -> Path:
        """The absolute embedded Temporal database, by default beside the store."""
        configured = self.temporal.embedded.database_path
        if configured is None:
            return self.store_path.parent / "temporal.sqlite3"
        return self._absolute(configured)

    @property
    def ui_path(self) -> Path | None:
        """The absolute ``server.ui_dir``, or None when no UI is configured."""
        return None if self.server.ui_dir is None else self._absolute(self.server.ui_dir)

    @property
    def tls_enabled(self) -> bool:
        """Whether to reach a remote Temporal over TLS: ``temporal.tls``, else with an API key."""
        if self.temporal.tls is not None:
            return self.temporal.tls
        return self.temporal.api_key_env is not None

    @property
    def base_url(self) -> str:
        """The public URL without a trailing slash: ``server.base_url``, else ``http://<bind>``."""
        if self.server.base_url is not None:
            return self.server.base_url.rstrip("/")
        return f"http://{self.server.bind}"

    @property
    def bind_host(self) -> str:
        """The host to listen on, without IPv6 brackets."""
        return self._bind()[0]

    @property
    def bind_port(self) -> int:
        """The port to listen on (0 lets the system choose)."""
        return self._bind()[1]

    def api_key(self) -> str | None:
        """Read the Temporal API key from the variable ``temporal.api_key_env`` names.

        Returns None when no variable is configured. Raises :class:`ConfigError` naming the
        variable, never a value, when it is unset or empty.
        """
        return self._secret(self.temporal.api_key_env, "Temporal API key", "temporal.api_key_env")

    def model_api_key(self) -> str | None:
        """Read the model server's API key from the variable ``model.api_key_env`` names (None
        when no variable is configured); the error names the variable, never a value."""
        return self._secret(self.model.api_key_env, "model server's API key", "model.api_key_env")

    def card_signing_key(self) -> str | None:
        """Read the card's signing key (a private JWK, as JSON text) from the variable
        ``card.signing_key_env`` names (None when no variable is configured); the error names the
        variable, never a value. ``harness_asgi.signing`` checks what the text holds."""
        return self._secret(
            self.card.signing_key_env,
            "card signing key, a private Ed25519 JWK",
            "card.signing_key_env",
        )

    @property
    def store_schema(self) -> str:
        """The PostgreSQL schema of the agent's tables: ``store.schema``, else the agent id."""
        return self.store.schema if self.store.schema is not None else self.agent.id

    def store_password(self) -> str | None:
        """Read the PostgreSQL password from the variable ``store.password_env`` names (None when
        no variable is configured); the error names the variable, never a value."""
        return self._secret(self.store.password_env, "PostgreSQL password", "store.password_env")

    def store_location(self) -> Path | PostgresLocation:
        """Where the store is: the SQLite file, or the PostgreSQL database and schema of
        ``store.url`` with its password (:meth:`store_password`)."""
        if self.store.url is None:
            return self.store_path
        return PostgresLocation(
            url=self.store.url,
            schema=self.store_schema,
            password=self.store_password(),
            pool_size=self.store.pool_size,
        )

    def _secret(self, name: str | None, what: str, key: str) -> str | None:
        if name is None:
            return None
        value = os.environ.get(name)
        if value is None or not value.strip():
            state = "not set" if value is None else "empty"
            raise ConfigError(
                f"{self.label}: environment variable {name} is {state}; it must hold the "
                f"{what} ({key} names it)"
            )
        # A trailing newline from `$(cat keyfile)` would otherwise end up in the auth header.
        return value.strip()

    @property
    def payloads_path(self) -> Path:
        """The absolute claim-check directory: ``temporal.payloads``, else beside the embedded
        database (``<database without suffix>-payloads``), or ``temporal-payloads`` beside the
        store when remote."""
        if self.temporal.payloads is not None:
            return self._absolute(self.temporal.payloads)
        if self.temporal.mode == "embedded":
            database = self.database_path
            return database.with_name(f"{database.stem}-payloads")
        return self.store_path.parent / "temporal-payloads"

    @property
    def payloads_location(self) -> Path | str:
        """Where the claim check keeps payloads: the object store of ``store.blobs`` (its URL),
        else the directory :attr:`payloads_path`."""
        return self.store.blobs if self.store.blobs is not None else self.payloads_path

    @property
    def label(self) -> str:
        """What errors about these settings name: the file, or ``<settings>`` without one."""
        if self.given is not None:
            return self.given
        return str(self.source) if self.source is not None else NO_FILE

    def _absolute(self, path: Path) -> Path:
        # abspath rather than resolve(): normalise "..", but keep symlinks the user chose.
        return Path(os.path.abspath(self.base_dir / path.expanduser()))

    def _bind(self) -> tuple[str, int]:
        try:
            return split_host_port(self.server.bind)
        except ValueError as exc:
            raise bad_value(self.label, "server.bind", self.server.bind, str(exc)) from None
