"""One agent's plugins: loaded, checked, and their hooks fanned out.

:func:`load_plugins` builds an agent's :class:`AgentPlugins` from its file (``[agent] plugins``, each
``"package.module:name"`` naming a :class:`~harness_core.plugins.contract.Plugin` or a function that
returns one, with options in ``[plugins.<key>]``) and from code (``Harness(settings, plugins=[...])``).
It refuses, before anything starts and naming both parties: a key used twice, a plugin written for
another contract version, a tool name two plugins (or a plugin and ``[model] tools``) both use, and
an options table for a plugin that is not loaded. At start, :meth:`AgentPlugins.check_secrets`
refuses a declared secret that is missing or empty, and :meth:`AgentPlugins.open` sets up the
plugins' tables (``harness_core.plugins.tables``).

The hooks run in activities:

- :meth:`AgentPlugins.gate`: every gate at once; the turn is taken only if all say yes, and a gate
  that raises counts as yes (fail open: a wrong reply is visible, a wrong silence is not), with a
  warning naming the plugin.
- :meth:`AgentPlugins.displaced`: every compaction listener at once; one that raises is logged and
  never stops the compaction or another listener.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from harness_core.errors import ConfigError
from harness_core.plugins.contract import PLUGIN_CONTRACT_VERSION, Plugin, PluginContext
from harness_core.plugins.tables import (
    PluginDb,
    StoreEntry,
    check_store_entries,
    ensure_plugin_tables,
)

if TYPE_CHECKING:
    from harness_core.agents.turn import TurnMessage
    from harness_core.agents.workspace import WorkspaceBacking
    from harness_core.config import Settings
    from harness_core.store import TaskStore

__all__ = ["AgentPlugins", "load_plugins"]

log = logging.getLogger("harness.plugins")

_KEY = re.compile(r"[a-z][a-z0-9_-]{0,39}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@attrs.frozen
class Loaded:
    """A plugin and where it came from (what errors name)."""

    plugin: Plugin
    origin: str


class AgentPlugins:
    """The plugins of one agent, checked; their contexts once the agent's store is open."""

    def __init__(
        self, agent_id: str, loaded: Sequence[Loaded], options: Mapping[str, Mapping[str, Any]]
    ) -> None:
        self.agent_id = agent_id
        self._loaded = tuple(loaded)
        self._options = options
        self._contexts: dict[str, PluginContext] = {
            item.plugin.key: self._context(item.plugin, None) for item in self._loaded
        }

    def __bool__(self) -> bool:
        return bool(self._loaded)

    @property
    def plugins(self) -> tuple[Plugin, ...]:
        return tuple(item.plugin for item in self._loaded)

    def origin(self, key: str) -> str:
        return next(item.origin for item in self._loaded if item.plugin.key == key)

    def _context(self, plugin: Plugin, db: PluginDb | None) -> PluginContext:
        return PluginContext(
            agent_id=self.agent_id,
            key=plugin.key,
            options=dict(self._options.get(plugin.key, {})),
            db=db,
            secret_names=plugin.secrets,
        )

    # -- start --------------------------------------------------------------------------------------

    def check_secrets(self, label: str) -> None:
        """Refuse a declared secret that is unset or empty, naming the variable and the plugin
        (never a value)."""
        for item in self._loaded:
            for name in item.plugin.secrets:
                value = os.environ.get(name)
                if value is None or not value.strip():
                    state = "not set" if value is None else "empty"
                    raise ConfigError(
                        f"{label}: environment variable {name} is {state}; plugin "
                        f"{item.plugin.key!r} ({item.origin}) requires it"
                    )

    def store_entries(self) -> list[StoreEntry]:
        entries: list[StoreEntry] = []
        for item in self._loaded:
            store = item.plugin.store
            if store is not None:
                name = store.name or item.plugin.key.replace("-", "_")
                entries.append(
                    StoreEntry(item.plugin.key, name, store.version, store.ensure_tables)
                )
        return entries

    def open(self, store: TaskStore, label: str) -> None:
        """Set up the plugins' tables in ``store`` (blocking: run it in a worker thread) and give
        each plugin with a store its handle."""
        entries = self.store_entries()
        ensure_plugin_tables(store, entries, label=label)
        names = {entry.key: entry.name for entry in entries}
        for item in self._loaded:
            name = names.get(item.plugin.key)
            db = PluginDb(store, item.plugin.key, name) if name is not None else None
            self._contexts[item.plugin.key] = self._context(item.plugin, db)

    def context(self, key: str, task_id: str = "", context_id: str = "") -> PluginContext:
        """The context of plugin ``key`` for a task."""
        return self._contexts[key].for_task(task_id, context_id)

    # -- what the LLM agent gets ----------------------------------------------------------------------

    def tools(self) -> list[tuple[str, Callable[..., Awaitable[Any]]]]:
        """(plugin key, async function) for every plugin tool, in load order."""
        return [(item.plugin.key, tool) for item in self._loaded for tool in item.plugin.tools]

    def workspace(self) -> WorkspaceBacking | None:
        """The workspace backing a plugin supplies (at most one does), or None."""
        return next(
            (item.plugin.workspace for item in self._loaded if item.plugin.workspace is not None),
            None,
        )

    def capabilities(self) -> str:
        """The plugins' capability texts, joined by blank lines ("" when there are none)."""
        return "\n\n".join(
            item.plugin.capability.strip()
            for item in self._loaded
            if item.plugin.capability.strip()
        )

    # -- hooks -----------------------------------------------------------------------------------------

    def _gates(self) -> list[Plugin]:
        return [item.plugin for item in self._loaded if item.plugin.gate is not None]

    @property
    def gated(self) -> bool:
        """Some plugin has a turn gate."""
        return bool(self._gates())

    async def gate(
        self, history: Sequence[TurnMessage], *, task_id: str, context_id: str
    ) -> tuple[str, ...]:
        """Ask every gate at once whether the agent takes this turn: the keys of the plugins that
        said no (empty: take it). A gate that raises says yes, with a warning naming it."""
        gated = self._gates()
        answers: dict[str, bool] = {}

        async def ask(plugin: Plugin) -> None:
            assert plugin.gate is not None
            try:
                answers[plugin.key] = bool(
                    await plugin.gate(self.context(plugin.key, task_id, context_id), history)
                )
            except Exception as error:
                log.warning(
                    "task %s: the turn gate of plugin %s raised %s; the turn is taken (a gate "
                    "that fails says yes)",
                    task_id,
                    plugin.key,
                    type(error).__name__,
                )
                answers[plugin.key] = True

        async with anyio.create_task_group() as tg:
            for plugin in gated:
                tg.start_soon(ask, plugin)
        return tuple(plugin.key for plugin in gated if not answers.get(plugin.key, True))

    def summarizer(
        self,
    ) -> Callable[..., Awaitable[str]] | None:
        """The summary maker a plugin supplies (at most one does), bound to its context."""
        plugin = next((i.plugin for i in self._loaded if i.plugin.summarize is not None), None)
        if plugin is None or plugin.summarize is None:
            return None
        summarize = plugin.summarize

        async def made(
            previous: str | None,
            messages: Sequence[TurnMessage],
            *,
            task_id: str,
            context_id: str,
        ) -> str:
            return await summarize(
                self.context(plugin.key, task_id, context_id), previous, messages
            )

        return made

    @property
    def listens(self) -> bool:
        """Some plugin listens to compactions."""
        return any(item.plugin.on_displaced is not None for item in self._loaded)

    async def displaced(
        self, messages: Sequence[TurnMessage], *, task_id: str, context_id: str
    ) -> None:
        """Tell every compaction listener, at once, which messages are folded away. One that
        raises is logged with its key; the others are told all the same, and this never raises."""
        if not messages:
            return

        async def tell(plugin: Plugin) -> None:
            assert plugin.on_displaced is not None
            try:
                await plugin.on_displaced(self.context(plugin.key, task_id, context_id), messages)
            except Exception as error:
                log.error(
                    "task %s: the compaction listener of plugin %s raised %s; the compaction "
                    "goes on",
                    task_id,
                    plugin.key,
                    type(error).__name__,
                )

        async with anyio.create_task_group() as tg:
            for item in self._loaded:
                if item.plugin.on_displaced is not None:
                    tg.start_soon(tell, item.plugin)


