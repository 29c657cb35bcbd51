"""Values that cross Temporal: workflow and activity inputs, outputs and the stored task summary.

This module and ``converter`` are the only ones passed through the workflow sandbox (see ``worker.py``),
so it must stay small and free of side effects: re-importing it per workflow run would give cattrs a new
class object every run and grow its dispatch caches without bound (``shared/reference/temporal-latency.md``).

A2A protobuf values (messages, parts, events) travel as ProtoJSON dictionaries (``MessageToDict``
output), which keeps the workflow free of protobuf and the payloads readable in Temporal's UI. A
payload over a threshold never travels inline: the claim check (``harness_core.temporal.codec``)
stores it by digest and Temporal's history keeps a reference. What a workflow holds is bounded
per run (``RUN_MESSAGES``, ``RUN_BYTES``): past that it archives the run to the agent's store and
continues as new, carrying only a :class:`TaskCarry`.
"""

from __future__ import annotations

import json
from typing import Any, Literal, cast

import attrs

__all__ = [
    "DECLINED_KEY",
    "SETTLED_STATES",
    "TERMINAL_STATES",
    "Archive",
    "CompactRequest",
    "DelegationProgress",
    "DelegationRequest",
    "DelegationResult",
    "DelegationSpec",
    "EventPage",
    "Inbound",
    "IndexEntry",
    "ModelStep",
    "ModelStepInput",
    "ProtoJSON",
    "PushBatch",
    "Receipt",
    "TaskCarry",
    "TaskEvent",
    "TaskRecord",
    "TaskStart",
    "TaskTail",
    "TaskView",
    "ToolCallInput",
    "ToolCallOutput",
    "ToolCallSpec",
    "TurnOutcome",
    "TurnRequest",
    "declined",
    "may_access",
    "relayable",
    "relayed_status",
    "status_key",
]

ProtoJSON = dict[str, Any]

TERMINAL_STATES = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)
#: A blocking SendMessage returns, and a stream ends, once the task is in one of these.
SETTLED_STATES = TERMINAL_STATES | {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}
#: The task's metadata key that says a plugin's turn gate declined its latest turn.
DECLINED_KEY = "harness.declined"


def declined(status: ProtoJSON) -> bool:
    """The task rests after a turn a plugin's gate declined (the status keeps the state it had
    before that turn, and says so in its ``metadata``)."""
    metadata = status.get("metadata")
    return isinstance(metadata, dict) and DECLINED_KEY in metadata


def may_access(participants: tuple[str, ...] | list[str], participant: str | None) -> bool:
    """The access policy: a named participant reaches the tasks they are on; an anonymous caller
    reaches the tasks nobody named started (and no other). Anything else reads as not found."""
    return participant in participants if participant else not participants


@attrs.frozen
class Inbound:
    """A user message for a task: ProtoJSON of an A2A ``Message`` (large parts by reference) plus who
    sent it."""

    message: ProtoJSON
    participant: str | None = None
    #: The update returns only when the task has settled after this message (blocking send).
    wait: bool = False
    #: The agent the message was sent to; a task of another agent refuses it as not found.
    agent_id: str = ""
    #: The message's size as compact JSON, measured once by the sender.
    size: int = 0
    #: A digest of the message's content: a retry has the same, a reused id another.
    digest: str = ""
    #: The sender registered a push notification config with the message: the task pushes.
    push: bool = False


@attrs.frozen
class TaskEvent:
    """One entry of a task's event log: a ProtoJSON ``TaskStatusUpdateEvent`` or artifact update.

    ``seq`` counts from 1 over the task's whole life, across continue-as-new.
    """

    seq: int
    kind: Literal["status", "artifact"]
    body: ProtoJSON


