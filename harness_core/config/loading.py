"""Loading one agent's settings: from a TOML file (``load_settings``) or a parsed document
(``settings_from_mapping``), through the same checks.

A file that cannot be read or parsed gets one line too; relative paths resolve against the
file's directory, fixed when loading so that a later ``chdir`` does not move the store.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

import attrs
import cattrs

from harness_core.config.checks import validate
from harness_core.config.document import check_document
from harness_core.config.settings import Settings
from harness_core.config.wording import NO_FILE, one_line
from harness_core.errors import ConfigError

__all__ = ["load_settings", "settings_from_mapping"]

_converter = cattrs.Converter(forbid_extra_keys=True)


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
        raise ConfigError(f"{label}: invalid TOML: {one_line(str(exc))}") from None
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
    label = str(source) if source is not None else NO_FILE
    return _build(data, source=source, base_dir=Path(os.path.abspath(base_dir)), label=label)


def _build(
    data: Mapping[str, object], *, source: Path | None, base_dir: Path, label: str
) -> Settings:
    checked = check_document(data, label)
    try:
        settings = _converter.structure(checked, Settings)
    except cattrs.BaseValidationError as exc:
        # The walk above should leave nothing for cattrs to refuse; if it does, still one line.
        details = "; ".join(cattrs.transform_error(exc, path="settings"))
        raise ConfigError(f"{label}: {one_line(details)}") from None
    settings = attrs.evolve(settings, source=source, base_dir=base_dir, given=label)
    validate(settings, label)
    return settings