def _import_plugin(spec: str, key: str, label: str) -> Plugin:
    from harness_core.agents.builtin import import_named

    target = import_named(spec, key, label)
    made: object = target
    if not isinstance(target, Plugin) and callable(target):
        try:
            made = target()
        except Exception as error:
            raise ConfigError(
                f"{label}: '{key}' = {spec!r} raised {type(error).__name__}: {error}"
            ) from error
    if not isinstance(made, Plugin):
        raise ConfigError(
            f"{label}: '{key}' = {spec!r} is a {type(made).__name__}, not a "
            "harness_core.plugins.Plugin (or a function that returns one)"
        )
    return made


def load_plugins(settings: Settings, code: Sequence[Plugin] = ()) -> AgentPlugins:
    """The agent's plugins: those its file names, then those given in code, checked (see the
    module's docstring). Raises :class:`ConfigError` naming the file and the plugins."""
    label = settings.label
    loaded: list[Loaded] = []
    for index, spec in enumerate(settings.agent.plugins):
        key = f"agent.plugins[{index}]"
        loaded.append(Loaded(_import_plugin(spec, key, label), f"{key} = {spec!r}"))
    for index, plugin in enumerate(code):
        if not isinstance(plugin, Plugin):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigError(
                f"agent {settings.agent_id}: Harness(plugins=[...]) item {index} is a "
                f"{type(plugin).__name__}, not a harness_core.plugins.Plugin"
            )
        loaded.append(Loaded(plugin, f"Harness(plugins=[...]) item {index}"))
    _check(loaded, settings, label)
    return AgentPlugins(settings.agent_id, loaded, settings.plugins)


