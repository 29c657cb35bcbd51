"""Agent configuration: one TOML file per agent, loaded into frozen attrs classes.

The TOML file is the runtime's only hand-written input, so this module is strict about it: every
mistake (an unknown key, a value of the wrong type or out of range, a secret written into the
file) raises :class:`~harness_core.errors.ConfigError` with one line that names the file, the
dotted key and what is allowed. Values derived from the file (task queue, absolute store and
database paths, base URL) are properties of :class:`Settings`, so every consumer derives them the
same way.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import attrs
import cattrs

from harness_core.errors import ConfigError

__all__ = [
    "AgentConfig",
    "EmbeddedConfig",
    "HeartbeatConfig",
    "ModelConfig",
    "ServerConfig",
    "Settings",
    "StoreConfig",
    "TemporalConfig",
    "load_settings",
    "parse_duration",
    "settings_from_mapping",
    "split_host_port",
]

_AGENT_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
# Only a name is accepted here; anything else is likely the key itself pasted in by mistake.
_ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
_DURATION_PATTERN = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(ms|s|m|h|d)\s*")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MEDIA_TYPE_PATTERN = r"(\*/\*|[a-z0-9][a-z0-9.+-]*/(\*|[a-z0-9][a-z0-9.+-]*))"
_IMPORT_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
_IMPORT_HINT = 'must be "package.module:name", e.g. "my_pkg.tools:lookup_order"'
_DURATION_HINT = 'a duration (seconds or a string like "30s")'
_NO_FILE = "<settings>"
_SHOW_LIMIT = 60
#: The longest ``[delegation] stream_for``: a stand-in hears a cancel only once its send returns.
MAX_STREAM_FOR = 10.0
_MIN_REQUEST_BYTES = 1024
_TOML_KINDS: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    list: "list",
}


@attrs.frozen
class AgentConfig:
    """``[agent]``: who this agent is."""

    id: str = "harness"
    name: str | None = None  # the card name; None means the id
    description: str | None = None
    # Media types the agent accepts and produces ("image/png", "image/*"); () means its own
    # declaration, else what its kind handles (text/plain for echo, scripted and custom agents).
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()


@attrs.frozen
class EmbeddedConfig:
    """``[temporal.embedded]``: the Temporal dev server the runtime starts itself."""

    database_path: Path | None = None  # None means temporal.sqlite3 beside the store


@attrs.frozen
class TemporalConfig:
    """``[temporal]``: which Temporal service to use and how to reach it."""

    mode: Literal["embedded", "remote"] = "embedded"
    address: str | None = None  # remote only, "host:port"
    namespace: str = "default"
    task_queue: str | None = None  # None means the agent id
    api_key_env: str | None = None  # remote only: the NAME of the variable holding the key
    tls: bool | None = None  # remote only; None means on exactly when an API key is configured
    # The claim check's directory: payloads over 16 KiB (files, long replies, tool results) are
    # kept there by digest and travel through Temporal as references. Every process that uses
    # the same Temporal connection must share it. None means beside the embedded database
    # (<database>-payloads/), or .harness/temporal-payloads/ beside the store when remote (in a
    # process, agents on one connection use its first agent's).
    payloads: Path | None = None
    embedded: EmbeddedConfig = attrs.field(factory=EmbeddedConfig)


@attrs.frozen
class ServerConfig:
    """``[server]``: the HTTP endpoint that serves the agent."""

    bind: str = "127.0.0.1:8000"  # "HOST:PORT", IPv6 as "[::1]:8000"
    base_url: str | None = None  # the public URL; None means "http://<bind>"
    graceful_timeout: float = 5.0  # seconds in-flight work gets on shutdown
    max_request_bytes: int = 1_048_576  # the largest request body accepted, at least 1024
    rate_limit_per_minute: int = 0  # requests a minute per client address; 0 means no limit
    cors_origins: tuple[str, ...] = ()  # "*" or origins like "https://app.example.com"
    ui_dir: Path | None = None  # static files served at <public URL>/ui; an existing directory


@attrs.frozen
class StoreConfig:
    """``[store]``: where the agent keeps its own state."""

    path: Path | None = None  # None means .harness/<agent id>.sqlite3


@attrs.frozen
class HeartbeatConfig:
    """``[heartbeat]``: how often the agent reports that it is alive."""

    interval: float = 60.0  # seconds, at least 1


@attrs.frozen
class RemoteAgentConfig:
    """``[[agents]]``: another agent this one may delegate to, served elsewhere."""

    id: str  # the id turns use to name it (Delegation(to=id))
    url: str  # its A2A base URL (where its card is, under /.well-known/agent-card.json)
    tenant: str | None = None  # the tenant to send as, if its endpoint serves several
    # stream: read on the send's stream for [delegation] stream_for, then as push (or follow)
    # would; push: it pushes to us from the start (if its card offers it); follow: we read.
    updates: Literal["stream", "push", "follow"] = "stream"
    # Headers to send, by name; each value is the NAME of an environment variable holding it.
    headers: tuple[str, ...] = ()


@attrs.frozen
class DelegationConfig:
    """``[delegation]``: how this agent's delegations follow the other agents' answers."""

    # A delegation reads the answer on its send's own stream (SendStreamingMessage) for this
    # long; a task still running then is followed by pushes, or by reading it. 0: from the start.
    stream_for: float = 2.0


@attrs.frozen
class PushConfig:
    """``[push]``: push notifications (webhooks) to A2A clients."""

    enabled: bool = True  # the card declares pushNotifications; the four config methods work
    # Webhook hosts allowed although they are loopback or private (SSRF guard): host names, IP
    # addresses or networks ("127.0.0.1", "localhost", "10.0.0.0/8").
    allow_hosts: tuple[str, ...] = ()
    timeout: float = 10.0  # seconds one webhook call may take


@attrs.frozen
class RetentionConfig:
    """``[retention]``: how long tasks, their records and streams may last."""

    # A task waiting for input (or auth) that gets no message for this long ends; 0 means never.
    idle_timeout: float = 7 * 86400.0
    expired_state: Literal["canceled", "failed"] = "canceled"  # how an expired task ends
    # Ended tasks (record, messages, events) and blobs nothing refers to any more are removed by
    # the heartbeat this long after they ended; 0 means they are kept.
    ended_ttl: float = 30 * 86400.0
    max_streams: int = 1000  # open streams (SSE) of the agent in this process; past it: 503


@attrs.frozen
class ModelConfig:
    """``[model]``: what answers each turn: a built-in agent, a model server, or Python code."""

    kind: Literal["echo", "scripted", "tck", "openai", "anthropic", "python"] = "echo"
    name: str | None = None  # openai/anthropic: the provider's model name
    base_url: str | None = None  # openai/anthropic: another server (Ollama, vLLM, a proxy)
    api_key_env: str | None = None  # openai/anthropic: the NAME of the variable holding the key
    system: str | None = None  # openai/anthropic: the system prompt
    tools: tuple[str, ...] = ()  # openai/anthropic: "package.module:function" async tools
    factory: str | None = None  # python: "package.module:callable" returning the agent
    replies: tuple[str, ...] = ()  # scripted: in order, then the last repeats; empty echoes
    delay: float = 0.0  # seconds each turn waits before answering
    local_activity: bool = True  # a local activity skips a task-queue round trip per turn
    turn_timeout: float = 60.0  # seconds one attempt of a turn (or a model request) may take
    max_steps: int = 20  # openai/anthropic: model requests per turn before it must answer
    turn_budget: float = 600.0  # openai/anthropic: seconds of wall clock per turn

    @property
    def is_llm(self) -> bool:
        """The workflow runs the model loop (a model server), not one activity per turn."""
        return self.kind in ("openai", "anthropic")


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
    agents: tuple[RemoteAgentConfig, ...] = ()
    # Set by the loader, never read from TOML.
    source: Path | None = None
    base_dir: Path = attrs.field(default=Path("."))

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

    def _secret(self, name: str | None, what: str, key: str) -> str | None:
        if name is None:
            return None
        value = os.environ.get(name)
        if value is None or not value.strip():
            state = "not set" if value is None else "empty"
            raise ConfigError(
                f"{self._label}: environment variable {name} is {state}; it must hold the "
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
    def _label(self) -> str:
        return str(self.source) if self.source is not None else _NO_FILE

    def _absolute(self, path: Path) -> Path:
        # abspath rather than resolve(): normalise "..", but keep symlinks the user chose.
        return Path(os.path.abspath(self.base_dir / path.expanduser()))

    def _bind(self) -> tuple[str, int]:
        try:
            return split_host_port(self.server.bind)
        except ValueError as exc:
            raise _bad_value(self._label, "server.bind", self.server.bind, str(exc)) from None


_converter = cattrs.Converter(forbid_extra_keys=True)
_NOT_IN_TOML = frozenset({"source", "base_dir"})
for _cls in (
    AgentConfig,
    EmbeddedConfig,
    TemporalConfig,
    ServerConfig,
    StoreConfig,
    HeartbeatConfig,
    ModelConfig,
    RetentionConfig,
    PushConfig,
    DelegationConfig,
    RemoteAgentConfig,
    Settings,
):
    # The TOML walk below reads field types, which `from __future__ import annotations` leaves
    # as strings until resolved.
    attrs.resolve_types(_cls)


def load_settings(path: str | os.PathLike[str]) -> Settings:
    """Read one agent's TOML file; relative paths in it resolve against the file's directory."""
    label = os.fspath(path)
    file = Path(path)
    try:
        with file.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{label}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{label}: is a directory, not a TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{label}: invalid TOML: {_one_line(str(exc))}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: invalid TOML: the file is not UTF-8 text") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{label}: cannot read the file: {reason}") from None
    source = file.resolve()
    return _build(data, source=source, base_dir=source.parent, label=label)


def settings_from_mapping(
    data: Mapping[str, object], *, source: Path | None = None, base_dir: Path | None = None
) -> Settings:
    """Build settings from an already parsed TOML document, with the same checks as a file.

    ``base_dir`` defaults to the directory of ``source``, else the current directory; it is made
    absolute now so that a later ``chdir`` does not move the store.
    """
    if base_dir is None:
        base_dir = source.parent if source is not None else Path.cwd()
    label = str(source) if source is not None else _NO_FILE
    return _build(data, source=source, base_dir=Path(os.path.abspath(base_dir)), label=label)


def parse_duration(value: object, *, key: str, source: str) -> float:
    """Seconds from a number, or from a string such as ``"250ms"``, ``"30s"``, ``"5m"``, ``"1h"``.

    ``key`` and ``source`` only label the error: the dotted key and the file (or ``<settings>``).
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{source}: '{key}' must be {_DURATION_HINT}, got {_kind(value)}")
    if isinstance(value, str):
        match = _DURATION_PATTERN.fullmatch(value)
        if match is None:
            raise _bad_value(
                source,
                key,
                value,
                'must be a number of seconds or a number with a unit: "250ms", "30s", "5m", "1h", "7d"',
            )
        seconds = float(match[1]) * _DURATION_UNITS[match[2]]
    else:
        try:
            seconds = float(value)
        except OverflowError:
            seconds = math.inf
    if not math.isfinite(seconds):
        raise _bad_value(source, key, value, "must be a finite duration")
    return seconds


