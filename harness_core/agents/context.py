"""The turn context an activity gives an agent, and how what the agent did becomes a ``TurnOutcome``.

What the agent emits is collected in order and returned with the outcome, which the workflow appends to
the task's event log. Ids are derived from the turn (``<task>:<key>`` for progress,
``<task>:artifact:<turn>:<n>`` and ``<task>:response:<turn>`` for artifacts), so a retried turn emits the
same ids: a progress message replaces its earlier copy, and an artifact's first chunk (``append`` false)
replaces the artifact. Live text deltas are coalesced into chunks of the response artifact.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from harness_core.agents.parts import artifact_to_json, parts_to_json
from harness_core.agents.turn import (
    Artifact,
    Ask,
    AuthRequired,
    Complete,
    Delegate,
    Fail,
    Part,
    Reject,
    Reply,
    TurnMessage,
    TurnResult,
    parts_of,
)
from harness_core.payloads import DelegationSpec, ProtoJSON, TurnOutcome

__all__ = ["ActivityTurnContext", "outcome_of"]

#: Live text is checkpointed as a chunk once this much has gathered.
DELTA_CHUNK_BYTES = 8 * 1024


class ActivityTurnContext:
    """A ``TurnContext`` for one attempt of one turn."""

    def __init__(
        self,
        *,
        task_id: str,
        context_id: str,
        number: int,
        history: tuple[TurnMessage, ...],
        new_ids: Sequence[str],
        publish: Callable[[str, ProtoJSON], None] | None = None,
        agents: Mapping[str, str] | None = None,
        earlier: Callable[[int], Awaitable[tuple[TurnMessage, ...]]] | None = None,
        on_progress: Callable[[ProtoJSON], Awaitable[None]] | None = None,
    ) -> None:
        self._task_id = task_id
        self._on_progress = on_progress
        self._earlier = earlier
        self._agents: Mapping[str, str] = agents or {}
        self._context_id = context_id
        self._number = number
        self._history = history
        wanted = set(new_ids)
        self._new = tuple(m for m in history if m.message_id in wanted)
        self.emitted: list[tuple[str, ProtoJSON]] = []
        self._artifacts = 0
        self._delta: list[str] = []
        self._delta_bytes = 0
        self._delta_chunks = 0
        self._live_deltas = 0
        self._publish = publish

    @property
    def task_id(self) -> str:
        return self._task_id

    async def context_history(self, limit: int = 50) -> tuple[TurnMessage, ...]:
        if limit <= 0 or self._earlier is None:
            return ()
        return await self._earlier(limit)

    @property
    def context_id(self) -> str:
        return self._context_id

    @property
    def number(self) -> int:
        return self._number

    @property
    def history(self) -> tuple[TurnMessage, ...]:
        return self._history

    @property
    def new_messages(self) -> tuple[TurnMessage, ...]:
        return self._new

    @property
    def agents(self) -> Mapping[str, str]:
        return self._agents

    def message_json(self, key: str, parts: tuple[Part, ...]) -> ProtoJSON:
        return {
            "messageId": f"{self._task_id}:{key}",
            "role": "ROLE_AGENT",
            "parts": list(parts_to_json(parts)),
            "taskId": self._task_id,
            "contextId": self._context_id,
        }

    async def progress(self, key: str, message: str | Part | Sequence[Part]) -> None:
        if not key or key == "final" or (":" in key and key.split(":")[0] in {"ask", "auth"}):
            raise ValueError(f"progress key {key!r} is reserved or empty; use e.g. 'step:1'")
        self._flush_delta(last=False)
        status = {
            "state": "TASK_STATE_WORKING",
            "message": self.message_json(key, parts_of(message)),
        }
        self._emit("status", {"status": status})
        if self._on_progress is not None:
            # Readers of the task (GetTask, ListTasks) see it now, not when the turn ends.
            await self._on_progress(status)

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
        if artifact_id is None:
            self._artifacts += 1
            artifact_id = f"{self._task_id}:artifact:{self._number}:{self._artifacts}"
        body = artifact_to_json(
            Artifact(parts=parts_of(parts), name=name, metadata=metadata or {}), artifact_id
        )
        self._emit("artifact", {"artifact": body, "append": append, "lastChunk": last_chunk})
        return artifact_id

    def _emit(self, kind: str, body: ProtoJSON) -> None:
        """Durably (returned with the outcome) and live (to this process's open streams)."""
        self.emitted.append((kind, body))
        self._live(kind, body)

    def _live(self, kind: str, body: ProtoJSON) -> None:
        if self._publish is not None:
            self._publish(kind, {"taskId": self._task_id, "contextId": self._context_id, **body})

    async def delta(self, text: str) -> None:
        if not text:
            return
        # Live: each delta at once. An attempt's first one replaces what a failed attempt showed.
        live: ProtoJSON = {
            "artifact": {
                "artifactId": self.response_id,
                "name": "response",
                "parts": [{"text": text}],
            },
            "append": self._live_deltas > 0,
            "lastChunk": False,
        }
        self._live_deltas += 1
        self._live("artifact", live)
        self._delta.append(text)
        self._delta_bytes += len(text.encode())
        if self._delta_bytes >= DELTA_CHUNK_BYTES:
            self._flush_delta(last=False)

    @property
    def response_id(self) -> str:
        return f"{self._task_id}:response:{self._number}"

    def _flush_delta(self, *, last: bool) -> None:
        if not self._delta and not (last and self._delta_chunks):
            return
        text = "".join(self._delta)
        self._delta.clear()
        self._delta_bytes = 0
        body: ProtoJSON = {
            "artifactId": self.response_id,
            "name": "response",
            "parts": [{"text": text}],
        }
        # Durable only: the live path showed each delta already.
        self.emitted.append(
            ("artifact", {"artifact": body, "append": self._delta_chunks > 0, "lastChunk": last})
        )
        self._delta_chunks += 1

    def finish(self) -> None:
        """Close the live response artifact, if the turn streamed one."""
        self._flush_delta(last=True)


def outcome_of(result: TurnResult, ctx: ActivityTurnContext) -> TurnOutcome:
    """The workflow's view of what the turn did."""
    ctx.finish()
    if isinstance(result, Delegate):
        return TurnOutcome(
            kind="delegate",
            message=parts_to_json(result.message),
            emitted=tuple(ctx.emitted),
            delegations=tuple(
                DelegationSpec(
                    target=d.to,
                    parts=parts_to_json(d.message),
                    task_id=d.task_id or "",
                )
                for d in result.delegations
            ),
        )
    if not isinstance(result, Complete | Ask | AuthRequired | Reject | Fail | Reply):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(
            f"a turn must return Complete, Ask, AuthRequired, Reject, Fail, Reply or Delegate, "
            f"not {type(result).__name__}"
        )
    parts: list[ProtoJSON] = list(parts_to_json(result.message))
    artifacts: list[ProtoJSON] = []
    if isinstance(result, Complete):
        for index, artifact in enumerate(result.artifacts, start=1):
            artifact_id = artifact.artifact_id or f"{ctx.task_id}:result:{ctx.number}:{index}"
            artifacts.append(artifact_to_json(artifact, artifact_id))
    kind = {
        Complete: "complete",
        Ask: "ask",
        AuthRequired: "auth",
        Reject: "reject",
        Fail: "fail",
        Reply: "reply",
    }[type(result)]
    return TurnOutcome(
        kind=kind,  # pyright: ignore[reportArgumentType]
        message=tuple(parts),
        artifacts=tuple(artifacts),
        emitted=tuple(ctx.emitted),
    )
