"""The writer of docs/tutorial.md: an agent of your own, in Python.

One async function per turn: it reports progress while it works and returns the task's result with
an artifact. ``make`` is the factory that ``writer.toml`` names.
"""

from __future__ import annotations

from harness_core import Artifact, Complete, TextPart, TurnContext
from harness_core.agents.turn import TurnResult


async def writer(ctx: TurnContext) -> TurnResult:
    topic = ctx.new_messages[-1].text.strip() or "nothing in particular"
    await ctx.progress("outline", f"outlining a note on {topic}")
    note = f"# {topic}\n\nA short note on {topic}, written by an agent.\n"
    await ctx.progress("draft", "writing it down")
    return Complete(
        f"Here is a note on {topic}.",
        artifacts=[Artifact((TextPart(note),), name="note.md")],
    )


def make() -> object:
    return writer