def _build(
    data: Mapping[str, object], *, source: Path | None, base_dir: Path, label: str
) -> Settings:
    checked = _check_document(data, label)
    try:
        settings = _converter.structure(checked, Settings)
    except cattrs.BaseValidationError as exc:
        # The walk above should leave nothing for cattrs to refuse; if it does, still one line.
        details = "; ".join(cattrs.transform_error(exc, path="settings"))
        raise ConfigError(f"{label}: {_one_line(details)}") from None
    settings = attrs.evolve(settings, source=source, base_dir=base_dir)
    _validate(settings, label)
    return settings


def _check_document(data: Mapping[str, object], label: str) -> dict[str, object]:
    sections = _toml_fields(Settings)
    checked: dict[str, object] = {}
    for name, value in data.items():
        section = sections.get(name)
        if section is None:
            allowed = ", ".join(sections)
            raise ConfigError(f"{label}: unknown section '{name}' (allowed: {allowed})")
        checked[name] = _check_value(value, section.type, name, label)
    return checked


def _check_table(
    value: object, cls: type[attrs.AttrsInstance], key: str, label: str
) -> dict[str, object]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{label}: '{key}' must be a table ([{key}]), got {_kind(value)}")
    table = typing.cast(Mapping[str, object], value)
    fields = _toml_fields(cls)
    if key in ("temporal", "model") or key.startswith("temporal."):
        # Checked before unknown keys so that the user learns where the secret belongs instead.
        section = key.split(".")[0]
        example = "TEMPORAL_API_KEY" if section == "temporal" else "OPENAI_API_KEY"
        for name in table:
            if name.lower().replace("-", "_") in {"api_key", "apikey"}:
                raise ConfigError(
                    f"{label}: '{key}.{name}' is refused: never write the API key into the file; "
                    "put it in an environment variable and name that variable in "
                    f'{section}.api_key_env (e.g. api_key_env = "{example}")'
                )
    checked: dict[str, object] = {}
    for name, item in table.items():
        field = fields.get(name)
        if field is None:
            allowed = ", ".join(fields)
            raise ConfigError(
                f"{label}: unknown key '{key}.{name}' (allowed in [{key}]: {allowed})"
            )
        checked[name] = _check_value(item, field.type, f"{key}.{name}", label)
    return checked


