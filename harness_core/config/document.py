"""The walk over a parsed TOML document: every table, key and value checked against the sections.

cattrs alone would coerce (``str(5)``, ``float("5")``) or report a mistake in its own words, so the
document is checked first, key by key, against the field types of :class:`Settings` and its
sections: an unknown key names the keys allowed, a secret written into the file is refused, and
every float in the schema is read as a duration.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import attrs

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
from harness_core.config.values import parse_duration
from harness_core.config.wording import bad_value, toml_kind
from harness_core.errors import ConfigError

__all__ = ["check_document"]

_NOT_IN_TOML = frozenset({"source", "base_dir", "given"})
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
    CardConfig,
    AuthConfig,
    RemoteAgentConfig,
    McpServerConfig,
    Settings,
):
    # The TOML walk below reads field types, which `from __future__ import annotations` leaves
    # as strings until resolved.
    attrs.resolve_types(_cls)


def check_document(data: Mapping[str, object], label: str) -> dict[str, object]:
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
        raise ConfigError(f"{label}: '{key}' must be a table ([{key}]), got {toml_kind(value)}")
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
    if key == "store" and "password" in table:
        raise ConfigError(
            f"{label}: 'store.password' is refused: never write the password into the file; "
            "put it in an environment variable and name that variable in store.password_env "
            '(e.g. password_env = "HARNESS_PG_PASSWORD")'
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
    if origin is Mapping:
        # [plugins.<key>]: a table of tables, each a plugin's own options (any TOML values).
        if not isinstance(value, Mapping):
            raise ConfigError(f"{label}: '{key}' must be a table ([{key}]), got {toml_kind(value)}")
        tables = typing.cast(Mapping[str, object], value)
        for name, item in tables.items():
            if not isinstance(item, Mapping):
                raise ConfigError(
                    f"{label}: '{key}.{name}' must be a table ([{key}.{name}]) of the plugin's "
                    f"options, got {toml_kind(item)}"
                )
        return {
            name: dict(typing.cast(Mapping[str, object], item)) for name, item in tables.items()
        }
    if isinstance(annotation, type) and attrs.has(annotation):
        return _check_table(value, annotation, key, label)
    if origin is Literal:
        choices = typing.get_args(annotation)
        allowed = ", ".join(f'"{choice}"' for choice in choices)
        if not isinstance(value, str):
            raise ConfigError(f"{label}: '{key}' must be one of {allowed}, got {toml_kind(value)}")
        if value not in choices:
            raise bad_value(label, key, value, f"must be one of {allowed}")
        return value
    if origin is tuple and attrs.has(typing.get_args(annotation)[0]):
        if not isinstance(value, list):
            raise ConfigError(
                f"{label}: '{key}' must be an array of tables ([[{key}]]), got {toml_kind(value)}"
            )
        item_cls = typing.get_args(annotation)[0]
        return [
            _check_table(item, item_cls, f"{key}[{index}]", label)
            for index, item in enumerate(typing.cast(list[object], value))
        ]
    if origin is tuple:
        if not isinstance(value, list):
            raise ConfigError(f"{label}: '{key}' must be a list of strings, got {toml_kind(value)}")
        items = typing.cast(list[object], value)
        for index, item in enumerate(items):
            if not isinstance(item, str):
                raise ConfigError(
                    f"{label}: '{key}[{index}]' must be a string, got {toml_kind(item)}"
                )
        return items
    if annotation is int:
        # bool is an int in Python, but `true` is not a number in TOML.
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{label}: '{key}' must be an integer, got {toml_kind(value)}")
        return value
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{label}: '{key}' must be a string, got {toml_kind(value)}")
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{label}: '{key}' must be true or false, got {toml_kind(value)}")
        return value
    if annotation is float:
        # Every float in the schema is a duration in seconds.
        return parse_duration(value, key=key, source=label)
    if annotation is Path:
        if not isinstance(value, str):
            raise ConfigError(f"{label}: '{key}' must be a path string, got {toml_kind(value)}")
        if not value.strip():
            raise bad_value(label, key, value, "must not be empty; leave it out for the default")
        return value
    raise TypeError(f"config.py has no TOML rule for {annotation!r} ({key})")


def _toml_fields(cls: type[attrs.AttrsInstance]) -> dict[str, attrs.Attribute[object]]:
    fields: tuple[attrs.Attribute[object], ...] = attrs.fields(cls)
    return {field.name: field for field in fields if field.name not in _NOT_IN_TOML}
