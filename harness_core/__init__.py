"""a2a-harness's core: configuration, agents, the group lifecycle, Temporal, the store.

Nothing here imports the HTTP layer (``harness_asgi``) but ``harness_core.face``, lazily, when a
host asks for an ASGI app or for ``HarnessGroup.serve``.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness_core.agents.turn import (
        Agent,
        Artifact,
        Ask,
        AuthRequired,
        Complete,
        DataPart,
        Delegate,
        Delegation,
        Fail,
        FilePart,
        Reject,
        Reply,
        TextPart,
        TurnContext,
        TurnMessage,
    )
    from harness_core.config import Settings, load_settings, settings_from_mapping
    from harness_core.errors import (
        ConfigError,
        EmbeddedTemporalError,
        HarnessAlreadyStartedError,
        HarnessConflictError,
        HarnessError,
        HarnessNotStartedError,
        HarnessStoppedError,
        TaskClosedError,
    )
    from harness_core.group import HarnessGroup, harnesses_lifespan
    from harness_core.harness import AgentState, Harness, ParticipantResolver, RouteOptions
    from harness_core.model import EchoModel, Gate, Model, ScriptedModel, TurnInput, TurnOutput
    from harness_core.urls import public_url

# The public names load on first use, so that `harness` can install its signal handlers before the
# heavy imports (temporalio, a2a-sdk) run: a Ctrl-C during start-up then stops it cleanly.
_HOMES = {
    "Agent": "harness_core.agents.turn",
    "Artifact": "harness_core.agents.turn",
    "Ask": "harness_core.agents.turn",
    "AuthRequired": "harness_core.agents.turn",
    "Complete": "harness_core.agents.turn",
    "DataPart": "harness_core.agents.turn",
    "Delegate": "harness_core.agents.turn",
    "Delegation": "harness_core.agents.turn",
    "Fail": "harness_core.agents.turn",
    "FilePart": "harness_core.agents.turn",
    "Reject": "harness_core.agents.turn",
    "Reply": "harness_core.agents.turn",
    "TextPart": "harness_core.agents.turn",
    "TurnContext": "harness_core.agents.turn",
    "TurnMessage": "harness_core.agents.turn",
    "AgentState": "harness_core.harness",
    "ConfigError": "harness_core.errors",
    "EchoModel": "harness_core.model",
    "EmbeddedTemporalError": "harness_core.errors",
    "Gate": "harness_core.model",
    "Harness": "harness_core.harness",
    "HarnessAlreadyStartedError": "harness_core.errors",
    "HarnessConflictError": "harness_core.errors",
    "HarnessError": "harness_core.errors",
    "HarnessGroup": "harness_core.group",
    "HarnessNotStartedError": "harness_core.errors",
    "HarnessStoppedError": "harness_core.errors",
    "Model": "harness_core.model",
    "ParticipantResolver": "harness_core.harness",
    "RouteOptions": "harness_core.harness",
    "harnesses_lifespan": "harness_core.group",
    "public_url": "harness_core.urls",
    "ScriptedModel": "harness_core.model",
    "Settings": "harness_core.config",
    "TaskClosedError": "harness_core.errors",
    "TurnInput": "harness_core.model",
    "TurnOutput": "harness_core.model",
    "load_settings": "harness_core.config",
    "settings_from_mapping": "harness_core.config",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'harness_core' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "Agent",
    "AgentState",
    "Artifact",
    "Ask",
    "AuthRequired",
    "Complete",
    "ConfigError",
    "DataPart",
    "Delegate",
    "Delegation",
    "EchoModel",
    "EmbeddedTemporalError",
    "Fail",
    "FilePart",
    "Gate",
    "Harness",
    "HarnessAlreadyStartedError",
    "HarnessConflictError",
    "HarnessError",
    "HarnessGroup",
    "HarnessNotStartedError",
    "HarnessStoppedError",
    "Model",
    "ParticipantResolver",
    "Reject",
    "Reply",
    "RouteOptions",
    "ScriptedModel",
    "Settings",
    "TaskClosedError",
    "TextPart",
    "TurnContext",
    "TurnInput",
    "TurnMessage",
    "TurnOutput",
    "harnesses_lifespan",
    "load_settings",
    "public_url",
    "settings_from_mapping",
]
