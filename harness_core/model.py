"""Agents for tests and demos, and the older one-text-in, one-text-out model seam.

``ScriptedModel`` and ``EchoModel`` are agents (they implement the turn API of
``harness_core.agents.turn``); a ``Model`` (``reply(TurnInput) -> TurnOutput``) is still accepted and
adapted. Agents run inside a Temporal activity on the Temporal event loop, so they must be written
against AnyIO (or plain async code), never against one backend.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import anyio
import attrs

from harness_core.agents.turn import (
    Agent,
    AgentFunction,
    Artifact,
    Ask,
    Complete,
    Fail,
    TextPart,
    TurnContext,
    TurnResult,
)

__all__ = [
    "ChatMessage",
    "EchoModel",
    "Gate",
    "Model",
    "ScriptedModel",
    "TurnInput",
    "TurnOutput",
    "as_agent",
]


@attrs.frozen
class ChatMessage:
    """One entry of the history handed to a ``Model``."""

    role: Literal["user", "agent"]
    text: str
    message_id: str


@attrs.frozen
class TurnInput:
    """What a ``Model`` is given on a turn: the task's messages as text."""

    agent_id: str
    task_id: str
    context_id: str
    number: int
    history: tuple[ChatMessage, ...]


@attrs.frozen
class TurnOutput:
    """A ``Model``'s answer: text and the action it implies for the task."""

    text: str
    action: Literal["answer", "ask", "fail"] = "answer"


@runtime_checkable
class Model(Protocol):
    """The text-only seam: history in, reply and action out. Prefer the turn API (``Agent``)."""

    async def reply(self, turn: TurnInput) -> TurnOutput:
        """Answer one turn. Raising fails the attempt (the turn is retried)."""
        ...


def turn_input(ctx: TurnContext, agent_id: str = "") -> TurnInput:
    return TurnInput(
        agent_id=agent_id,
        task_id=ctx.task_id,
        context_id=ctx.context_id,
        number=ctx.number,
        history=tuple(ChatMessage(m.role, m.text, m.message_id) for m in ctx.history),
    )


def result_of(output: TurnOutput, ctx: TurnContext) -> TurnResult:
    """A ``TurnOutput`` in the turn API: an answer completes the task with a ``result`` artifact."""
    if output.action == "ask":
        return Ask(output.text)
    if output.action == "fail":
        return Fail(output.text)
    artifact = Artifact(
        (TextPart(output.text),), name="result", artifact_id=f"{ctx.task_id}:result:{ctx.number}"
    )
    return Complete(output.text, artifacts=(artifact,))


class _ModelAgent:
    def __init__(self, model: Model) -> None:
        self.model = model

    async def turn(self, ctx: TurnContext) -> TurnResult:
        return result_of(await self.model.reply(turn_input(ctx)), ctx)


class _FunctionAgent:
    def __init__(self, fn: AgentFunction) -> None:
        self.fn = fn

    async def turn(self, ctx: TurnContext) -> TurnResult:
        return await self.fn(ctx)


def _is_async(fn: object) -> bool:
    """An ``async def`` function or method, also behind ``functools.partial`` or as ``__call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    return not inspect.isroutine(fn) and call is not None and inspect.iscoroutinefunction(call)


def as_agent(value: Agent | Model | AgentFunction) -> Agent:
    """An agent from an agent, a ``Model``, or an async function of a turn context.

    Raises ``TypeError`` for anything else, also for a plain (not ``async``) function or ``turn``
    method, which would fail every turn.
    """
    if isinstance(value, Agent):
        if not _is_async(value.turn):
            raise TypeError(
                f"{type(value).__name__}.turn is not async: define it with `async def turn(self, ctx)`"
            )
        return value
    if isinstance(value, Model):
        if not _is_async(value.reply):
            raise TypeError(
                f"{type(value).__name__}.reply is not async: define it with `async def reply(self, turn)`"
            )
        return _ModelAgent(value)
    if callable(value):
        if not _is_async(value):
            name = getattr(value, "__qualname__", type(value).__name__)
            raise TypeError(
                f"{name} is not an async function: define the agent with `async def`, "
                "e.g. `async def agent(ctx): ...`"
            )
        return _FunctionAgent(value)
    raise TypeError(
        f"{type(value).__name__} is not an agent: give an object with `async def turn(ctx)`, an "
        "async function of a turn context, or a Model with `async def reply(turn)`"
    )


def _last_user_text(turn: TurnInput) -> str:
    for message in reversed(turn.history):
        if message.role == "user":
            return message.text
    return ""


class Gate:
    """Holds scripted turns until released; thread-safe, because turns run on the Temporal loop.

    ``entered`` counts turns that reached the gate, so a test can wait until a task is mid-turn.
    """

    def __init__(self) -> None:
        self._open = threading.Event()
        self._lock = threading.Lock()
        self._entered = 0

    @property
    def entered(self) -> int:
        with self._lock:
            return self._entered

    def release(self) -> None:
        self._open.set()

    async def pass_through(self) -> None:
        with self._lock:
            self._entered += 1
        # A threading.Event cannot be awaited from both backends; a short poll can, and it is
        # cancellable, which a blocking wait in a worker thread would not be.
        while not self._open.is_set():  # noqa: ASYNC110 - set from another thread
            await anyio.sleep(0.005)

    async def wait_entered(self, count: int = 1) -> None:
        """Return once ``count`` turns have reached the gate."""
        while self.entered < count:  # noqa: ASYNC110 - counted on the Temporal thread
            await anyio.sleep(0.005)


class ScriptedModel:
    """A deterministic agent: answers with its scripted replies in order, then repeats the last
    (with no replies at all, it echoes the user).

    A reply is a string (an answer: the task completes with it, also as a ``result`` artifact), a
    ``TurnOutput``, or any turn result (``Complete``, ``Ask``, ...). ``delay`` slows every turn;
    ``gate`` holds every turn until released. ``turns`` records what each turn was given.
    """

    def __init__(
        self,
        replies: Sequence[TurnOutput | TurnResult | str] = (),
        *,
        delay: float = 0.0,
        gate: Gate | None = None,
        record: bool = True,
    ) -> None:
        self._replies = [TurnOutput(r) if isinstance(r, str) else r for r in replies]
        self._delay = delay
        self.gate = gate
        #: What each turn was given (with ``record``; a long-running agent keeps nothing).
        self.turns: list[TurnInput] = []
        self.contexts: list[TurnContext] = []
        self._record = record
        self._count = 0
        self._lock = threading.Lock()

    async def turn(self, ctx: TurnContext) -> TurnResult:
        turn = turn_input(ctx)
        with self._lock:
            index = self._count
            self._count += 1
            if self._record:
                self.turns.append(turn)
                self.contexts.append(ctx)
        if self._delay:
            await anyio.sleep(self._delay)
        if self.gate is not None:
            await self.gate.pass_through()
        if index < len(self._replies):
            reply = self._replies[index]
        elif self._replies:
            reply = self._replies[-1]
        else:
            reply = TurnOutput(_last_user_text(turn))
        return result_of(reply, ctx) if isinstance(reply, TurnOutput) else reply


class EchoModel(ScriptedModel):
    """The embedded default (``[model] kind = "echo"``): answers with the user's last text."""

    def __init__(self, *, delay: float = 0.0) -> None:
        # It serves for as long as the process runs: it remembers no turn (it leaked each one).
        super().__init__((), delay=delay, record=False)
