"""The A2A ``RequestHandler`` over Temporal: one implementation, backend-neutral.

The SDK's ``DefaultRequestHandler`` is asyncio-only (its event queues call ``asyncio.create_task``), so
this handler talks to the agent's ``TaskService`` instead. Every method turns the runtime's errors into
the A2A error they deserve, and any other exception into a generic internal error: the exception is
logged with a request id and its text never reaches the client (the SDK would send ``str(exc)``).
That translation and the request's checks are in ``harness_asgi.a2a_errors``.

Streams (``SendStreamingMessage``, ``SubscribeToTask``) first yield the task, then follow its event log
until the task settles. Each event carries ``metadata["harness.seq"]``, its position in the log; a
client that lost a stream resubscribes with ``Last-Event-ID: <seq>`` and gets the events after it, with no
gap, also after a restart. A client that disconnects cancels only its own follow: the task goes on.
The follow's helpers (what a stream showed live, its patient reads) are in ``harness_asgi.streams``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from functools import partial
from typing import Any, cast

import anyio
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import (
    RequestHandler,
    validate_request_params,  # pyright: ignore[reportUnknownVariableType]
)
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length
from google.protobuf.json_format import MessageToDict, ParseDict

from harness_asgi.a2a_errors import (
    a2a_errors,
    check_history_length,
    check_ids,
    check_tenant,
    last_event_id,
    reader_of,
    sender_of,
)
from harness_asgi.identity import identity_of
from harness_asgi.protos import message_proto, task_proto
from harness_asgi.streams import (
    SEQ_KEY,
    Shown,
    ended,
    event_proto,
    indexed_progress,
    live_kind,
    patient_poll,
    status_message_id,
)
from harness_core.agents.modes import refused_media_types
from harness_core.harness import Harness
from harness_core.live import LiveEvent
from harness_core.payloads import TERMINAL_STATES, ProtoJSON, TaskEvent, TaskView
from harness_core.push.guard import webhook_problem
from harness_core.tasks.views import AFTER_TURN_DELAY, FOLLOW_FIRST_DELAY, FOLLOW_MAX_DELAY

__all__ = ["SEQ_KEY", "HarnessRequestHandler"]


def _task_proto(view: TaskView) -> Task:
    """The task for a client: its status's metadata (a declined turn's) is the task's."""
    task: dict[str, Any] = view.task
    status = cast("dict[str, Any]", task.get("status") or {})
    if "metadata" in status:
        plain = {k: v for k, v in status.items() if k != "metadata"}
        metadata: dict[str, Any] = {
            **cast("dict[str, Any]", task.get("metadata") or {}),
            **cast("dict[str, Any]", status["metadata"]),
        }
        task = {**task, "status": plain, "metadata": metadata}
    return task_proto(task)


