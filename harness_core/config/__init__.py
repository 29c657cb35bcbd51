"""Agent configuration: one TOML file per agent, loaded into frozen attrs classes.

The TOML file is the runtime's only hand-written input, so this package is strict about it: every
mistake (an unknown key, a value of the wrong type or out of range, a secret written into the
file) raises :class:`~harness_core.errors.ConfigError` with one line that names the file, the
dotted key and what is allowed. Values derived from the file (task queue, absolute store and
database paths, base URL) are properties of :class:`Settings`, so every consumer derives them the
same way.

The modules, in the order a file goes through them: ``loading`` reads it (``load_settings``,
``settings_from_mapping``); ``document`` checks each key's type against the classes of
``sections`` (one per table) and ``settings`` (``Settings`` and its derived values); ``checks``
checks the values and how they fit together. ``values`` holds the shapes of single values
(durations, ``host:port``, URLs) and ``wording`` the one-line form of every error.
"""

from __future__ import annotations

from harness_core.config.checks import MAX_STREAM_FOR
from harness_core.config.loading import load_settings, settings_from_mapping
from harness_core.config.sections import (
    AgentConfig,
    AuthConfig,
    CardConfig,
    DelegationConfig,
    EmbeddedConfig,
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
from harness_core.config.settings import Settings
from harness_core.config.values import parse_duration, split_host_port

__all__ = [
    "MAX_STREAM_FOR",
    "AgentConfig",
    "AuthConfig",
    "CardConfig",
    "DelegationConfig",
    "EmbeddedConfig",
    "HeartbeatConfig",
    "McpServerConfig",
    "ModelConfig",
    "PushConfig",
    "RemoteAgentConfig",
    "RetentionConfig",
    "ServerConfig",
    "Settings",
    "StoreConfig",
    "TemporalConfig",
    "load_settings",
    "parse_duration",
    "settings_from_mapping",
    "split_host_port",
]