def _check_value(value: object, annotation: object, key: str, label: str) -> object:
    """Check one TOML value against its field's type, returning what cattrs should structure.

    cattrs alone would coerce (``str(5)``, ``float("5")``) where the user deserves an error.
    """
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        # TOML has no null, so the None in an optional field can never be written.
        (annotation,) = (arg for arg in typing.get_args(annotation) if arg is not type(None))
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and attrs.has(annotation):
        return _check_table(value, annotation, key, label)
    if origin is Literal:
        choices = typing.get_args(annotation)
        allowed = ", ".join(f'"{choice}"' for choice in choices)
        if not isinstance(value, str):
            raise ConfigError(f"{label}: '{key}' must be one of {allowed}, got {_kind(value)}")
        if value not in choices:
            raise _bad_value(label, key, value, f"must be one of {allowed}")
        return value
    if origin is tuple and attrs.has(typing.get_args(annotation)[0]):
        if not isinstance(value, list):
            raise ConfigError(
                f"{label}: '{key}' must be an array of tables ([[{key}]]), got {_kind(value)}"
            )
        item_cls = typing.get_args(annotation)[0]
        return [
            _check_table(item, item_cls, f"{key}[{index}]", label)
            for index, item in enumerate(typing.cast(list[object], value))
        ]
    if origin is tuple:
        if not isinstance(value, list):
            raise ConfigError(f"{label}: '{key}' must be a list of strings, got {_kind(value)}")
        items = typing.cast(list[object], value)
        for index, item in enumerate(items):
            if not isinstance(item, str):
                raise ConfigError(f"{label}: '{key}[{index}]' must be a string, got {_kind(item)}")
        return items
    if annotation is int:
        # bool is an int in Python, but `true` is not a number in TOML.
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{label}: '{key}' must be an integer, got {_kind(value)}")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{label}: '{key}' must be a string, got {_kind(value)}")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{label}: '{key}' must be true or false, got {_kind(value)}")
        return value
    if annotation is float:
        # Every float in the schema is a duration in seconds.
        return parse_duration(value, key=key, source=label)
    if annotation is Path:
        if not isinstance(value, str):
            raise ConfigError(f"{label}: '{key}' must be a path string, got {_kind(value)}")
        if not value.strip():
            raise _bad_value(label, key, value, "must not be empty; leave it out for the default")
        return value
    raise TypeError(f"config.py has no TOML rule for {annotation!r} ({key})")


