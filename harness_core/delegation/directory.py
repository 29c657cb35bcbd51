"""What an agent knows of the other agents: those of its group and those its ``[[agents]]`` name,
where each is served, and what their cards say (fetched at start, tried again with backoff).

A mixin of ``Harness`` (``harness_core.harness``): the agents a turn may delegate to
(``_delegates``), and where a delegation's message goes (``peer_url``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from harness_core.config import RemoteAgentConfig, Settings
from harness_core.delegation.activities import card_problem

if TYPE_CHECKING:
    from harness_core.harness import Harness

__all__ = ["REMOTE_GRACE", "KnownAgents"]

log = logging.getLogger("harness")

#: How long an ``[[agents]]`` card may fail to be fetched at start before that is a warning.
REMOTE_GRACE = 10.0


class KnownAgents:
    """The other agents, as one agent knows them."""

    settings: Settings
    #: The agents of this agent's group, by id (set by the group): delegation targets.
    peers: dict[str, Harness]
    # What the cards of [[agents]] say (name, description, skills), once fetched.
    _remote_cards: dict[str, str]

    @property
    def agent_id(self) -> str:
        raise NotImplementedError

    def peer_url(self, agent_id: str) -> str | None:
        """Where the agent ``agent_id`` is served: an agent of this agent's group (its public
        URL), else one named in ``[[agents]]``; None when there is no such agent."""
        peer = self.peers.get(agent_id)
        if peer is not None:
            return peer.public_url
        remote = self.remote(agent_id)
        return remote.url if remote is not None else None

    def _delegates(self) -> list[tuple[str, str]]:
        """The agents this one may ask (``[model] agents``, else all it knows), with what their
        cards say of them."""
        chosen = self.settings.model.agents
        return [d for d in self._known_agents() if chosen is None or d[0] in chosen]

    def _known_agents(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for agent_id, peer in self.peers.items():
            if agent_id != self.agent_id:
                agent = peer.settings.agent
                found.append((agent_id, f"{peer.settings.agent_name}: {agent.description or ''}"))
        for remote in self.settings.agents:
            found.append(
                (remote.id, self._remote_cards.get(remote.id, f"an agent at {remote.url}"))
            )
        return found

    def remote(self, agent_id: str) -> RemoteAgentConfig | None:
        """The ``[[agents]]`` entry for ``agent_id``, if there is one."""
        return next((r for r in self.settings.agents if r.id == agent_id), None)

    async def _check_remotes(self) -> None:
        """Fetch each ``[[agents]]`` card at start, tried again with backoff; one that cannot be
        fetched is a warning (delegations to it are tried anyway), once it has failed for
        ``REMOTE_GRACE`` seconds: at start it may be served by the same HTTP server, which only
        listens once every agent has started (a host's lifespan runs before it binds)."""

        async def check(remote: RemoteAgentConfig) -> None:
            delay = 0.25
            warned = False
            began = anyio.current_time()
            while True:
                problem, summary = await card_problem(remote.url)
                if problem is None:
                    self._remote_cards[remote.id] = summary
                    log.info(
                        "agent %s: remote agent %s is at %s", self.agent_id, remote.id, remote.url
                    )
                    return
                late = anyio.current_time() - began >= REMOTE_GRACE
                log.log(
                    logging.WARNING if late and not warned else logging.DEBUG,
                    "agent %s: remote agent %s (%s): %s; trying again",
                    self.agent_id,
                    remote.id,
                    remote.url,
                    problem,
                )
                warned = warned or late
                await anyio.sleep(delay)
                delay = min(delay * 2, 300.0)

        async with anyio.create_task_group() as tg:
            for remote in self.settings.agents:
                tg.start_soon(check, remote)
