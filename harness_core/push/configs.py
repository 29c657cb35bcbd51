"""The push configurations of an agent's tasks, and the receiver of other agents' pushes.

``TaskPushes`` is the part of the task service (``harness_core.tasks.service``) that keeps the
webhooks clients register for their tasks (A2A 1.0 §3.1.7) and takes the pushes other agents send
to this agent's delegations. Its rules:

- A config is written only for a caller the task admits: the task is this agent's, and the caller
  is on it (``may_access``). A refused caller changes nothing.
- A config id belongs to the participant who created it: another participant of the task who uses
  the same id is refused, and never replaces it, sees it or deletes it.
- A push to a delegation is taken only with the stand-in's token (compared by digest, in constant
  time) and only for a stand-in of this agent; anything else wakes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import uuid
from typing import Any, cast

import anyio
from a2a.types import TaskStatus
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from temporalio.service import RPCError

from harness_core.delegation.workflow import DelegationWorkflow
from harness_core.errors import InvalidRequestValueError, TaskNotFoundError
from harness_core.payloads import ProtoJSON, TaskEvent, TaskRecord, may_access, relayable
from harness_core.push.delivery import PushActivities
from harness_core.tasks.views import TaskReads
from harness_core.tasks.workflow import TaskWorkflow
from harness_core.temporal.names import DELEGATION_WORKFLOW

__all__ = ["TaskPushes"]


class TaskPushes(TaskReads):
    """Webhook configs of the agent's tasks, and pushes into its delegations."""

    def __init__(self, *, pusher: PushActivities | None = None, **reads: Any) -> None:
        super().__init__(**reads)
        # Tells a webhook registered on an ended task how it ended (None: nobody does).
        self._pusher = pusher

    async def _tell_the_end(self, record: TaskRecord, config: ProtoJSON) -> None:
        """A webhook registered on a task that has ended (a retried first message, or a config
        created late) hears the final status once: the updates it was registered for are over."""
        if self._pusher is None:
            return
        end = TaskEvent(
            seq=record.events,
            kind="status",
            body={
                "taskId": record.task_id,
                "contextId": record.context_id,
                "status": record.status,
            },
        )
        await self._pusher.push_now(record.task_id, str(config.get("id", "")), config, [end])

    async def _admitted(self, task_id: str, participant: str | None) -> bool:
        """Whether ``participant`` may act on the task: it is this agent's and the caller is on
        it. Answered from the listing index when the task is indexed (never waiting on a turn
        that holds the task's workflow), else from the task as it reads."""
        row = await self._row(task_id)
        if row is not None:
            if row.swept or not may_access(row.participants, participant):
                return False
            return await self._confirmed(row)
        return await self.view(task_id, participant) is not None

    async def _put_push_config(
        self, task_id: str, participant: str | None, config: ProtoJSON
    ) -> ProtoJSON:
        """Keep a webhook for an admitted caller. Raises ``InvalidRequestValueError`` for a config
        id another participant of the task holds."""
        config_id = str(config.get("id") or "") or uuid.uuid4().hex
        body = {**config, "id": config_id, "taskId": task_id}
        body.pop("tenant", None)
        kept = await anyio.to_thread.run_sync(
            self._store.put_push_config, task_id, config_id, participant or "", body
        )
        if not kept:
            raise InvalidRequestValueError(
                f"push notification config id {config_id} is taken on this task; choose another"
            )
        return body

    async def create_push_config(
        self, task_id: str, participant: str | None, config: ProtoJSON
    ) -> ProtoJSON:
        """Keep a webhook for the task and tell its workflow to push. Raises
        ``TaskNotFoundError``."""
        view = await self.view(task_id, participant)
        if view is None:
            raise TaskNotFoundError(f"task {task_id} not found")
        return await self._register(task_id, participant, config, running=not view.closed)

    async def _register(
        self,
        task_id: str,
        participant: str | None,
        config: ProtoJSON,
        *,
        running: bool | None = None,
    ) -> ProtoJSON:
        """Keep a webhook for an admitted caller, then: a task that has ended tells it how it
        ended, once; a running one pushes from now on. ``running`` None: not known yet (a message's
        webhook, kept before the message reaches a task that may not exist)."""
        body = await self._put_push_config(task_id, participant, config)
        record = await self._record(task_id) if not running else None
        if record is not None:
            await self._tell_the_end(record, body)
        elif running or (running is None and await self._row(task_id) is not None):
            with contextlib.suppress(RPCError):
                await self._call(
                    lambda c: c.get_workflow_handle(task_id).signal(TaskWorkflow.enable_push)
                )
        return body

    async def push_configs(self, task_id: str, participant: str | None) -> list[ProtoJSON]:
        """The caller's own webhooks of the task. Raises ``TaskNotFoundError``."""
        view = await self.view(task_id, participant)
        if view is None:
            raise TaskNotFoundError(f"task {task_id} not found")
        configs = await anyio.to_thread.run_sync(self._store.push_configs, task_id)
        return [body for _, owner, body in configs if owner == (participant or "")]

    async def delete_push_config(
        self, task_id: str, config_id: str, participant: str | None
    ) -> bool:
        """Remove one of the caller's webhooks of the task; False when it has none of that id."""
        configs = await self.push_configs(task_id, participant)
        if not any(c.get("id") == config_id for c in configs):
            return False
        return await anyio.to_thread.run_sync(
            self._store.delete_push_config, task_id, config_id, participant or ""
        )

    async def accept_push(self, standin_id: str, token: str, body: ProtoJSON) -> bool:
        """Take a push of another agent for one of this agent's delegations: True when the token
        matches the stand-in's digest (compared in constant time) and the stand-in is a
        delegation of this agent (on its queue); then, and only then, the stand-in is woken with
        the pushed state. Anything else wakes nothing. Repeated pushes change nothing more."""
        digest = await anyio.to_thread.run_sync(self._store.push_token, standin_id)
        offered = hashlib.sha256(token.encode()).hexdigest()
        if digest is None or not hmac.compare_digest(digest, offered):
            return False

        try:
            if not await self._runs_here(standin_id, DELEGATION_WORKFLOW):
                return False
        except RPCError:
            return False
        update: object = body.get("statusUpdate") or body.get("task") or {}
        try:
            # Another agent's JSON, in the shape A2A gives a status (and our rendering of it).
            raw = cast("ProtoJSON", update).get("status") if isinstance(update, dict) else None
            status: ProtoJSON = MessageToDict(
                ParseDict(raw or {}, TaskStatus(), ignore_unknown_fields=True)
            )
        except (ParseError, TypeError, ValueError):
            return True  # nothing a stand-in can use; the token was right, so no 401
        status = relayable(status)
        state = str(status.get("state", ""))
        if not state:
            return True  # an artifact, say: the stand-in reads the task once it settles
        with contextlib.suppress(RPCError):
            await self._call(
                lambda c: c.get_workflow_handle(standin_id).signal(
                    DelegationWorkflow.pushed, args=[state, status]
                )
            )
        return True
