"""Request limits for each agent app: body size and request rate, checked before any route runs.

* ``413 {"error": "request body over <N> bytes"}`` for a body over ``[server] max_request_bytes``,
  whether its ``content-length`` declares it (the app is never called) or it arrives chunked and
  grows past the limit while the app reads it (the app is stopped at its next read).
* ``429 {"error": "too many requests"}`` with ``Retry-After`` once a client address has used up
  ``[server] rate_limit_per_minute``.

Raw ASGI rather than ``BaseHTTPMiddleware``, so the body streams through untouched and nothing here
knows which event loop runs it (AnyIO only).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping

import anyio
import anyio.lowlevel
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "LimitsMiddleware",
    "RateLimiter",
    "declared_length",
    "discard_body",
    "json_error",
    "replay_body",
]

log = logging.getLogger("harness.http")

# Above this many remembered peers, the limiter forgets those whose bucket has refilled.
_PRUNE_ABOVE = 10_000
# How long a refused body may keep arriving (and be thrown away) so that the client reads the 413.
_DISCARD_SECONDS = 2.0


def json_error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The runtime's error body, ``{"error": message}``, as a response to send."""
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class RateLimiter:
    """Per-client token bucket: `per_minute` requests a minute, bursts up to `per_minute`.

    A client's bucket starts full and refills continuously at ``per_minute / 60`` tokens a second.
    Memory stays bounded: once more than 10 000 clients are remembered, those whose bucket is full
    again (and so are the same as a client never seen) are forgotten. Not thread-safe; it is meant
    for one event loop, whichever backend runs it.
    """

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute < 1:
            raise ValueError(
                f"per_minute must be at least 1, got {per_minute} (0 means no limiter)"
            )
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # peer -> (tokens, when counted)
        self._prune_above = _PRUNE_ABOVE

    def allow(self, peer: str) -> bool:
        """Take one token from ``peer``'s bucket; False (taking nothing) when it is empty."""
        now = self._clock()
        tokens = self._tokens(peer, now)
        if tokens < 1:
            return False
        self._buckets[peer] = (tokens - 1, now)
        if len(self._buckets) > self._prune_above:
            self._prune(now)
        return True

    def retry_after(self, peer: str) -> int:
        """Whole seconds until ``peer`` has a token again, at least 1 (for ``Retry-After``)."""
        missing = 1 - self._tokens(peer, self._clock())
        return max(1, math.ceil(missing * 60 / self.per_minute))

    def __len__(self) -> int:
        """How many peers are remembered (those with a bucket that is not full)."""
        return len(self._buckets)

    def _tokens(self, peer: str, now: float) -> float:
        bucket = self._buckets.get(peer)
        if bucket is None:
            return float(self.per_minute)
        tokens, then = bucket
        # Multiply before dividing so that a whole minute refills exactly per_minute tokens.
        refill = max(0.0, now - then) * self.per_minute / 60
        return min(float(self.per_minute), tokens + refill)

    def _prune(self, now: float) -> None:
        full = [peer for peer in self._buckets if self._tokens(peer, now) >= self.per_minute]
        for peer in full:
            del self._buckets[peer]
        # When most peers are still active, wait for the map to double before scanning again, so
        # a flood of distinct addresses costs O(1) per request on average, not O(peers).
        self._prune_above = max(_PRUNE_ABOVE, 2 * len(self._buckets))