@attrs.frozen
class TaskCarry:
    """What a task carries into its next run (continue-as-new): its state, not its content.

    The messages and events of earlier runs are in the agent's store (``archived_*`` of them).
    """

    status: ProtoJSON
    participants: tuple[str, ...]
    #: The latest message ids (with their content digests), of this run and the ones before it, up
    #: to twice a run's messages: a late retry of one is still recognised by the workflow (older
    #: ones by the store).
    recent_ids: tuple[tuple[str, str], ...]
    archived_messages: int
    archived_events: int
    turns: int
    runs: int
    cancel_requested: bool = False
    #: The task pushes its updates to webhooks, and has pushed those up to this seq.
    push: bool = False
    pushed_seq: int = 0
    #: A turn of the task held its workflow task too long: later turns run as regular activities.
    long_turns: bool = False


@attrs.frozen
class TaskStart:
    """The input of a ``TaskWorkflow``: the task's identity, how its turns run, and either its first
    message (a new task: the message is durable with the start, whatever happens to the update that
    delivers it) or what it carries from its previous run."""

    task_id: str
    context_id: str
    agent_id: str
    local_activity: bool = True
    turn_timeout: float = 60.0
    #: "turn": one activity per turn (a custom or built-in agent). "llm": the workflow runs the
    #: model loop, one activity per model request and per tool call.
    loop: Literal["turn", "llm"] = "turn"
    #: The LLM loop's budget per turn: model requests, and seconds of wall clock.
    max_steps: int = 20
    turn_seconds: float = 600.0
    #: A run continues as new once idle past this many messages (``RUN_MESSAGES`` by default).
    run_messages: int = 200
    first: Inbound | None = None
    carry: TaskCarry | None = None
    #: A task waiting for input this long with no message ends (0: never), in this state.
    idle_seconds: float = 0.0
    expired_state: str = "TASK_STATE_CANCELED"
    #: ``[delegation] block_for``: a delegating turn whose senders all wait asks the other agents
    #: with a blocking send, within its workflow task, for this long before any stand-in (0: no).
    block_for: float = 0.0
    #: A local turn that ends the task stores its final record itself (``TurnRequest.record_at``).
    #: False in the inputs of runs started before that rule: they store it as they did.
    record_in_turn: bool = False


@attrs.frozen
class TaskTail:
    """A running task as its workflow knows it: its status, and the messages and events of the current
    run after the positions asked for (earlier ones are in the store)."""

    status: ProtoJSON
    participants: tuple[str, ...]
    agent_id: str
    closed: bool
    #: A turn runs or a message waits for one: the state is about to change.
    busy: bool
    #: Messages and events before these counts are archived in the store.
    archived_messages: int
    archived_events: int
    messages: tuple[ProtoJSON, ...]
    events: tuple[TaskEvent, ...]
    #: The seq of the newest event.
    last_seq: int

    @property
    def state(self) -> str:
        return str(self.status.get("state", ""))


@attrs.frozen
class Receipt:
    """What a delivered message got: whether it was a retry, the log position before it, and the
    task after it (a blocking send waits until the task settles): its status, the messages from this
    one on and the events after the cursor. Bounded by one exchange, never the whole task, so
    history grows linearly however long the conversation."""

    duplicate: bool
    cursor: int
    status: ProtoJSON
    closed: bool
    busy: bool
    context_id: str = ""
    participants: tuple[str, ...] = ()
    messages: tuple[ProtoJSON, ...] = ()
    events: tuple[TaskEvent, ...] = ()
    last_seq: int = 0
    #: The agent answered the first message with a direct Message (no task for the client).
    reply: ProtoJSON | None = None
    #: The position of ``messages[0]`` in the task (-1: the message waits for a turn to take it).
    first_message: int = -1


@attrs.frozen
class TaskView:
    """A task as a client sees it (ProtoJSON ``Task``, large content still by reference)."""

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
        status = self.task.get("status", {})
        return self.closed or (not self.busy and (self.state in SETTLED_STATES or declined(status)))


@attrs.frozen
class EventPage:
    """Events after a position in the log, and the task as of the last of them."""

    events: tuple[TaskEvent, ...]
    view: TaskView


