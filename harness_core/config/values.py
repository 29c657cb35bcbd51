"""The shapes of single values: durations, ``host:port`` addresses, URLs and CORS origins.

``parse_duration`` and ``split_host_port`` are public (the package re-exports them; the group and
the HTTP server split ``server.bind`` with the latter). The two ``*_problem`` functions say what is
wrong with a URL or an origin, or return None.
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlsplit

from harness_core.config.wording import bad_value, toml_kind
from harness_core.errors import ConfigError

__all__ = ["origin_problem", "parse_duration", "split_host_port", "url_problem"]

_DURATION_PATTERN = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(ms|s|m|h|d)\s*")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_HINT = 'a duration (seconds or a string like "30s")'


def parse_duration(value: object, *, key: str, source: str) -> float:
    """Seconds from a number, or from a string such as ``"250ms"``, ``"30s"``, ``"5m"``, ``"1h"``.

    ``key`` and ``source`` only label the error: the dotted key and the file (or ``<settings>``).
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{source}: '{key}' must be {_DURATION_HINT}, got {toml_kind(value)}")
    if isinstance(value, str):
        match = _DURATION_PATTERN.fullmatch(value)
        if match is None:
            raise bad_value(
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
        raise bad_value(source, key, value, "must be a finite duration")
    return seconds


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


def url_problem(url: str) -> str | None:
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


def origin_problem(origin: str) -> str | None:
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
