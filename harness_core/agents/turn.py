"""The turn API: what an agent sees of a task on each turn, what it can emit, and how it ends the turn.

An agent's turn is given the task's messages with all their parts (text, files as bytes or URL, data)
and metadata, and who sent each one, through a :class:`TurnContext`. While it runs it can emit progress
(a status update whose message id is ``<task id>:<key>``, so a retried turn replaces rather than
repeats it), artifacts (whole, or in chunks with ``append`` and ``last_chunk``) and live text deltas
(streamed at once, checkpointed as chunks of one artifact). It ends the turn by returning one of the
outcomes below: :class:`Complete`, :class:`Ask`, :class:`AuthRequired`, :class:`Reject`, :class:`Fail`,
or, for a first message that emitted nothing, a direct :class:`Reply` (a ``Message`` and no task).

These classes are plain values with no Temporal or HTTP in them; ``harness_core.agents.parts``
converts them to and from A2A's ProtoJSON.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

__all__ = [
    "Agent",
    "AgentFunction",
    "Artifact",
    "Ask",
    "AuthRequired",
    "Complete",
    "DataPart",
    "Delegate",
    "Delegation",
    "Fail",
    "FilePart",
    "Part",
    "Reject",
    "Reply",
    "TextPart",
    "TurnContext",
    "TurnMessage",
    "TurnResult",
    "parts_of",
]


def _metadata() -> Mapping[str, Any]:
    return {}


@attrs.frozen
class TextPart:
    """Text."""

    text: str
    metadata: Mapping[str, Any] = attrs.field(factory=_metadata)


@attrs.frozen
class FilePart:
    """A file: its bytes (``data``) or a link to it (``url``), with an optional name and media type."""

    data: bytes | None = None
    url: str | None = None
    name: str | None = None
    media_type: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=_metadata)

    def __attrs_post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ValueError("a FilePart has either data (bytes) or a url, not both or neither")


@attrs.frozen
class DataPart:
    """Structured data (anything JSON can hold)."""

    data: Any
    metadata: Mapping[str, Any] = attrs.field(factory=_metadata)


Part = TextPart | FilePart | DataPart


def parts_of(content: str | Part | Sequence[Part]) -> tuple[Part, ...]:
    """Parts from a string (one text part), a part, or a sequence of parts."""
    if isinstance(content, str):
        return (TextPart(content),)
    if isinstance(content, TextPart | FilePart | DataPart):
        return (content,)
    return tuple(content)


@attrs.frozen
class TurnMessage:
    """One message of the task as the agent sees it."""

    message_id: str
    role: Literal["user", "agent"]
    parts: tuple[Part, ...]
    metadata: Mapping[str, Any] = attrs.field(factory=_metadata)
    #: The participant who sent it (None: anonymous, or the agent itself).
    sender: str | None = None

    @property
    def text(self) -> str:
        """The message's text parts, joined by newlines."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))


@attrs.frozen
class Artifact:
    """An output of the task. Without an ``artifact_id`` the runtime derives one from the turn."""

    parts: tuple[Part, ...]
    name: str | None = None
    artifact_id: str | None = None
    description: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=_metadata)


def _content(value: str | Part | Sequence[Part] | None) -> tuple[Part, ...]:
    return () if value is None else parts_of(value)