class HarnessRequestHandler(RequestHandler):
    """Serves one agent's A2A methods from its Temporal-backed ``TaskService``."""

    def __init__(self, harness: Harness) -> None:
        self._harness = harness

    async def _message_push(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> ProtoJSON | None:
        """The webhook a SendMessage registers for its task (``configuration``), if any."""
        if not params.configuration.HasField("task_push_notification_config"):
            return None
        self._push_allowed(context)
        return await self._webhook(params.configuration.task_push_notification_config)

    def _check_message(self, message: Message, context: ServerCallContext) -> None:
        check_tenant(context, self._harness.agent_id)
        if message.role != Role.ROLE_USER:
            raise InvalidParamsError(message="message.role must be ROLE_USER")
        if not message.message_id:
            raise InvalidParamsError(message="message.messageId is required")
        check_ids(
            ("message.messageId", message.message_id),
            ("message.taskId", message.task_id),
            ("message.contextId", message.context_id),
        )
        modes = self._harness.input_modes
        refused = refused_media_types(MessageToDict(message), modes)
        if refused:
            raise ContentTypeNotSupportedError(
                message=f"this agent does not accept {', '.join(refused)}; it accepts "
                f"{', '.join(modes)} (its card's defaultInputModes)"
            )

    @validate_request_params
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        self._check_message(params.message, context)
        check_history_length(params.configuration.history_length)
        with a2a_errors("SendMessage"):
            tasks = self._harness.tasks
            delivery = await tasks.send(
                MessageToDict(params.message),
                participant=sender_of(context),
                wait=not params.configuration.return_immediately,
                push_config=await self._message_push(params, context),
            )
            if delivery.reply is not None:
                # The agent answered with a direct Message: the client gets no task.
                return message_proto(delivery.reply)
            task = _task_proto(delivery.view)
            return apply_history_length(task, params.configuration)

    @validate_request_params
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        self._check_message(params.message, context)
        participant = sender_of(context)
        with a2a_errors("SendStreamingMessage"):
            tasks = self._harness.tasks
            delivery = await tasks.send(
                MessageToDict(params.message),
                participant=participant,
                wait=False,
                push_config=await self._message_push(params, context),
            )
            task = _task_proto(delivery.view)
        yield task
        async for event in self._follow(
            delivery.task_id,
            delivery.cursor,
            participant,
            "SendStreamingMessage",
            first=delivery.view,
        ):
            yield event

    async def _follow(
        self,
        task_id: str,
        after: int,
        participant: str | None,
        operation: str,
        *,
        until_end: bool = False,
        first: TaskView | None = None,
    ) -> AsyncGenerator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent, None]:
        """Yield the task's events after ``after`` until it settles (a message's stream: the
        agent answered or asks for input) or, ``until_end``, until it ends (a subscription, A2A
        1.0 3.1.6: it lasts while the task can change).

        A turn running in this process reaches the stream live, as it emits; its durable copy,
        which arrives when the turn ends, is then left out where the stream already showed it
        whole (an artifact whose live chunks began with ``append`` false, a progress message).
        A live event carries the ``harness.seq`` of the last durable event before it, so a client
        that resubscribes with it gets the durable copy, with no gap.

        A turn running elsewhere (or a stream that follows the durable log only) shows its latest
        progress from the listing index, as a live event, once; its durable copy is then left out.
        ``first``: the task as the client got it first, whose status may show such progress: it is
        not shown again from the index, but its durable copy is (the task was a state; the stream
        gives the events, in their order).
        """
        tasks = self._harness.tasks
        async with self._harness.live.subscribe(tasks.agent_id, task_id) as live:
            if not self._harness.routes.live:
                live.overflowed = True  # the durable log alone
            shown = Shown()
            # The message ids of every status the stream showed or passed: a turn's progress read
            # from the index is shown only if the stream never had it.
            seen: set[str] = set()
            if first is not None:
                seen.add(status_message_id({"status": first.task.get("status") or {}}))
            delay = FOLLOW_FIRST_DELAY
            while True:
                with a2a_errors(operation):
                    page = await patient_poll(tasks, task_id, after, participant)
                    protos = [event_proto(event) for event in page.events]
                # Whatever an attempt emitted live was published before its durable copy could
                # be read, so it is pending now. It is shown where it happened: after the stored
                # events before it, and in place of its own copy.
                drained = [] if live.overflowed else live.drain()
                for event in drained:
                    shown.note(event)
                    if event.kind == "status":
                        seen.add(status_message_id(event.body))
                pending = list(drained)
                for event, proto in zip(page.events, protos, strict=True):
                    covered = shown.covers(event) and not live.overflowed
                    covered = shown.covers_indexed(event) or covered
                    if covered and pending:
                        async for live_proto in self._live_protos(pending, after, operation):
                            yield live_proto
                        pending.clear()
                    after = event.seq
                    if event.kind == "status":
                        seen.add(status_message_id(event.body))
                    if not covered:
                        yield proto
                async for live_proto in self._live_protos(pending, after, operation):
                    yield live_proto
                # A turn running in another process shows its latest progress in the listing
                # index: shown here too, once, as a live event (its durable copy is left out).
                progress = indexed_progress(task_id, page.view)
                if (
                    progress is not None
                    and status_message_id(progress.body) not in seen
                    and (
                        live.overflowed or not self._harness.live.turn_here(tasks.agent_id, task_id)
                    )
                ):
                    shown.note_indexed(progress.body)
                    seen.add(status_message_id(progress.body))
                    async for live_proto in self._live_protos([progress], after, operation):
                        yield live_proto
                if ended(page.view) if until_end else page.view.settled:
                    return
                delay = FOLLOW_FIRST_DELAY if page.events else min(delay * 1.5, FOLLOW_MAX_DELAY)
                if live.take_nudge():
                    delay = AFTER_TURN_DELAY
                await live.wait(delay)

    async def _live_protos(
        self, events: list[LiveEvent], after: int, operation: str
    ) -> AsyncGenerator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent, None]:
        for event in events:
            with a2a_errors(operation):
                proto = event_proto(TaskEvent(after, live_kind(event), event.body))
            yield proto

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        check_tenant(context, self._harness.agent_id)
        resume = last_event_id(context)
        after = resume or 0
        participant = reader_of(context)
        check_ids(("id", params.id))
        with a2a_errors("SubscribeToTask"):
            tasks = self._harness.tasks
            page = await tasks.events(params.id, after, participant)
            if page is None:
                raise TaskNotFoundError()
            if resume is None and page.view.state in TERMINAL_STATES:
                # A2A 1.0 3.1.6: an ended task cannot be subscribed to. A client resuming a
                # stream it lost (Last-Event-ID) still gets the rest of it.
                raise UnsupportedOperationError(
                    message=f"task {params.id} has ended ({page.view.state}); read it with "
                    "GetTask, or resume a lost stream with Last-Event-ID"
                )
            if after > page.view.last_seq:
                raise InvalidParamsError(
                    message=f"Last-Event-ID {after} is past the task's last event "
                    f"({page.view.last_seq})"
                )
            task = _task_proto(page.view)
            protos = [event_proto(event) for event in page.events]
        yield task
        for event, proto in zip(page.events, protos, strict=True):
            yield proto
            after = event.seq
        if ended(page.view):
            return
        async for event in self._follow(
            params.id, after, participant, "SubscribeToTask", until_end=True, first=page.view
        ):
            yield event

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        check_tenant(context, self._harness.agent_id)
        check_history_length(params.history_length)
        check_ids(("id", params.id))
        with a2a_errors("GetTask"):
            tasks = self._harness.tasks
            view = await tasks.view(params.id, reader_of(context))
            if view is None:
                return None
            task = _task_proto(view)
        return apply_history_length(task, params)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        check_tenant(context, self._harness.agent_id)
        if params.HasField("page_size") and not 1 <= params.page_size <= 100:
            raise InvalidParamsError(message="pageSize must be between 1 and 100")
        page_size = params.page_size if params.HasField("page_size") else 50
        try:
            state = TaskState.Name(params.status) if params.status else ""
        except ValueError:
            raise InvalidParamsError(message="status is not a TaskState") from None
        if params.HasField("history_length") and params.history_length < 0:
            raise InvalidParamsError(message="historyLength must not be negative")
        status_after: int | None = None
        if params.HasField("status_timestamp_after"):
            stamp = params.status_timestamp_after
            status_after = stamp.seconds * 1_000_000 + stamp.nanos // 1000
        identity = identity_of(context)
        if not identity.admitted:
            return ListTasksResponse(page_size=page_size)
        with a2a_errors("ListTasks"):
            tasks = self._harness.tasks
            views, next_token, total = await tasks.list(
                participant=identity.participant,
                context_id=params.context_id,
                state=state,
                status_after=status_after,
                page_size=page_size,
                page_token=params.page_token,
                history=params.history_length if params.HasField("history_length") else None,
                artifacts=params.include_artifacts,
            )
        response = ListTasksResponse(
            next_page_token=next_token, page_size=page_size, total_size=total
        )
        for view in views:
            with a2a_errors("ListTasks"):
                response.tasks.append(_task_proto(view))
        return response

    @validate_request_params
    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        check_tenant(context, self._harness.agent_id)
        check_ids(("id", params.id))
        with a2a_errors("CancelTask"):
            tasks = self._harness.tasks
            view = await tasks.cancel(params.id, reader_of(context))
            return _task_proto(view)

    def _push_allowed(self, context: ServerCallContext, *ids: tuple[str, str]) -> None:
        check_tenant(context, self._harness.agent_id)
        check_ids(*ids)
        if not self._harness.settings.push.enabled:
            raise PushNotificationNotSupportedError()

    async def _webhook(self, config: TaskPushNotificationConfig) -> ProtoJSON:
        """The config as ProtoJSON, once its URL passed the SSRF guard."""
        body: ProtoJSON = MessageToDict(config)
        problem = await anyio.to_thread.run_sync(
            partial(
                webhook_problem,
                config.url,
                self._harness.settings.push.allow_hosts,
                agents=self._harness.settings.push.agent_hosts,
                resolve=False,
            )
        )
        if problem is not None:
            raise InvalidParamsError(message=f"the webhook URL is refused: {problem}")
        return body

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        self._push_allowed(context, ("taskId", params.task_id), ("id", params.id))
        if not params.task_id:
            raise InvalidParamsError(message="taskId is required")
        with a2a_errors("CreateTaskPushNotificationConfig"):
            # Another's task reads as not found before anything about the webhook is said.
            if await self._harness.tasks.view(params.task_id, reader_of(context)) is None:
                raise TaskNotFoundError()
        body = await self._webhook(params)
        with a2a_errors("CreateTaskPushNotificationConfig"):
            stored = await self._harness.tasks.create_push_config(
                params.task_id, reader_of(context), body
            )
        return ParseDict(stored, TaskPushNotificationConfig(), ignore_unknown_fields=True)

    async def _configs(self, task_id: str, context: ServerCallContext) -> list[ProtoJSON]:
        with a2a_errors("push notification configs"):
            return await self._harness.tasks.push_configs(task_id, reader_of(context))

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        self._push_allowed(context, ("taskId", params.task_id), ("id", params.id))
        for config in await self._configs(params.task_id, context):
            if config.get("id") == params.id:
                return ParseDict(config, TaskPushNotificationConfig(), ignore_unknown_fields=True)
        raise InvalidParamsError(
            message=f"task {params.task_id} has no push notification config {params.id}"
        )

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        self._push_allowed(context, ("taskId", params.task_id))
        configs = await self._configs(params.task_id, context)
        return ListTaskPushNotificationConfigsResponse(
            configs=[
                ParseDict(c, TaskPushNotificationConfig(), ignore_unknown_fields=True)
                for c in configs
            ]
        )

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        self._push_allowed(context, ("taskId", params.task_id), ("id", params.id))
        with a2a_errors("DeleteTaskPushNotificationConfig"):
            # Idempotent: deleting a config that is not there (any more) is no error.
            await self._harness.tasks.delete_push_config(
                params.task_id, params.id, reader_of(context)
            )

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        # A2A 1.0 3.1.11: an agent whose card does not declare an extended card answers
        # UnsupportedOperationError.
        raise UnsupportedOperationError(
            message="this agent has no extended agent card (its card does not declare one)"
        )
