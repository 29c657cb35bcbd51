"""How the delegation activities reach another agent over A2A: its base URL (``Peers``), its card,
an a2a-sdk client over an HTTP client that carries the caller's identity and the configured
headers to the target's origin only, and the call's failures in our own words.

``DelegationActivities`` (``harness_core.delegation.activities``) inherits ``A2ACalls``: the
activities hold what is sent and followed, this module how each call gets there.

Failures are ``ApplicationError``s in our own words (``REFUSED``: not retried; ``UNREACHABLE``:
retried); the other side's text never reaches the delegating task.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, Callable

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError, AgentCardResolutionError
from a2a.types import AgentCard, GetTaskRequest, Task
from a2a.utils.errors import A2AError, InternalError
from temporalio.exceptions import ApplicationError

from harness_core.agent_tokens import AgentCredential
from harness_core.config import RemoteAgentConfig
from harness_core.delegation.cards import CardCache, OriginHeaders
from harness_core.payloads import DelegationRequest
from harness_core.urls import http_client

__all__ = ["REFUSED", "UNREACHABLE", "A2ACalls", "Peers", "card_problem"]

#: Failure types of the delegation activities: their messages are ours, safe to show.
REFUSED = "DelegationRefused"
UNREACHABLE = "DelegationUnreachable"

#: Resolves an agent id to the base URL of its A2A endpoint (None: no such agent).
Peers = Callable[[str], "str | None"]


class A2ACalls:
    """The A2A client plumbing of the delegation activities: where a target is, its card, and a
    client for calls to it. ``DelegationActivities`` sets the attributes below."""

    peers: Peers
    remote: Callable[[str], RemoteAgentConfig | None]
    credential: AgentCredential | None
    _cards: CardCache

    def _url(self, target: str) -> str:
        url = self.peers(target)
        if url is None:
            raise ApplicationError(
                f"there is no agent {target!r} to delegate to (neither in this group nor "
                "configured)",
                type="UnknownAgent",
                non_retryable=True,
            )
        return url

    async def _card(self, http: httpx.AsyncClient, url: str) -> AgentCard:
        """The card of the agent at ``url``, as fresh as it says it must be; one that names
        another origin than ``url``'s is refused (``harness_core.delegation.cards``)."""
        try:
            return await self._cards.get(http, url)
        except ValueError as problem:
            raise ApplicationError(
                f"the agent at {url}: {problem}", type=REFUSED, non_retryable=True
            ) from None
        except httpx.HTTPStatusError as error:
            status = error.response.status_code
            raise AgentCardResolutionError("its card", status_code=status) from error
        except httpx.HTTPError as error:
            raise AgentCardResolutionError(f"its card ({type(error).__name__})") from error

    async def _client(
        self, http: httpx.AsyncClient, url: str, *, streaming: bool = False
    ) -> Client:
        card = await self._card(http, url)
        return ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)

    def _http(self, request: DelegationRequest, url: str) -> httpx.AsyncClient:
        # The identity and the configured headers go to the target's origin, and nowhere else.
        headers = self._headers(request)
        if self.credential is not None:
            # The agent's own credential: which agent calls, for whom, and for which target.
            remote = self.remote(request.target)
            tenant = (remote.tenant or request.target) if remote is not None else request.target
            token = self.credential.token(
                audience=url, tenant=tenant, participant=request.participant
            )
            headers["Authorization"] = f"Bearer {token}"
        return http_client(timeout=30, auth=OriginHeaders(url, headers))

    @contextlib.asynccontextmanager
    async def _calling(
        self, request: DelegationRequest
    ) -> AsyncGenerator[tuple[httpx.AsyncClient, str], None]:
        """An HTTP client for calls to ``request``'s target and its URL; an A2A error of those
        calls leaves as ``_refused`` says (our words, retried or not)."""
        url = self._url(request.target)
        try:
            async with self._http(request, url) as http:
                yield http, url
        except A2AError as error:
            raise _refused(request.target, error) from None

    async def _read(self, client: Client, request: DelegationRequest, task_id: str) -> Task:
        return await client.get_task(
            GetTaskRequest(id=task_id, tenant=self._tenant(request.target))
        )

    def _headers(self, request: DelegationRequest) -> dict[str, str]:
        # The identity travels with the call: the remote task belongs to the same participant.
        headers = {"X-Participant-Id": request.participant, "A2A-Version": "1.0"}
        remote = self.remote(request.target)
        for header in remote.headers if remote is not None else ():
            name, variable = header.split("=", 1)
            value = os.environ.get(variable)
            if not value:
                raise ApplicationError(
                    f"the variable {variable} named in the headers of agent {request.target} "
                    "([[agents]]) is not set",
                    type=REFUSED,
                    non_retryable=True,
                )
            headers[name] = value
        return headers

    def _tenant(self, target: str) -> str:
        remote = self.remote(target)
        return (remote.tenant or "") if remote is not None else ""


def _refused(target: str, error: A2AError) -> Exception:
    """An A2A error of a call to another agent, in our words only (never the other side's): it
    refused (not retried: a JSON-RPC error, or an HTTP 4xx other than 408, 425 and 429), or the
    call failed on the way (retried: unreachable, timed out, its server's own failure)."""
    status = _http_status(error)
    refused = not isinstance(error, A2AClientError | InternalError) or (
        status is not None and 400 <= status < 500 and status not in (408, 425, 429)
    )
    what = f"HTTP {status}" if status is not None else type(error).__name__
    if refused:
        return ApplicationError(
            f"agent {target} refused the call ({what})", type=REFUSED, non_retryable=True
        )
    return ApplicationError(f"agent {target} could not be reached ({what})", type=UNREACHABLE)


def _http_status(error: BaseException) -> int | None:
    """The HTTP status behind a client error, if one is."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, httpx.HTTPStatusError):
            return cause.response.status_code
        cause = cause.__cause__ or cause.__context__
    return None


async def card_problem(url: str) -> tuple[str | None, str]:
    """What is wrong with the agent at ``url`` (None: its card was fetched and is an A2A card),
    and what its card says of it (name, description, skills) for the model."""
    try:
        async with http_client(timeout=10) as http:
            card = await CardCache().get(http, url)
    except ValueError as problem:  # not a card, or one that sends calls elsewhere
        return str(problem), ""
    except Exception as error:  # unreachable, not JSON, not a card: the same to the caller
        return f"its card could not be fetched ({type(error).__name__})", ""
    skills = "; ".join(f"{s.name}: {s.description}" for s in card.skills)
    return None, f"{card.name}: {card.description}" + (f" Skills: {skills}" if skills else "")