class LimitsMiddleware:
    """Refuse HTTP requests over the body size or rate limits; pass everything else to ``app``.

    The checks run in this order: rate (429), declared ``content-length`` (400 if malformed, 413 if
    over), then the body as the app reads it. When a streamed body passes the limit before the app
    has started its response, the client gets the 413 and the app is cancelled in that read; its
    cancellation ends quietly here. If the app had already started its response, it reads
    ``http.disconnect`` instead and finishes as it would for a client that went away. Either way
    nothing is raised to the server for the cut-off body; any other failure of the app is.

    Before a 413, up to ``max_request_bytes`` more of the body are read and dropped (for at most
    two seconds), so that a client still sending reads the answer instead of a reset connection.
    """

    def __init__(
        self, app: ASGIApp, *, max_request_bytes: int, limiter: RateLimiter | None
    ) -> None:
        if max_request_bytes < 1:
            raise ValueError(f"max_request_bytes must be at least 1, got {max_request_bytes}")
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.limiter is not None:
            client = scope.get("client")
            peer = str(client[0]) if client else ""
            if not self.limiter.allow(peer):
                retry = str(self.limiter.retry_after(peer))
                log.debug("429 for %r on %s (retry after %ss)", peer, scope.get("path"), retry)
                response = json_error(429, "too many requests", {"retry-after": retry})
                await response(scope, receive, send)
                return
        try:
            declared = declared_length(scope)
        except ValueError:
            await json_error(400, "malformed content-length header")(scope, receive, send)
            return
        if declared is not None and declared > self.max_request_bytes:
            # Over twice the limit is too much to read just to be polite: answer at once.
            discard = declared if declared <= 2 * self.max_request_bytes else 0
            await _refuse_body(self.max_request_bytes, discard, scope, receive, send)
            return
        if declared or _chunked(scope):
            # The whole body before the app answers, whatever the route: an answer that races a
            # body cut short (the server's own 400) can take the server down (Hypercorn's Trio
            # runner: two tasks sending on one stream), and a body left unread closes the
            # connection under a client that reuses it.
            body = await self._read_body(scope, receive, send)
            if body is None:
                return
            receive = replay_body(body, receive)
        await _BodyLimit(self, scope, receive, send).run()

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The request's body, or None when it was refused (413) or the client left before it
        ended (logged at INFO, nothing sent: nobody would read it)."""
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                log.info(
                    "%s %s: the client left before its body ended",
                    scope.get("method"),
                    scope.get("path"),
                )
                return None
            chunk: bytes = message.get("body", b"")
            received += len(chunk)
            if received > self.max_request_bytes:
                more = message.get("more_body", False)
                limit = self.max_request_bytes
                await _refuse_body(limit, limit if more else 0, scope, receive, send)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class _BodyLimit:
    """One request's view of the body: counts it as the app reads it and stops at the limit."""

    def __init__(self, owner: LimitsMiddleware, scope: Scope, receive: Receive, send: Send) -> None:
        self._owner = owner
        self._scope = scope
        self._receive = receive
        self._send = send
        self._received = 0
        self._over = False  # the body passed the limit; the app only reads disconnects now
        self._started = False  # a response (the app's or our 413) has started
        self._refused = False  # we sent the 413; the app's sends go nowhere
        self._cancel = anyio.CancelScope()

    async def run(self) -> None:
        with self._cancel:
            try:
                await self._owner.app(self._scope, self.receive, self.send)
            except ClientDisconnect:
                # Starlette's answer to the disconnect we handed the app; the client was told.
                if not self._over:
                    raise

    async def receive(self) -> Message:
        if self._over:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        self._received += len(message.get("body", b""))
        if self._received <= self._owner.max_request_bytes:
            return message
        self._over = True
        if not self._started:
            self._started = self._refused = True
            limit = self._owner.max_request_bytes
            discard = limit if message.get("more_body", False) else 0
            await _refuse_body(limit, discard, self._scope, self._receive, self._send)
            # Stop the app here rather than hand it a disconnect: SDK routes catch Exception and
            # log Starlette's ClientDisconnect as an unhandled error with a traceback.
            self._cancel.cancel()
            await anyio.lowlevel.checkpoint()
        # The app already answered (or shields itself from cancellation): it sees a client that left.
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self._refused:
            return
        if message["type"] == "http.response.start":
            self._started = True
        await self._send(message)


async def _refuse_body(
    limit: int, discard: int, scope: Scope, receive: Receive, send: Send
) -> None:
    """Read and drop what is left of the body, up to ``discard`` bytes, then send the 413."""
    log.debug("413 for %s: the body is over %s bytes", scope.get("path"), limit)
    await discard_body(receive, discard)
    await json_error(413, f"request body over {limit} bytes")(scope, receive, send)


async def discard_body(receive: Receive, discard: int) -> None:
    """Read and drop what is left of a refused body, up to ``discard`` bytes (for at most two
    seconds), before the 413 is sent.

    Hypercorn closes an HTTP/1.1 connection as soon as the response ends if the request body has
    not; a client still sending then gets a reset instead of the 413 (httpx: ReadError). Reading
    the rest first, bounded in bytes and time, lets the answer arrive on a clean connection.
    ``discard`` is 0 when the body has ended: the server's receive would then wait for the
    response to end.
    """
    discarded = 0
    with anyio.move_on_after(_DISCARD_SECONDS):
        while discarded < discard:
            message = await receive()
            if message["type"] != "http.request":
                break
            discarded += len(message.get("body", b""))
            if not message.get("more_body", False):
                break


def declared_length(scope: Scope) -> int | None:
    """The request's ``content-length``, None without one; ValueError when it is not one number."""
    headers: list[tuple[bytes, bytes]] = list(scope["headers"])
    values = {value for name, value in headers if name.lower() == b"content-length"}
    if not values:
        return None
    if len(values) > 1:
        raise ValueError("conflicting content-length headers")
    (value,) = values
    text = value.strip()
    # int() would accept "+5", "1_000" and non-ASCII digits; HTTP allows only 1*DIGIT.
    if not text or not all(48 <= byte <= 57 for byte in text):
        raise ValueError("content-length is not a number")
    return int(text)


def _chunked(scope: Scope) -> bool:
    headers: list[tuple[bytes, bytes]] = list(scope["headers"])
    return any(name.lower() == b"transfer-encoding" for name, _ in headers)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A receive that gives ``body`` (already read) first, then what the server says next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