def _check(loaded: Sequence[Loaded], settings: Settings, label: str) -> None:
    seen: dict[str, Loaded] = {}
    tools: dict[str, str] = {}
    backing: str | None = None
    summarizer: str | None = None
    for item in loaded:
        plugin = item.plugin
        where = f"plugin {plugin.key!r} ({item.origin})"
        if not isinstance(plugin.key, str) or _KEY.fullmatch(plugin.key) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ConfigError(
                f"{label}: {item.origin}: the plugin's key {plugin.key!r} must match {_KEY.pattern}"
            )
        if plugin.key in seen:
            raise ConfigError(
                f"{label}: plugin key {plugin.key!r} is used twice: by {seen[plugin.key].origin} "
                f"and by {item.origin}"
            )
        seen[plugin.key] = item
        if plugin.contract_version != PLUGIN_CONTRACT_VERSION:
            raise ConfigError(
                f"{label}: {where} was written for plugin contract version "
                f"{plugin.contract_version!r}; this runtime speaks version "
                f"{PLUGIN_CONTRACT_VERSION}"
            )
        if plugin.workspace is not None:
            if backing is not None:
                raise ConfigError(
                    f"{label}: {backing} and {where} both supply a workspace backing; at most "
                    "one plugin of an agent may"
                )
            if not settings.model.is_llm:
                raise ConfigError(
                    f"{label}: {where} supplies a workspace backing, which only the built-in "
                    f'LLM agent uses (model.kind is "{settings.model.kind}")'
                )
            backing = where
        if plugin.summarize is not None:
            if summarizer is not None:
                raise ConfigError(
                    f"{label}: {summarizer} and {where} both summarize compactions; at most one "
                    "plugin of an agent may"
                )
            summarizer = where
        for name in plugin.secrets:
            if _ENV_NAME.fullmatch(name) is None:
                raise ConfigError(
                    f"{label}: {where} declares the secret {name[:40]!r}, which is not the name "
                    "of an environment variable"
                )
        if plugin.tools and not settings.model.is_llm:
            raise ConfigError(
                f"{label}: {where} adds tools, which only the built-in LLM agent calls "
                f'(model.kind is "{settings.model.kind}")'
            )
        for tool in plugin.tools:
            name = _tool_name(tool)
            if name in tools:
                raise ConfigError(
                    f"{label}: the tool {name!r} is given twice: by {tools[name]} and by {where}"
                )
            tools[name] = where
    for key in settings.plugins:
        if key not in seen:
            loaded_keys = ", ".join(repr(k) for k in seen) or "none"
            raise ConfigError(
                f"{label}: [plugins.{key}] holds options for a plugin {key!r}, which is not "
                f"loaded (loaded: {loaded_keys}; agent.plugins names them)"
            )
    check_store_entries(AgentPlugins(settings.agent_id, loaded, {}).store_entries(), label)


def _tool_name(tool: Callable[..., Any]) -> str:
    from harness_core.agents.tools import tool_name

    return tool_name(tool)
