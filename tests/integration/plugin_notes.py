"""A small plugin the plugin tests load by path (``tests.integration.plugin_notes:make``): a table of
notes, a tool that writes one, a capability line, and a turn gate that declines a message holding its
``silent_word`` option."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from harness_core.agents.turn import TextPart, TurnMessage
from harness_core.plugins import Plugin, PluginContext, PluginStore, PluginTables, plugin_context

#: The versions ``ensure_tables`` was called from, in order (one call per start).
SETUPS: list[int] = []
#: What each gate call saw: (task id, the text of the newest message).
GATED: list[tuple[str, str]] = []
_lock = threading.Lock()

CAPABILITY = "You can keep notes: call remember with the text of one."


def ensure_tables(tables: PluginTables, seen: int) -> None:
    with _lock:
        SETUPS.append(seen)
    tables.execute(
        "CREATE TABLE IF NOT EXISTS notes_items "
        "(id INTEGER PRIMARY KEY, task_id TEXT NOT NULL, text TEXT NOT NULL)"
    )


async def remember(text: str) -> str:
    """Keep a note for later.

    Args:
        text: what to note.
    """
    ctx = plugin_context()
    assert ctx.db is not None
    await ctx.db.execute(
        "INSERT INTO notes_items (task_id, text) VALUES (?, ?)", (ctx.task_id, text)
    )
    [(count,)] = await ctx.db.query("SELECT count(*) FROM notes_items")
    return f"noted; {count} note(s) kept"


def _text(message: TurnMessage) -> str:
    return " ".join(p.text for p in message.parts if isinstance(p, TextPart))


async def gate(ctx: PluginContext, history: Sequence[TurnMessage]) -> bool:
    newest = _text(history[-1]) if history else ""
    with _lock:
        GATED.append((ctx.task_id, newest))
    return str(ctx.options.get("silent_word", "hush")) not in newest


def make() -> Plugin:
    return Plugin(
        key="notes",
        tools=(remember,),
        capability=CAPABILITY,
        gate=gate,
        store=PluginStore(version=1, ensure_tables=ensure_tables),
    )
