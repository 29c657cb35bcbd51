"""The agent card: who the agent is and where to reach it (JSON-RPC and HTTP+JSON on its public URL).

Every interface says protocol version 1.0, so the served card is pure v1.0 (an empty or 0.x version
would make the SDK mix v0.3 fields into it; a2a-sdk notes, gotcha 12).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill

from harness_core.harness import Harness

__all__ = ["build_agent_card", "card_version"]


def card_version() -> str:
    """The version cards show: the installed package's."""
    try:
        return version("a2a-harness")
    except PackageNotFoundError:
        return "0.0.0"


def build_agent_card(harness: Harness) -> AgentCard:
    """The public card of ``harness``, with interface URLs on its public URL."""
    settings = harness.settings
    url = harness.public_url
    description = settings.agent.description or f"{settings.agent_name}: a durable A2A agent"
    return AgentCard(
        name=settings.agent_name,
        description=description,
        version=card_version(),
        supported_interfaces=[
            AgentInterface(url=f"{url}/", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=harness.settings.push.enabled
        ),
        default_input_modes=list(harness.input_modes),
        default_output_modes=list(harness.output_modes),
        skills=[
            AgentSkill(
                id=settings.agent_id,
                name=settings.agent_name,
                description=description,
                tags=["harness"],
            )
        ],
    )