@attrs.frozen
class TurnRequest:
    """The input of one turn activity: which messages the turn answers, and where the rest is.

    ``messages`` are the task's messages from position ``archived`` on, the ones no turn has
    written to the agent's store yet; the activity writes them there (at their positions, so a
    retry changes nothing) and reads the history from the store. No input copies the history.
    """

    agent_id: str
    task_id: str
    context_id: str
    number: int
    archived: int
    messages: tuple[ProtoJSON, ...]
    #: Ids of the user messages this turn answers.
    new_ids: tuple[str, ...]
    #: Who sent each of ``messages``, by id (the participant; absent for anonymous ones).
    senders: tuple[tuple[str, str], ...] = ()
    #: The first message of a task may be answered with a direct Message and no task.
    may_reply: bool = False
    #: Write ``messages`` to the store (their positions are then the store's). False while the
    #: run's unwritten messages are few: the turn reads the rest and keeps these in memory.
    persist: bool = True
    #: The task as the turn starts, for the listing index (``messages`` go with it, always).
    index: IndexEntry | None = None
    #: Set (to the workflow task's time) when the request holds the task's whole run: a turn
    #: that ends the task then stores its final record itself, in the workflow task that runs
    #: it, and says so in ``TurnOutcome.recorded`` (``harness_core.tasks.state.turn_end``).
    record_at: str = ""
    #: ``index`` for a model step after the first, which does not write the entry again, and
    #: what the turn's earlier steps emitted: what the step that answers needs to store the
    #: task's end (``record_at``).
    entry: IndexEntry | None = None
    emitted: tuple[tuple[str, ProtoJSON], ...] = ()


@attrs.frozen
class DelegationSpec:
    """A message a turn hands to another agent (``target``: its id), and the remote task it
    continues, if any."""

    target: str
    parts: tuple[ProtoJSON, ...]
    task_id: str = ""


@attrs.frozen
class DelegationRequest:
    """The input of a stand-in workflow: send ``message`` to agent ``target`` for the task
    ``parent_task_id`` of agent ``agent_id``, as ``participant``, and follow the remote task."""

    agent_id: str
    parent_task_id: str
    target: str
    message: ProtoJSON
    participant: str
    #: The delegating task's context (its relayed progress belongs there).
    parent_context_id: str = ""
    #: The message was sent before, by an ask that gave up waiting (``[delegation] block_for``):
    #: the other agent may have its task although no send named it yet.
    asked: bool = False


@attrs.frozen
class DelegationProgress:
    """An update of the other agent's task that the delegating task relays to its own clients:
    the remote status (ProtoJSON, with its message), as the stand-in ``stand_in`` saw it."""

    stand_in: str
    target: str
    remote_task_id: str
    status: ProtoJSON


#: The most one relayed status may weigh (bytes of JSON): a larger message is relayed without
#: its parts, so another agent's progress never grows a task by much.
RELAY_BYTES = 16 * 1024


def relayable(status: ProtoJSON) -> ProtoJSON:
    """Another agent's status as it may be relayed: whole, or without its message's parts."""
    if len(json.dumps(status, separators=(",", ":"))) <= RELAY_BYTES:
        return status
    message: ProtoJSON = {**_table(status.get("message"))}
    message["parts"] = [{"text": "(a progress message too large to relay)"}]
    return {**status, "message": message}


def _table(value: Any) -> ProtoJSON:
    """``value`` when it is a JSON object, else an empty one (another agent's JSON is not
    trusted to have the shape A2A gives it)."""
    return cast("ProtoJSON", value) if isinstance(value, dict) else {}


def _items(value: Any) -> list[Any]:
    return cast("list[Any]", value) if isinstance(value, list) else []


def status_key(status: ProtoJSON) -> str:
    """What tells one status of a task from another: its state, message and time."""
    message_id = _table(status.get("message")).get("messageId", "")
    return f"{status.get('state', '')}|{message_id}|{status.get('timestamp', '')}"