def _validate(settings: Settings, label: str) -> None:
    """Check the values that have the right type but a wrong value, or clash with each other."""
    agent, temporal, server = settings.agent, settings.temporal, settings.server
    model = settings.model

    if re.fullmatch(_AGENT_ID_PATTERN, agent.id) is None:
        raise _bad_value(
            label,
            "agent.id",
            agent.id,
            f"must match {_AGENT_ID_PATTERN} (lowercase letters, digits and '-')",
        )
    if agent.name is not None and not agent.name.strip():
        raise _bad_value(label, "agent.name", agent.name, "must not be blank; leave it out")
    for key, modes in (("input_modes", agent.input_modes), ("output_modes", agent.output_modes)):
        for index, mode in enumerate(modes):
            if re.fullmatch(_MEDIA_TYPE_PATTERN, mode) is None:
                raise _bad_value(
                    label,
                    f"agent.{key}[{index}]",
                    mode,
                    'must be a media type like "text/plain", "image/*" or "*/*"',
                )

    if not temporal.namespace.strip():
        raise _bad_value(label, "temporal.namespace", temporal.namespace, "must not be blank")
    if temporal.task_queue is not None and not temporal.task_queue.strip():
        raise _bad_value(
            label, "temporal.task_queue", temporal.task_queue, "must not be blank; leave it out"
        )
    if temporal.api_key_env is not None and not re.fullmatch(
        _ENV_NAME_PATTERN, temporal.api_key_env
    ):
        # Deliberately no value in the message: a malformed "name" may be the key itself.
        raise ConfigError(
            f"{label}: 'temporal.api_key_env' must be the name of an environment variable "
            "(letters, digits and '_', not starting with a digit), not the key itself"
        )
    if temporal.mode == "embedded":
        remote_only = {
            "address": temporal.address,
            "api_key_env": temporal.api_key_env,
            "tls": temporal.tls,
        }
        for name, value in remote_only.items():
            if value is not None:
                raise ConfigError(
                    f"{label}: 'temporal.{name}' is only allowed when "
                    'temporal.mode = "remote" (mode is "embedded")'
                )
    else:
        if temporal.embedded.database_path is not None:
            raise ConfigError(
                f"{label}: 'temporal.embedded.database_path' is only allowed when "
                'temporal.mode = "embedded" (mode is "remote")'
            )
        if temporal.address is None:
            raise ConfigError(
                f"{label}: 'temporal.address' is required when temporal.mode = \"remote\" "
                '("HOST:PORT", e.g. "my-namespace.a1b2c.tmprl.cloud:7233")'
            )
        try:
            split_host_port(temporal.address)
        except ValueError as exc:
            raise _bad_value(label, "temporal.address", temporal.address, str(exc)) from None

    try:
        split_host_port(server.bind)
    except ValueError as exc:
        raise _bad_value(label, "server.bind", server.bind, str(exc)) from None
    if server.base_url is not None:
        problem = _url_problem(server.base_url)
        if problem is not None:
            raise _bad_value(label, "server.base_url", server.base_url, problem)
    if server.graceful_timeout < 0:
        raise _bad_duration(label, "server.graceful_timeout", server.graceful_timeout, "be >= 0")
    if server.max_request_bytes < _MIN_REQUEST_BYTES:
        raise _bad_value(
            label,
            "server.max_request_bytes",
            server.max_request_bytes,
            f"must be at least {_MIN_REQUEST_BYTES} (bytes)",
        )
    if server.rate_limit_per_minute < 0:
        raise _bad_value(
            label,
            "server.rate_limit_per_minute",
            server.rate_limit_per_minute,
            "must be >= 0 (0 means no limit)",
        )
    for index, origin in enumerate(server.cors_origins):
        problem = _origin_problem(origin)
        if problem is not None:
            raise _bad_value(label, f"server.cors_origins[{index}]", origin, problem)

    ui_path = settings.ui_path
    if ui_path is not None and not ui_path.is_dir():
        raise _bad_value(
            label, "server.ui_dir", str(server.ui_dir), f"must be an existing directory ({ui_path})"
        )

    if settings.heartbeat.interval < 1:
        raise _bad_duration(
            label, "heartbeat.interval", settings.heartbeat.interval, "be at least 1 second"
        )

    seen_ids: set[str] = {agent.id}
    for index, remote in enumerate(settings.agents):
        where = f"agents[{index}]"
        if re.fullmatch(_AGENT_ID_PATTERN, remote.id) is None:
            raise _bad_value(label, f"{where}.id", remote.id, "must match " + _AGENT_ID_PATTERN)
        if remote.id in seen_ids:
            raise _bad_value(
                label, f"{where}.id", remote.id, "names this agent or another entry already"
            )
        seen_ids.add(remote.id)
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", remote.url):
            raise _bad_value(label, f"{where}.url", remote.url, "must be an http(s) URL")
        for header in remote.headers:
            if not re.fullmatch(r"[A-Za-z0-9-]+=[A-Za-z_][A-Za-z0-9_]*", header):
                raise _bad_value(
                    label,
                    f"{where}.headers",
                    header,
                    'must be "Header-Name=ENV_VAR" (the value comes from the variable)',
                )

    for index, host in enumerate(settings.push.allow_hosts):
        if not re.fullmatch(r"[A-Za-z0-9.:/\-\[\]]{1,253}", host):
            raise _bad_value(
                label,
                f"push.allow_hosts[{index}]",
                host,
                'must be a host name, an IP address or a network ("10.0.0.0/8")',
            )
    if settings.push.timeout <= 0:
        raise _bad_duration(label, "push.timeout", settings.push.timeout, "be more than 0")
    stream_for = settings.delegation.stream_for
    if not 0 <= stream_for <= MAX_STREAM_FOR:
        raise _bad_duration(
            label, "delegation.stream_for", stream_for, f"be between 0 and {MAX_STREAM_FOR:g}s"
        )

    retention = settings.retention
    if retention.idle_timeout and retention.idle_timeout < 1:
        raise _bad_duration(
            label, "retention.idle_timeout", retention.idle_timeout, "be 0 (never) or at least 1s"
        )
    if retention.ended_ttl and retention.ended_ttl < 1:
        raise _bad_duration(
            label, "retention.ended_ttl", retention.ended_ttl, "be 0 (kept) or at least 1s"
        )
    if retention.max_streams < 1:
        raise _bad_value(
            label, "retention.max_streams", retention.max_streams, "must be at least 1"
        )

    if model.delay < 0:
        raise _bad_duration(label, "model.delay", model.delay, "be >= 0")
    if model.turn_timeout <= 0:
        raise _bad_duration(label, "model.turn_timeout", model.turn_timeout, "be more than 0")
    if model.kind != "scripted" and model.replies:
        raise ConfigError(
            f"{label}: 'model.replies' is only used when model.kind = \"scripted\" "
            f'(kind is "{model.kind}")'
        )
    _validate_model(model, label)


