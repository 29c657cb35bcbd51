"""The model seam: what an agent calls on each turn, and the deterministic models for tests and demos.

A model gets the task's history and answers with text and an action (answer, ask the participant,
fail). Models run inside a Temporal activity on the Temporal event loop, so they must be written
against AnyIO (or plain async code), never against one backend.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import anyio

from harness_core.config import ModelConfig
from harness_core.payloads import TurnInput, TurnOutput

__all__ = ["EchoModel", "Gate", "Model", "ScriptedModel", "model_from_config"]


@runtime_checkable
class Model(Protocol):
    """What an agent calls once per turn: history in, reply and action out."""

    async def reply(self, turn: TurnInput) -> TurnOutput:
        """Answer one turn. Raising fails the turn (Temporal retries it per the activity policy)."""
        ...


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
    """A deterministic model: answers with its scripted replies in order, then repeats the last
    (with no replies at all, it echoes the user).

    A reply is a ``TurnOutput`` or a string (an answer). ``delay`` slows every turn; ``gate`` holds
    every turn until released. ``turns`` records what the model was given.
    """

    def __init__(
        self,
        replies: Sequence[TurnOutput | str] = (),
        *,
        delay: float = 0.0,
        gate: Gate | None = None,
    ) -> None:
        self._replies = [r if isinstance(r, TurnOutput) else TurnOutput(r) for r in replies]
        self._delay = delay
        self.gate = gate
        self.turns: list[TurnInput] = []
        self._lock = threading.Lock()

    async def reply(self, turn: TurnInput) -> TurnOutput:
        with self._lock:
            index = len(self.turns)
            self.turns.append(turn)
        if self._delay:
            await anyio.sleep(self._delay)
        if self.gate is not None:
            await self.gate.pass_through()
        if index < len(self._replies):
            return self._replies[index]
        if self._replies:
            return self._replies[-1]
        return TurnOutput(_last_user_text(turn))


class EchoModel(ScriptedModel):
    """The embedded default (``[model] kind = "echo"``): answers with the user's last text."""

    def __init__(self, *, delay: float = 0.0) -> None:
        super().__init__((), delay=delay)


def model_from_config(config: ModelConfig) -> Model:
    """The model a ``[model]`` section describes."""
    if config.kind == "scripted":
        return ScriptedModel(config.replies, delay=config.delay)
    return EchoModel(delay=config.delay)