def relayed_status(progress: DelegationProgress, task_id: str, context_id: str) -> ProtoJSON:
    """The WORKING status update by which the task ``task_id`` shows another agent's progress:
    its message, with the delegation in ``metadata["harness.delegation"]`` (``path`` names the
    agents it came through, the one that said it last). The message id is derived from the
    stand-in and the remote message, so the live copy and the durable one are the same event."""
    status = progress.status
    remote = _table(status.get("message"))
    inner = _table(_table(remote.get("metadata")).get("harness.delegation"))
    path = [progress.target, *(p for p in _items(inner.get("path")) if isinstance(p, str))]
    state = str(status.get("state", ""))
    message: ProtoJSON = {
        "messageId": f"{progress.stand_in}:{remote.get('messageId') or state}",
        "role": "ROLE_AGENT",
        "parts": [p for p in _items(remote.get("parts")) if isinstance(p, dict)],
        "taskId": task_id,
        "contextId": context_id,
        "metadata": {
            "harness.delegation": {
                "agent": progress.target,
                "taskId": progress.remote_task_id,
                "state": state,
                "path": path,
            }
        },
    }
    return {"state": "TASK_STATE_WORKING", "message": message}


@attrs.frozen
class DelegationResult:
    """What the other agent answered: its task, the state it reached, and its answer."""

    target: str
    remote_task_id: str
    state: str
    #: The remote status message's parts and the remote task's artifacts (ProtoJSON).
    parts: tuple[ProtoJSON, ...] = ()
    artifacts: tuple[ProtoJSON, ...] = ()
    #: Why the delegation could not be made (unknown agent, unreachable): our own words.
    error: str = ""
    #: The other agent pushes its updates to the stand-in (else the stand-in polls).
    pushed: bool = False
    #: Remote statuses with a message seen before this one, oldest first, to relay.
    progress: tuple[ProtoJSON, ...] = ()
    #: The ``status_key`` of the remote task's status before the message (when it continues a
    #: task): that status is no answer to it.
    stale: str = ""

    def relays(self, stand_in: str) -> list[DelegationProgress]:
        """``progress`` as the stand-in ``stand_in`` relays it to the delegating task."""
        return [
            DelegationProgress(stand_in, self.target, self.remote_task_id, status)
            for status in self.progress
        ]


@attrs.frozen
class TurnOutcome:
    """How a turn ended, and what it emitted (events, large content by reference).

    ``kind`` is one of complete, ask, auth, reject, fail, reply, delegate, declined (a plugin's
    turn gate said no: ``declined`` names the plugins).
    """

    kind: Literal["complete", "ask", "auth", "reject", "fail", "reply", "delegate", "declined"]
    message: tuple[ProtoJSON, ...] = ()
    artifacts: tuple[ProtoJSON, ...] = ()
    #: Progress and artifact updates emitted during the turn, in order (ProtoJSON event bodies
    #: without task and context ids): ("status", body) or ("artifact", body).
    emitted: tuple[tuple[str, ProtoJSON], ...] = ()
    #: ``kind == "delegate"``: the messages for other agents.
    delegations: tuple[DelegationSpec, ...] = ()
    #: ``kind == "declined"``: the keys of the plugins whose gates declined the turn.
    declined: tuple[str, ...] = ()
    #: The final record the turn stored (``TurnRequest.record_at``): the workflow stores it
    #: again only if its own differs.
    recorded: TaskRecord | None = None


@attrs.frozen
class ModelStepInput:
    """One model request of the LLM loop: the turn's messages as in ``TurnRequest``, plus the loop's
    own exchange so far this turn (pydantic-ai messages as JSON; opaque to the workflow)."""

    turn: TurnRequest
    step: int
    exchange: tuple[Any, ...]
    #: The budget is spent: the model is asked to answer now, without tools.
    final: bool = False


@attrs.frozen
class ToolCallSpec:
    """A tool call the model asked for, with how the tool may be run (from the agent's tools)."""

    call_id: str
    name: str
    arguments: str
    #: False: one attempt only, even when a worker stop interrupts it.
    idempotent: bool = True
    timeout: float = 60.0
    #: The call asks another agent (its id): a delegation, not a tool of this agent's.
    delegate: str = ""


