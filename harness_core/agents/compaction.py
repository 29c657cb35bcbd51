"""Compaction: keeping what the built-in LLM agent sends the model within its context budget.

Each agent has a budget in tokens (``[model] context_tokens``). A model request's size is
*estimated*: neither Chat Completions nor pydantic-ai offers a local tokenizer for every provider,
so a token is counted per four characters of text (messages, tool calls' arguments, tool results),
plus four per part and a thousand per image or document. When a request would pass the budget, the
oldest messages of the task (after its last fold, and never the messages the turn answers) are
folded into a summary, so that what stays fits in half the budget (the context's earlier tasks
are left out first, and nothing is folded when folding could not bring the request under the
budget, nor on a turn's last step): the model step says which
(``ModelStep.compact``), the workflow runs the ``compact`` activity, then asks again. The summary is
made once per fold (stored with it, found again by a retry), by the model or by a plugin's
``summarize``; every plugin's compaction listener hears the exact slice first, once. A request
the budget cannot hold even so (the turn's own messages and tool results) is sent as it is, with a
warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import attrs

from harness_core.agents.turn import TurnMessage

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "SUMMARY_INSTRUCTIONS",
    "Row",
    "Transcript",
    "choose_fold",
    "estimate_tokens",
    "transcript",
]

#: ``[model] context_tokens`` when it is not set.
DEFAULT_CONTEXT_TOKENS = 100_000

SUMMARY_INSTRUCTIONS = (
    "You compress a conversation so that it can go on without its earlier messages. Write a "
    "summary of the messages below (and of the earlier summary, if there is one) that keeps "
    "every fact, name, number, decision, tool result and open question someone needs to "
    "continue the conversation. Write it in plain sentences, without a preamble."
)


@attrs.frozen
class Row:
    """One message of the task at its position, with the exchange (tool calls and results) of
    the turn it answered, when it is such an answer."""

    position: int
    message: TurnMessage
    exchange: tuple[Any, ...] = ()


@attrs.frozen
class Transcript:
    """What a model step is given of the task: its messages since its last fold (``summary``
    says what came before), of which the first ``foldable`` may be folded (not the turn's own)."""

    rows: tuple[Row, ...]
    summary: str | None = None
    foldable: int = 0


def estimate_tokens(messages: Sequence[Any]) -> int:
    """The estimated tokens of pydantic-ai messages (see the module's docstring)."""
    from pydantic_ai import messages as pai

    chars = 0
    parts = 0
    media = 0
    for message in messages:
        for part in message.parts:
            parts += 1
            if isinstance(part, pai.ToolCallPart):
                chars += len(part.tool_name) + len(part.args_as_json_str())
            elif isinstance(part, pai.ToolReturnPart):
                chars += len(part.model_response_str())
            elif isinstance(part, pai.UserPromptPart):
                content = part.content
                if isinstance(content, str):
                    chars += len(content)
                else:
                    for item in content:
                        if isinstance(item, str):
                            chars += len(item)
                        else:
                            media += 1
            else:
                chars += len(str(getattr(part, "content", "")))
    return chars // 4 + 4 * parts + 1000 * media


def choose_fold(costs: Sequence[int], fixed: int, budget: int, foldable: int) -> int:
    """How many of the oldest rows to fold so that what stays fits in half the budget.

    ``costs`` are the rows' estimated tokens, oldest first; ``fixed`` what the request holds
    besides them (system prompt, summary, the turn's own exchange); only the first ``foldable``
    rows may be folded (the turn's own messages may not). 0: nothing to fold, or folding all that
    may be folded would still leave the request over the budget (it would not help).
    """
    if fixed + sum(costs[foldable:]) > budget:
        return 0
    target = budget // 2
    kept = fixed + sum(costs)
    cut = 0
    while cut < foldable and kept > target:
        kept -= costs[cut]
        cut += 1
    return cut


def transcript(
    previous: str | None, messages: Sequence[Any], exchanges: dict[int, list[Any]]
) -> str:
    """The folded messages as text for the summarizing model (``messages`` are TurnMessages
    with their positions as ``(position, message)``; an agent answer with an exchange shows its
    tool calls and results too)."""
    from harness_core.agents.turn import DataPart, FilePart, TextPart

    lines: list[str] = []
    if previous:
        lines.append(f"Earlier summary:\n{previous}\n")
    for position, message in messages:
        for item in exchanges.get(position, ()):
            entry = cast("dict[str, Any]", item) if isinstance(item, dict) else {}
            for result in cast("list[dict[str, Any]]", entry.get("tool_results", [])):
                lines.append(f"tool {result.get('name')} returned: {result.get('text')}")
            for part in cast("list[dict[str, Any]]", entry.get("parts", [])):
                if part.get("part_kind") == "tool-call":
                    lines.append(f"agent called {part.get('tool_name')}({part.get('args')})")
        texts: list[str] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                texts.append(part.text)
            elif isinstance(part, DataPart):
                texts.append(str(part.data))
            elif isinstance(part, FilePart):
                texts.append(f"[file {part.name or part.url or ''}]")
        who = "user" if message.role == "user" else "agent"
        lines.append(f"{who}: {' '.join(texts)}")
    return "\n".join(lines)