def _validate_model(model: ModelConfig, label: str) -> None:
    llm_only = {
        "name": model.name,
        "base_url": model.base_url,
        "api_key_env": model.api_key_env,
        "system": model.system,
        "tools": model.tools or None,
    }
    if not model.is_llm:
        for key, value in llm_only.items():
            if value is not None:
                raise ConfigError(
                    f"{label}: 'model.{key}' is only used when model.kind is \"openai\" or "
                    f'"anthropic" (kind is "{model.kind}")'
                )
    elif model.name is None or not model.name.strip():
        raise ConfigError(
            f"{label}: 'model.name' is required when model.kind = \"{model.kind}\" (the "
            'provider\'s model name, e.g. "gpt-4.1-mini")'
        )
    if model.kind == "python":
        if model.factory is None:
            raise ConfigError(
                f"{label}: 'model.factory' is required when model.kind = \"python\" "
                '("package.module:callable" returning the agent)'
            )
        if re.fullmatch(_IMPORT_PATTERN, model.factory) is None:
            raise _bad_value(label, "model.factory", model.factory, _IMPORT_HINT)
    elif model.factory is not None:
        raise ConfigError(
            f"{label}: 'model.factory' is only used when model.kind = \"python\" "
            f'(kind is "{model.kind}")'
        )
    for index, spec in enumerate(model.tools):
        if re.fullmatch(_IMPORT_PATTERN, spec) is None:
            raise _bad_value(label, f"model.tools[{index}]", spec, _IMPORT_HINT)
    if model.api_key_env is not None and not re.fullmatch(_ENV_NAME_PATTERN, model.api_key_env):
        # No value in the message: a malformed "name" may be the key itself.
        raise ConfigError(
            f"{label}: 'model.api_key_env' must be the name of an environment variable "
            "(letters, digits and '_', not starting with a digit), not the key itself"
        )
    if model.base_url is not None:
        problem = _url_problem(model.base_url.rstrip("/"))
        if problem is not None:
            raise _bad_value(label, "model.base_url", model.base_url, problem)
    if model.max_steps < 1:
        raise _bad_value(label, "model.max_steps", model.max_steps, "must be at least 1")
    if model.turn_budget <= 0:
        raise _bad_duration(label, "model.turn_budget", model.turn_budget, "be more than 0")