@attrs.frozen
class ModelStep:
    """What the model answered: text and tool calls; ``response`` is the pydantic-ai message as JSON,
    appended to the exchange for the next step."""

    text: str
    tool_calls: tuple[ToolCallSpec, ...]
    response: Any
    #: The answer as parts (a long one by reference); when set, it is the turn's final message.
    message: tuple[ProtoJSON, ...] = ()
    #: Artifact chunks the live text was checkpointed as (large content by reference).
    emitted: tuple[tuple[str, ProtoJSON], ...] = ()
    #: Plugins' turn gates declined the turn (their keys); nothing was asked of the model.
    declined: tuple[str, ...] = ()
    #: The request would pass the agent's context budget: fold the task's messages at positions
    #: (first, upto) into a summary (``COMPACT``), then ask again. Nothing was asked of the model.
    compact: tuple[int, int] | None = None
    #: The step answered, and stored the task's end as the turn's outcome leaves it
    #: (``TurnRequest.record_at``; ``TurnOutcome.recorded``).
    recorded: TaskRecord | None = None


@attrs.frozen
class CompactRequest:
    """Fold a task's messages at positions ``first`` up to ``upto`` into a summary."""

    agent_id: str
    task_id: str
    context_id: str
    first: int
    upto: int


@attrs.frozen
class ToolCallInput:
    agent_id: str
    task_id: str
    call_id: str
    name: str
    arguments: str


@attrs.frozen
class ToolCallOutput:
    """A tool's result as text for the model; ``failed`` when it is an error the model should see."""

    text: str
    failed: bool = False
    #: Artifacts the tool returns with the turn's answer (a workspace file it attached).
    artifacts: tuple[ProtoJSON, ...] = ()


@attrs.frozen
class Archive:
    """A run's messages and events, written to the agent's store before the run continues as new (or
    ends). Positions are absolute, so writing the same archive twice changes nothing."""

    task_id: str
    agent_id: str
    context_id: str
    first_message: int
    messages: tuple[ProtoJSON, ...]
    events: tuple[TaskEvent, ...]
    participants: tuple[str, ...]
    #: Who sent each message, by id (named participants only).
    senders: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class IndexEntry:
    """What the agent's listing index learns of a running task at a durable point (a turn starts,
    the task goes idle, a sender's receipt): the messages and events the store lacks, and the task's
    status as of event ``last_seq``. Writes are idempotent and never move a task back."""

    archive: Archive
    status: ProtoJSON
    #: The seq of the task's last event: the store has every event up to it after this write.
    last_seq: int
    #: How many messages the task has (-1: unknown to this writer; the index keeps its count).
    messages: int
    #: A turn runs or a message waits for one.
    busy: bool
    #: The task did not end after all, though a turn may have stored its final record
    #: (``TurnRequest.record_at``): the index takes this state over whatever it has.
    reopen: bool = False


@attrs.frozen
class PushBatch:
    """Task updates to deliver to the task's push notification configs (webhooks)."""

    agent_id: str
    task_id: str
    events: tuple[TaskEvent, ...]
    #: Events after this seq and up to the first of ``events`` are read from the agent's store
    #: (archived before the run that pushes them continued as new); 0 when none are.
    stored_after: int = 0
    stored_until: int = 0


@attrs.frozen
class TaskRecord:
    """A task's final summary, kept in the agent's store after its workflow ended (its messages and
    events are there too, archived run by run) and returned as the workflow's result."""

    task_id: str
    context_id: str
    agent_id: str
    state: str
    status: ProtoJSON
    participants: tuple[str, ...]
    updated_at: str
    messages: int
    events: int
    #: The last run's messages and events when the store could not take them: the record then
    #: lives here, in the workflow's result.
    unstored: Archive | None = None
    #: The direct Message the agent answered the first message with (a retry gets it again).
    reply: ProtoJSON | None = None
