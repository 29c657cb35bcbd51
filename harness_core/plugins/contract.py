"""The plugin contract: what a plugin is, and what its code is given.

A plugin is a frozen attrs value (:class:`Plugin`) with a unique ``key`` and the contract version it
was written for. Everything else is an optional capability, and new capabilities only ever arrive as
new optional fields (a field is never removed or re-typed without a new contract version):

- ``tools``: async functions the built-in LLM agent may call, each a durable activity like the
  agent's own ``[model] tools``;
- ``capability``: text added to the LLM agent's system prompt;
- ``gate``: asked before each turn whether the agent takes it (:data:`Gate`);
- ``on_displaced``: told which messages a compaction folds away (:data:`DisplacedListener`);
- ``summarize``: makes a compaction's summary instead of the model (:data:`Summarizer`);
- ``store``: tables of its own in the agent's store (:class:`PluginStore`);
- ``workspace``: where the tasks' file workspaces are kept (at most one plugin per agent);
- ``secrets``: the environment variables it needs; the agent does not start without them.

Plugin code runs in activities only (tools, gates, listeners), never in workflow code, so it may do
I/O. It reaches its options, its secrets and its tables through :class:`PluginContext`: a hook is
given it, and a tool asks for it with :func:`plugin_context` while it runs.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from harness_core.errors import HarnessError

if TYPE_CHECKING:
    from harness_core.agents.turn import TurnMessage
    from harness_core.agents.workspace import WorkspaceBacking
    from harness_core.plugins.tables import PluginDb, PluginTables

__all__ = [
    "PLUGIN_CONTRACT_VERSION",
    "DisplacedListener",
    "Gate",
    "Plugin",
    "PluginContext",
    "PluginError",
    "PluginStore",
    "PluginToolError",
    "Summarizer",
    "TableSetup",
    "plugin_context",
]

#: The contract this runtime speaks. A plugin written for another is refused at start.
PLUGIN_CONTRACT_VERSION = 1

#: ``gate(ctx, history) -> bool``: whether the agent takes this turn. ``history`` is the task's
#: messages as the turn would see them, the new ones included. A gate that raises counts as yes.
Gate = Callable[["PluginContext", "Sequence[TurnMessage]"], Awaitable[bool]]

#: ``on_displaced(ctx, messages)``: a compaction is about to fold ``messages`` (the exact,
#: inclusive slice, oldest first) into a summary. What it raises is logged and forgotten.
DisplacedListener = Callable[["PluginContext", "Sequence[TurnMessage]"], Awaitable[None]]

#: ``summarize(ctx, previous, messages) -> str``: the summary of a compaction's ``messages`` (and of
#: ``previous``, the summary before them, or None), instead of the model's. At most one plugin.
Summarizer = Callable[["PluginContext", "str | None", "Sequence[TurnMessage]"], Awaitable[str]]

#: ``ensure_tables(tables, last_seen_version)``: make the plugin's tables what ``version`` needs,
#: from what ``last_seen_version`` left (0: nothing yet). Called at every start: idempotent.
TableSetup = Callable[["PluginTables", int], None]


def _no_options() -> Mapping[str, Any]:
    return {}


@attrs.frozen
class PluginStore:
    """A plugin's own tables in the agent's store, outside the runtime's migrations.

    ``version`` (an integer of at least 1) says which layout the plugin's code needs;
    ``ensure_tables`` brings the tables there. The store remembers the last version per plugin in
    ``plugin_migrations``; a version lower than the remembered one (a downgrade) stops the start.
    ``name`` is the tables' namespace: every table and index is named ``<name>_...`` (the
    plugin's key when left out).
    """

    version: int
    ensure_tables: TableSetup
    name: str | None = None


@attrs.frozen
class Plugin:
    """One plugin: a unique key, the contract version, and the capabilities it adds."""

    key: str
    contract_version: int = PLUGIN_CONTRACT_VERSION
    tools: tuple[Callable[..., Awaitable[Any]], ...] = attrs.field(default=(), converter=tuple)
    capability: str = ""
    gate: Gate | None = None
    on_displaced: DisplacedListener | None = None
    store: PluginStore | None = None
    secrets: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: Makes the summaries of compactions instead of the model (at most one plugin of an agent).
    summarize: Summarizer | None = None
    #: Where the tasks' workspaces are kept, instead of the agent's store (at most one plugin
    #: of an agent supplies one); a ``harness_core.agents.workspace.WorkspaceBacking``.
    workspace: WorkspaceBacking | None = None


class PluginError(HarnessError):
    """A plugin's code was used where it cannot work (its tables outside an activity, a secret it
    did not declare)."""


class PluginToolError(HarnessError, ValueError):
    """A plugin's tool cannot be offered to the model (not async, no JSON schema for its
    parameters, a name another tool has); the message names the plugin."""


@attrs.frozen
class PluginContext:
    """What a plugin's code is given: its agent, its options, its secrets and its tables.

    ``options`` is the ``[plugins.<key>]`` table of the agent's file (empty without one).
    ``db`` is ``None`` for a plugin without a :class:`PluginStore`. ``task_id`` and
    ``context_id`` name the task a hook or tool runs for (empty outside a task).
    """

    agent_id: str
    key: str
    options: Mapping[str, Any] = attrs.field(factory=_no_options)
    db: PluginDb | None = None
    secret_names: tuple[str, ...] = ()
    task_id: str = ""
    context_id: str = ""

    def secret(self, name: str) -> str:
        """The value of one of the plugin's declared ``secrets`` (checked at start)."""
        if name not in self.secret_names:
            raise PluginError(
                f"plugin {self.key!r} asked for the secret {name}, which it does not declare "
                "(add it to Plugin(secrets=...))"
            )
        return os.environ.get(name, "").strip()

    def for_task(self, task_id: str, context_id: str) -> PluginContext:
        return attrs.evolve(self, task_id=task_id, context_id=context_id)


_current: contextvars.ContextVar[PluginContext | None] = contextvars.ContextVar(
    "harness_plugin_context", default=None
)


def plugin_context() -> PluginContext:
    """The context of the plugin whose tool is running (for the task it runs in).

    Raises :class:`PluginError` outside a plugin's tool call.
    """
    found = _current.get()
    if found is None:
        raise PluginError("plugin_context() is only available while a plugin's tool runs")
    return found


def entered(context: PluginContext) -> contextvars.Token[PluginContext | None]:
    """Make ``context`` what :func:`plugin_context` returns (the tool call's activity does)."""
    return _current.set(context)


def left(token: contextvars.Token[PluginContext | None]) -> None:
    _current.reset(token)