def split_host_port(text: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` to its parts; ValueError says what is wrong."""
    shape = 'must be "HOST:PORT", e.g. "127.0.0.1:8000" (IPv6 as "[::1]:8000")'
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if not rest.startswith(":"):
            raise ValueError(shape)
        port = rest[1:]
    else:
        host, _, port = text.rpartition(":")
        if ":" in host:
            raise ValueError('an IPv6 host goes in brackets, e.g. "[::1]:8000"')
    if not host or any(char.isspace() for char in host) or not re.fullmatch(r"[0-9]+", port):
        raise ValueError(shape)
    number = int(port)
    if number > 65535:
        raise ValueError("the port must be 0..65535")
    return host, number


def _url_problem(url: str) -> str | None:
    shape = 'must be an http(s) URL with a host, e.g. "https://agents.example.com"'
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a port that is not a number in range
    except ValueError:
        return shape
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return shape
    if parts.query or parts.fragment or any(char.isspace() for char in url):
        return f"{shape}, without query, fragment or spaces"
    return None


def _origin_problem(origin: str) -> str | None:
    shape = (
        'must be "*" or an origin like "https://app.example.com" or "http://localhost:3000" '
        "(scheme, host and optional port; no path, query, fragment or trailing slash)"
    )
    if origin == "*":
        return None
    try:
        parts = urlsplit(origin)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError:
        return shape
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path
        or any(char in origin for char in "?#@")
        or any(char.isspace() for char in origin)
    ):
        return shape
    # Browsers send the Origin header lowercase and without a default port, and CORS compares
    # the strings exactly, so either would silently never match.
    if origin != origin.lower():
        return "must be lowercase (browsers send the Origin header lowercase)"
    if port == {"http": 80, "https": 443}[parts.scheme]:
        return (
            f"must leave out the default port {port} (browsers leave it out of the Origin header)"
        )
    return None


def _toml_fields(cls: type[attrs.AttrsInstance]) -> dict[str, attrs.Attribute[object]]:
    fields: tuple[attrs.Attribute[object], ...] = attrs.fields(cls)
    return {field.name: field for field in fields if field.name not in _NOT_IN_TOML}


def _bad_value(label: str, key: str, value: object, why: str) -> ConfigError:
    return ConfigError(f"{label}: '{key}' is {_show(value)}: {why}")


def _bad_duration(label: str, key: str, seconds: float, why: str) -> ConfigError:
    return ConfigError(f"{label}: '{key}' is {seconds:g}s: must {why}")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


def _kind(value: object) -> str:
    """The TOML name of a value's type, for "got ..." in messages."""
    if isinstance(value, Mapping):
        return "table"
    return _TOML_KINDS.get(type(value), type(value).__name__)


def _one_line(text: str) -> str:
    return " ".join(text.split())
