"""Plugins: what a plugin is (``contract``), its own tables (``tables``), and one agent's plugins
loaded, checked and fanned out (``runtime``). ``docs/plugins.md`` is the guide."""

from __future__ import annotations

from harness_core.plugins.contract import (
    PLUGIN_CONTRACT_VERSION,
    DisplacedListener,
    Gate,
    Plugin,
    PluginContext,
    PluginError,
    PluginStore,
    PluginToolError,
    TableSetup,
    plugin_context,
)
from harness_core.plugins.runtime import AgentPlugins, load_plugins
from harness_core.plugins.tables import PluginDb, PluginTables

__all__ = [
    "PLUGIN_CONTRACT_VERSION",
    "AgentPlugins",
    "DisplacedListener",
    "Gate",
    "Plugin",
    "PluginContext",
    "PluginDb",
    "PluginError",
    "PluginStore",
    "PluginTables",
    "PluginToolError",
    "TableSetup",
    "load_plugins",
    "plugin_context",
]
