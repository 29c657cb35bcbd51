"""A small plugin: a journal the agent keeps in a table of its own.

- ``jot(text)`` and ``journal()`` are tools the LLM agent may call: they write and read the table
  ``journal_entries`` in the agent's store (through the plugin's narrow handle).
- The turn gate lets the agent stay silent: a message addressed to someone else (``@name ...``, in
  a room several agents share) is not its turn, unless the name is the ``answer_to`` option.
- The compaction listener keeps the ids of the messages a compaction folds away, in
  ``journal_folded``, so that nothing the agent was told is lost from its record.
- The table survives restarts: ``ensure_tables`` runs at every start and creates only what is
  missing; ``version`` says which layout this code needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness_core.agents.turn import TextPart, TurnMessage
from harness_core.plugins import Plugin, PluginContext, PluginStore, PluginTables, plugin_context


def ensure_tables(tables: PluginTables, seen: int) -> None:
    """Version 1: the entries; version 2 added the folded messages (a store at 1 gets it)."""
    tables.execute(
        "CREATE TABLE IF NOT EXISTS journal_entries "
        "(id INTEGER PRIMARY KEY, task_id TEXT NOT NULL, text TEXT NOT NULL)"
    )
    tables.execute(
        "CREATE TABLE IF NOT EXISTS journal_folded (task_id TEXT NOT NULL, message_id TEXT NOT NULL, "
        "PRIMARY KEY (task_id, message_id))"
    )


async def jot(text: str) -> str:
    """Write an entry into the journal.

    Args:
        text: the entry.
    """
    ctx = plugin_context()
    assert ctx.db is not None
    await ctx.db.execute(
        "INSERT INTO journal_entries (task_id, text) VALUES (?, ?)", (ctx.task_id, text)
    )
    return "written"


async def journal() -> str:
    """Read the whole journal, oldest entry first."""
    ctx = plugin_context()
    assert ctx.db is not None
    rows = await ctx.db.query("SELECT text FROM journal_entries ORDER BY id")
    return f"{len(rows)} entries: " + "; ".join(text for (text,) in rows)


def _text(message: TurnMessage) -> str:
    return " ".join(p.text for p in message.parts if isinstance(p, TextPart)).strip()


async def my_turn(ctx: PluginContext, history: Sequence[TurnMessage]) -> bool:
    """Not this agent's turn when the newest message is addressed to another (``@name ...``)."""
    newest = _text(history[-1]) if history else ""
    if not newest.startswith("@"):
        return True
    addressee = newest[1:].split(maxsplit=1)[0] if len(newest) > 1 else ""
    return addressee == str(ctx.options.get("answer_to", ctx.agent_id))


async def folded(ctx: PluginContext, messages: Sequence[TurnMessage]) -> None:
    """Keep the ids of the messages a compaction folds into a summary."""
    assert ctx.db is not None
    rows = [(ctx.task_id, m.message_id) for m in messages]
    await ctx.db.run(
        lambda tables: tables.executemany(
            "INSERT OR IGNORE INTO journal_folded (task_id, message_id) VALUES (?, ?)", rows
        )
    )


def make() -> Plugin:
    return Plugin(
        key="journal",
        tools=(jot, journal),
        capability="You keep a journal: jot writes an entry, journal reads them all.",
        gate=my_turn,
        on_displaced=folded,
        store=PluginStore(version=2, ensure_tables=ensure_tables),
    )
