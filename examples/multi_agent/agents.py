"""The team of examples/multi_agent: scripted agents whose delegations are decided in code, so the
example runs the same every time (see the README for a variant on a real model server).

* ``a``, the coordinator, hands the question to ``b`` (research), ``c`` (design) and ``far``, then
  answers with all three contributions. ``far`` is agent ``e`` reached as an agent served elsewhere
  would be (``[[agents]]`` in ``a.toml``: its URL, and its updates pushed to ``a``).
* ``b`` asks ``d`` (the oracle) and reports what it heard.
* ``c``, ``d`` and ``e`` answer at once.

Each turn emits a progress update, so a client streaming from ``a`` sees the team at work. Two
environment variables serve the tests: ``MULTI_AGENT_JOURNAL`` (a file each turn appends
``<agent> start|done <first words>`` to) and ``MULTI_AGENT_D_DELAY`` (seconds ``d`` thinks).
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from harness_core import Complete, Delegate, Delegation, TurnContext
from harness_core.agents.turn import TurnResult

__all__ = ["a", "b", "c", "d", "e"]


def _journal(agent: str, event: str, ctx: TurnContext) -> None:
    path = os.environ.get("MULTI_AGENT_JOURNAL")
    if not path:
        return
    words = " ".join((ctx.new_messages[-1].text if ctx.new_messages else "").split()[:3])
    with Path(path).open("a") as journal:
        journal.write(f"{agent} {event} {ctx.task_id} {words}\n")


async def _coordinator(ctx: TurnContext) -> TurnResult:
    _journal("a", "start", ctx)
    if ctx.number == 1:
        await ctx.progress("plan", "a: asking b (research), c (design) and far (e)")
        question = ctx.new_messages[-1].text
        result: TurnResult = Delegate(
            [
                Delegation("b", f"research: {question}"),
                Delegation("c", f"design: {question}"),
                Delegation("far", f"from afar: {question}"),
            ],
            message="a is waiting for b, c and far",
        )
    else:
        await ctx.progress("summary", "a: putting the answers together")
        answers = sorted(m.text for m in ctx.new_messages)
        result = Complete("the team says: " + " | ".join(answers))
    _journal("a", "done", ctx)
    return result


async def _researcher(ctx: TurnContext) -> TurnResult:
    _journal("b", "start", ctx)
    if ctx.number == 1:
        await ctx.progress("ask", "b: asking d, the oracle")
        result: TurnResult = Delegate(Delegation("d", "what is the answer?"))
    else:
        result = Complete(f"b found: {ctx.new_messages[-1].text}")
    _journal("b", "done", ctx)
    return result


async def _designer(ctx: TurnContext) -> TurnResult:
    _journal("c", "start", ctx)
    await ctx.progress("sketch", "c: sketching")
    _journal("c", "done", ctx)
    return Complete("c drew it in blue")


async def _oracle(ctx: TurnContext) -> TurnResult:
    _journal("d", "start", ctx)
    await ctx.progress("think", "d: thinking")
    await anyio.sleep(float(os.environ.get("MULTI_AGENT_D_DELAY", "0")))
    _journal("d", "done", ctx)
    return Complete("d says 42")


async def _far(ctx: TurnContext) -> TurnResult:
    _journal("e", "start", ctx)
    await ctx.progress("wave", "e: waving from afar")
    _journal("e", "done", ctx)
    return Complete("e waves from afar")


def a() -> object:
    return _coordinator


def b() -> object:
    return _researcher


def c() -> object:
    return _designer


def d() -> object:
    return _oracle


def e() -> object:
    return _far