@attrs.frozen
class Complete:
    """The task is done (COMPLETED): a final message and/or artifacts."""

    message: tuple[Part, ...] = attrs.field(default=(), converter=_content)
    artifacts: tuple[Artifact, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class Ask:
    """The agent needs the participant's answer (INPUT_REQUIRED); the next message continues."""

    message: tuple[Part, ...] = attrs.field(converter=_content)


@attrs.frozen
class AuthRequired:
    """The agent needs the participant to authenticate somewhere (AUTH_REQUIRED)."""

    message: tuple[Part, ...] = attrs.field(converter=_content)


@attrs.frozen
class Reject:
    """The agent will not do this task (REJECTED)."""

    message: tuple[Part, ...] = attrs.field(converter=_content)


@attrs.frozen
class Fail:
    """The task failed (FAILED). The message is shown to the participant: keep internals out of it."""

    message: tuple[Part, ...] = attrs.field(converter=_content)


@attrs.frozen
class Reply:
    """A direct answer with no task: allowed for a first message whose turn emitted nothing else.

    Anywhere else it is taken as :class:`Complete` with the same message.
    """

    message: tuple[Part, ...] = attrs.field(converter=_content)


@attrs.frozen
class Delegation:
    """One message for another agent: ``to`` is an agent id (of this group, or configured), the
    message is what it is sent; ``task_id`` continues a task of that agent (to answer its
    question)."""

    to: str
    message: tuple[Part, ...] = attrs.field(converter=_content)
    task_id: str | None = None


def _delegations(value: Delegation | Sequence[Delegation]) -> tuple[Delegation, ...]:
    return (value,) if isinstance(value, Delegation) else tuple(value)


@attrs.frozen
class Delegate:
    """Hand work to other agents and wait for them, durably: each delegation is a message to its
    agent over A2A; when all have answered (or asked something), the agent's next turn gets their
    answers as new messages, each sent by ``agent:<id>`` with ``metadata["harness.delegation"]``
    (the agent, its task id and state). The task stays WORKING meanwhile."""

    delegations: tuple[Delegation, ...] = attrs.field(converter=_delegations)
    #: What the participant sees meanwhile (a progress message), if anything.
    message: tuple[Part, ...] = attrs.field(default=(), converter=_content)


TurnResult = Complete | Ask | AuthRequired | Reject | Fail | Reply | Delegate


@runtime_checkable
class TurnContext(Protocol):
    """What a turn is given: the task's messages, and ways to emit while it runs.

    Emitting is idempotent per key: a retried turn that emits the same progress key or artifact id
    replaces what the failed attempt emitted (a first chunk with ``append=False`` replaces the
    artifact), so clients never see a message twice.
    """

    @property
    def task_id(self) -> str: ...

    @property
    def context_id(self) -> str: ...

    @property
    def number(self) -> int:
        """The turn's number in its task, from 1."""
        ...

    @property
    def history(self) -> tuple[TurnMessage, ...]:
        """The task's messages so far, oldest first, this turn's new ones included."""
        ...

    @property
    def new_messages(self) -> tuple[TurnMessage, ...]:
        """The user messages this turn answers (one, or several sent while the last turn ran)."""
        ...

    @property
    def agents(self) -> Mapping[str, str]:
        """The agents this one may delegate to (``Delegation(to=...)``), by id: what each says
        of itself (its name, description and skills)."""
        ...

    async def context_history(self, limit: int = 50) -> tuple[TurnMessage, ...]:
        """The latest ``limit`` messages of this agent's earlier tasks in the same ``contextId``
        that the turn's sender takes part in (anonymous senders: tasks without participants),
        oldest first, this task's own left out. Empty for the first task of a context."""
        ...

    async def progress(self, key: str, message: str | Part | Sequence[Part]) -> None:
        """A WORKING status update whose message id is ``<task id>:<key>``."""
        ...

    async def artifact(
        self,
        parts: str | Part | Sequence[Part],
        *,
        name: str | None = None,
        artifact_id: str | None = None,
        append: bool = False,
        last_chunk: bool = True,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Emit an artifact, or a chunk of one; returns its id (derived when not given)."""
        ...

    async def delta(self, text: str) -> None:
        """Live text of the turn's answer: streamed at once, kept as chunks of one artifact."""
        ...


AgentFunction = Callable[[TurnContext], Awaitable[TurnResult]]


@runtime_checkable
class Agent(Protocol):
    """A custom agent: one turn at a time. Runs as one activity; raising retries the turn."""

    async def turn(self, ctx: TurnContext) -> TurnResult: ...
