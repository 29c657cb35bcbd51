"""The shapes of single values: durations, ``host:port`` addresses, URLs, CORS and gateway origins.

``parse_duration`` and ``split_host_port`` are public (the package re-exports them; the group and
the HTTP server split ``server.bind`` with the latter). The two ``*_problem`` functions say what is
wrong with a URL or an origin, or return None (``gateway_origin_problem`` too, for an entry of
``[auth] gateway_origins``). ``web_origin`` and ``gateway_origin`` give the origin of a URL and of
such an entry, for the config checks and the gateway token verifier (``harness_asgi.gateway``).
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlsplit

from harness_core.config.wording import bad_value, toml_kind
from harness_core.errors import ConfigError

__all__ = [
    "gateway_origin",
    "gateway_origin_problem",
    "origin_problem",
    "parse_duration",
    "split_host_port",
    "url_problem",
    "web_origin",
]

_DURATION_PATTERN = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(ms|s|m|h|d)\s*")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_HINT = 'a duration (seconds or a string like "30s")'
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Host names as URLs carry them once lowercased (IDNA hosts in their xn-- form), and IPv6 literals.
_HOST_PATTERN = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?|[0-9a-f:.]+")
_SCHEME_PREFIX = re.compile(r"^https?://", re.IGNORECASE)


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


def web_origin(url: str) -> str:
    """The origin of an http(s) URL, as browsers and jose compute it: ``scheme://host[:port]``,
    lowercase, without the default port, user information, path, query or fragment.

    Raises ValueError saying what is wrong (not http(s), no host, a bad port or host).
    """
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError("not an http(s) URL")
    host = parts.hostname  # urlsplit lowercases it
    if not host:
        raise ValueError("the URL has no host")
    if _HOST_PATTERN.fullmatch(host) is None:
        raise ValueError("the host may hold only ASCII letters, digits, '.', '-' and '_'")
    if ":" in host:
        host = f"[{host}]"
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def gateway_origin(value: str) -> str:
    """An allowed gateway origin in its one form: trimmed, with any ``http://`` or ``https://``
    replaced by ``https://``, then its origin. ``gateway.test``, ``http://gateway.test`` and
    ``https://gateway.test/`` all give ``https://gateway.test``.

    A gateway serves its keys over TLS only, so ``http`` is read as ``https`` (as in the
    reference, loopingai-core ``parseGatewayOrigins``) rather than allowed. Raises ValueError for
    an empty value or one that is not an origin.
    """
    text = value.strip()
    if not text:
        raise ValueError("an allowed gateway origin cannot be empty")
    return web_origin("https://" + _SCHEME_PREFIX.sub("", text, count=1))


def gateway_origin_problem(value: str) -> str | None:
    """What is wrong with an ``[auth] gateway_origins`` entry, or None.

    Stricter than :func:`gateway_origin`, which takes the origin of whatever URL it is given: in
    the file, a path, query or user would suggest a limit that does not exist (a token's ``jku``
    may name any path on the origin), so they are refused.
    """
    shape = (
        'must be a gateway origin: a host with an optional port, e.g. "gateway.example.com" or '
        '"https://gateway.example.com:8443" (http:// is read as https://; no path, query or user)'
    )
    try:
        gateway_origin(value)
    except ValueError as exc:
        return f"{shape}; {exc}"
    rest = _SCHEME_PREFIX.sub("", value.strip())
    if "://" in rest:
        return f"{shape}; only https:// or http:// may stand before the host"
    parts = urlsplit("https://" + rest)
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        return shape
    return None
