"""harness-runtime's core: configuration, agents, the group lifecycle, Temporal, the store.

Nothing here imports the HTTP layer (``harness_asgi``) at module level.
"""

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
from harness_core.group import HarnessGroup
from harness_core.harness import AgentState, Harness
from harness_core.model import EchoModel, Gate, Model, ScriptedModel
from harness_core.payloads import TurnInput, TurnOutput

__all__ = [
    "AgentState",
    "ConfigError",
    "EchoModel",
    "EmbeddedTemporalError",
    "Gate",
    "Harness",
    "HarnessAlreadyStartedError",
    "HarnessConflictError",
    "HarnessError",
    "HarnessGroup",
    "HarnessNotStartedError",
    "HarnessStoppedError",
    "Model",
    "ScriptedModel",
    "Settings",
    "TaskClosedError",
    "TurnInput",
    "TurnOutput",
    "load_settings",
    "settings_from_mapping",
]
