"""The editor of docs/tutorial.md: it asks the writer over A2A, then answers with the note.

The first turn delegates (the writer's task runs on its own, durably); the next turn gets the
writer's answer as its new messages.
"""

from __future__ import annotations

from harness_core import Complete, Delegate, Delegation, TurnContext
from harness_core.agents.turn import TurnResult


async def editor(ctx: TurnContext) -> TurnResult:
    if ctx.number == 1:
        await ctx.progress("ask", "asking the writer")
        topic = ctx.new_messages[-1].text
        return Delegate([Delegation("writer", topic)], message="waiting for the writer")
    answer = ctx.new_messages[-1].text
    return Complete(f"Edited: {answer}")


def make() -> object:
    return editor
