"""How a configuration mistake is worded: one line naming the file, the dotted key and the value.

Every :class:`~harness_core.errors.ConfigError` of the package is built from these, so that the
messages agree: ``<file>: '<key>' is <value>: <what is allowed>``, values cut to a readable length,
and TOML's names for types (table, integer, ...) rather than Python's.
"""

from __future__ import annotations

from collections.abc import Mapping

from harness_core.errors import ConfigError

__all__ = ["NO_FILE", "bad_duration", "bad_value", "one_line", "toml_kind"]

#: The label of settings that come from no file (``settings_from_mapping`` without a source).
NO_FILE = "<settings>"
_SHOW_LIMIT = 60
_TOML_KINDS: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    list: "list",
}


def bad_value(label: str, key: str, value: object, why: str) -> ConfigError:
    return ConfigError(f"{label}: '{key}' is {_show(value)}: {why}")


def bad_duration(label: str, key: str, seconds: float, why: str) -> ConfigError:
    return ConfigError(f"{label}: '{key}' is {seconds:g}s: must {why}")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


def toml_kind(value: object) -> str:
    """The TOML name of a value's type, for "got ..." in messages."""
    if isinstance(value, Mapping):
        return "table"
    return _TOML_KINDS.get(type(value), type(value).__name__)


def one_line(text: str) -> str:
    return " ".join(text.split())
