"""The cards of the agents this one delegates to: fetched, checked and revalidated.

- **Kept as long as the card says.** A card is kept for its response's ``Cache-Control: max-age``
  (``DEFAULT_MAX_AGE`` without one, at most ``MAX_AGE``; ``no-cache``/``no-store``: asked each
  time), then asked for again with ``If-None-Match`` when it came with an ``ETag``; a ``304`` keeps
  it. A changed card is taken at the next use, not at the next restart.
- **One origin.** Every interface a card names must be at the origin (scheme, host, port) it was
  fetched from, which is the origin configured for the agent: a card that names another is refused,
  so the headers configured for an agent (``[[agents]] headers``) never travel anywhere else.
- **Headers by origin.** :class:`OriginHeaders` adds those headers to a request only when it goes
  to that origin.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any

import attrs
import httpx
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH

__all__ = ["CardCache", "OriginHeaders", "card_origin_problem", "origin"]

log = logging.getLogger("harness.delegation")

#: Seconds a card is kept when its response says nothing of caching.
DEFAULT_MAX_AGE = 300.0
#: Seconds a card is kept at most, whatever its response says.
MAX_AGE = 3600.0
#: The largest card taken, in bytes.
MAX_CARD_BYTES = 1 << 20


def origin(url: str | httpx.URL) -> tuple[str, str, int]:
    """The origin of ``url``: scheme, host and port (the scheme's default when none is named)."""
    parsed = httpx.URL(str(url))
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return parsed.scheme, parsed.host.lower(), port


def card_origin_problem(card: AgentCard, url: str) -> str | None:
    """What is wrong with ``card``, fetched from ``url``, as to where it sends calls (None:
    nothing): an interface at another origin, or none at all."""
    if not card.supported_interfaces:
        return "its card names no interface"
    expected = origin(url)
    for interface in card.supported_interfaces:
        try:
            there = origin(interface.url)
        except (httpx.InvalidURL, ValueError):
            return f"its card names an interface that is not a URL ({interface.url[:200]!r})"
        if there != expected:
            return (
                f"its card names an interface at {_show(there)}, not at {_show(expected)} where "
                "it is configured; refused, so that nothing meant for it (its [[agents]] headers "
                "among them) goes elsewhere"
            )
    return None


def _show(where: tuple[str, str, int]) -> str:
    scheme, host, port = where
    return f"{scheme}://{host}:{port}"


def _max_age(headers: Mapping[str, str]) -> float:
    control = headers.get("cache-control", "").lower()
    if "no-store" in control or "no-cache" in control:
        return 0.0
    found = re.search(r"max-age\s*=\s*(\d+)", control)
    if found is None:
        return DEFAULT_MAX_AGE
    return min(float(found.group(1)), MAX_AGE)


@attrs.define
class _Kept:
    card: AgentCard
    etag: str
    fresh_until: float


class CardCache:
    """Cards by base URL, revalidated as their responses allow (see the module's docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._kept: dict[str, _Kept] = {}

    async def get(self, http: httpx.AsyncClient, url: str) -> AgentCard:
        """The card of the agent at base URL ``url``. Raises ``httpx.HTTPError`` when it cannot
        be fetched and ``ValueError`` when it is not a card, or names another origin."""
        kept = self._kept.get(url)
        now = self._clock()
        if kept is not None and now < kept.fresh_until:
            return kept.card
        headers = {"If-None-Match": kept.etag} if kept is not None and kept.etag else {}
        response = await http.get(url.rstrip("/") + AGENT_CARD_WELL_KNOWN_PATH, headers=headers)
        if response.status_code == 304 and kept is not None:
            kept.fresh_until = now + _max_age(response.headers)
            return kept.card
        response.raise_for_status()
        if len(response.content) > MAX_CARD_BYTES:
            raise ValueError(f"its card is larger than {MAX_CARD_BYTES} bytes")
        try:
            data: Any = response.json()
            card = parse_agent_card(data)
        except Exception as error:  # not JSON, not a card: the same to the caller
            raise ValueError(f"its card could not be read ({type(error).__name__})") from None
        problem = card_origin_problem(card, url)
        if problem is not None:
            log.warning("the agent at %s: %s", url, problem)
            self._kept.pop(url, None)
            raise ValueError(problem)
        self._kept[url] = _Kept(
            card=card,
            etag=response.headers.get("etag", ""),
            fresh_until=now + _max_age(response.headers),
        )
        return card


class OriginHeaders(httpx.Auth):
    """Adds ``headers`` to the requests that go to ``url``'s origin, and to no other."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        self._origin = origin(url)
        self._headers = dict(headers)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if origin(request.url) == self._origin:
            request.headers.update(self._headers)
        yield request
