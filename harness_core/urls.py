"""Where an agent is reached: its path prefix and its public URL.

An agent mounted into a host app lives under a prefix (``Mount("/agents/a", app=...)``); everything it
hands out (the card's interfaces, later the push URL) must name the URL a client outside uses, which is
``[server] base_url`` with that prefix. The two can disagree; that is a configuration error, found at
construction rather than by a client that follows a wrong URL (seed: mount-design, PublicUrl).

It also makes the HTTP clients that reach other agents and webhooks.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any
from urllib.parse import urlsplit

import httpx

from harness_core import telemetry
from harness_core.errors import ConfigError

__all__ = ["http_client", "normalize_prefix", "public_url"]


@functools.cache
def _tls() -> ssl.SSLContext:
    # Loading the CA bundle takes ~20 ms: once per process, not once per client.
    return httpx.create_ssl_context()


def http_client(**options: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` with ``options`` that shares the process's TLS context: a
    delegation's calls and a webhook's delivery each make one, so it must be cheap. While tracing
    is on, each of its requests carries the current trace (``traceparent``)."""
    hooks = telemetry.request_hooks()
    if hooks:
        given: dict[str, list[Any]] = options.get("event_hooks") or {}
        merged = {key: [*given.get(key, []), *value] for key, value in hooks.items()}
        options = {**options, "event_hooks": {**given, **merged}}
    return httpx.AsyncClient(verify=_tls(), **options)


def normalize_prefix(prefix: str | None) -> str:
    """``"agents/a/"`` → ``"/agents/a"``; ``None``, ``""`` and ``"/"`` → ``""`` (no prefix).

    Raises ``ConfigError`` for a prefix that is not a plain path (a query, a fragment, ``..``).
    """
    if prefix is None:
        return ""
    text = prefix.strip()
    problem = None
    if any(c in text for c in "?#%\\ ") or any(ord(c) < 32 for c in text):
        problem = "it may hold only path characters (no spaces, '?', '#', '%' or '\\')"
    elif "//" in text.strip("/"):
        problem = "it has an empty segment ('//')"
    elif any(segment in (".", "..") for segment in text.strip("/").split("/")):
        problem = "it has a '.' or '..' segment"
    if problem is not None:
        raise ConfigError(f"prefix {prefix!r}: {problem}")
    text = text.strip("/")
    return f"/{text}" if text else ""


def public_url(base_url: str, prefix: str | None) -> str:
    """The URL clients use for an agent under ``prefix`` when its server is at ``base_url``.

    ===================  ===================  =====================================
    base_url's path      prefix               result
    ===================  ===================  =====================================
    empty or ``/``       none                 base_url
    empty or ``/``       ``/agents/a``        base_url + ``/agents/a``
    ends with the prefix none or that prefix  base_url (a proxy already adds it)
    anything else        ``/agents/b``        ``ConfigError`` naming both
    ===================  ===================  =====================================

    The result has no trailing slash.
    """
    base = base_url.rstrip("/")
    prefix = normalize_prefix(prefix)
    path = urlsplit(base).path.rstrip("/")
    # A prefix starts with "/", so endswith() matches whole segments only.
    if not prefix or path.endswith(prefix):
        return base
    if not path:
        return base + prefix
    raise ConfigError(
        f"prefix {prefix!r} disagrees with [server] base_url {base_url!r}, whose path is "
        f"{path!r}: give base_url without a path (the prefix is added), or with a path that "
        "ends with the prefix"
    )
