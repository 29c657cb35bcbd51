"""Values that cross Temporal: workflow and activity inputs, outputs and the stored task record.

This module is passed through the workflow sandbox (see ``worker.py``), so it must stay small and free
of side effects: re-importing it per workflow run would give cattrs a new class object every run and
grow its dispatch caches without bound (``shared/reference/temporal-latency.md``).

A2A protobuf values (messages, tasks, events) travel as ProtoJSON dictionaries (``MessageToDict``
output), which keeps the workflow free of protobuf and the payloads readable in Temporal's UI.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

__all__ = [
    "SETTLED_STATES",
    "TERMINAL_STATES",
    "ChatMessage",
    "EventPage",
    "Inbound",
    "ProtoJSON",
    "Receipt",
    "TaskEvent",
    "TaskRecord",
    "TaskStart",
    "TaskView",
    "TurnInput",
    "TurnOutput",
    "may_access",
]

ProtoJSON = dict[str, Any]

TERMINAL_STATES = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)
#: A blocking SendMessage returns, and a stream ends, once the task is in one of these.
SETTLED_STATES = TERMINAL_STATES | {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}


def may_access(participants: tuple[str, ...] | list[str], participant: str | None) -> bool:
    """The access policy: a named participant reaches the tasks they are on; an anonymous caller
    reaches the tasks nobody named started (and no other). Anything else reads as not found."""
    return participant in participants if participant else not participants


@attrs.frozen
class Inbound:
    """A user message for a task: ProtoJSON of an A2A ``Message`` plus who sent it."""

    message: ProtoJSON
    participant: str | None = None
    #: The update returns only when the task has settled after this message (blocking send).
    wait: bool = False
    #: The agent the message was sent to; a task of another agent refuses it as not found.
    agent_id: str = ""
    #: The message's size as compact JSON, measured once by the sender (the task's budget).
    size: int = 0


@attrs.frozen
class TaskStart:
    """The input of a ``TaskWorkflow``: the task's identity."""

    task_id: str
    context_id: str
    agent_id: str
    local_activity: bool = True
    turn_timeout: float = 60.0


@attrs.frozen
class TaskEvent:
    """One entry of a task's event log: a ProtoJSON ``TaskStatusUpdateEvent`` or artifact update."""

    seq: int
    kind: Literal["status", "artifact"]
    body: ProtoJSON


@attrs.frozen
class TaskView:
    """A task as a client sees it (ProtoJSON ``Task`` with history and artifacts)."""

    task: ProtoJSON
    last_seq: int
    closed: bool
    participants: tuple[str, ...] = ()
    #: The agent whose task this is.
    agent_id: str = ""
    #: A turn runs or a message waits for one: the state is about to change.
    busy: bool = False

    @property
    def state(self) -> str:
        return str(self.task.get("status", {}).get("state", ""))

    @property
    def settled(self) -> bool:
        """Nothing left to do for now: a stream following this task may end."""
        return self.closed or (not self.busy and self.state in SETTLED_STATES)


@attrs.frozen
class Receipt:
    """What a delivered message got: whether it was a retry, and the log position before it."""

    duplicate: bool
    cursor: int
    view: TaskView


@attrs.frozen
class EventPage:
    """Events after a position in the log, and the task as of the last of them."""

    events: tuple[TaskEvent, ...]
    view: TaskView


@attrs.frozen
class ChatMessage:
    """One entry of the history handed to a model."""

    role: Literal["user", "agent"]
    text: str
    message_id: str


@attrs.frozen
class TurnInput:
    """The input of one model turn."""

    agent_id: str
    task_id: str
    context_id: str
    number: int
    history: tuple[ChatMessage, ...]


@attrs.frozen
class TurnOutput:
    """A model's answer: text and the action it implies for the task."""

    text: str
    action: Literal["answer", "ask", "fail"] = "answer"


@attrs.frozen
class TaskRecord:
    """A task's final record, kept in the agent's SQLite store after its workflow ended."""

    task_id: str
    context_id: str
    agent_id: str
    state: str
    task: ProtoJSON
    events: tuple[TaskEvent, ...]
    message_ids: tuple[str, ...]
    participants: tuple[str, ...]
    updated_at: str
