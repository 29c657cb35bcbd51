"""Push notifications to A2A clients: each update of a task goes to the webhooks its clients
registered (A2A 1.0 §3.1.7, §4.3.3), by an activity of the task's workflow that retries with backoff.

Every delivery passes the SSRF guard again (``harness_core.push.guard``: a name may resolve
elsewhere later) and connects to the addresses the guard checked, never resolving the name a second
time. Each call carries ``X-A2A-Notification-Token`` (the config's token) and ``Authorization`` (its
authentication), a JSON ``StreamResponse`` body, and has ``[push] timeout`` to answer 2xx.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, cast

import anyio
import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from harness_core.agent_tokens import AgentCredential
from harness_core.payloads import ProtoJSON, PushBatch, TaskEvent
from harness_core.push.guard import Webhook, pinned_request, resolve_webhook
from harness_core.store import TaskStore
from harness_core.urls import http_client

__all__ = ["PushActivities"]

log = logging.getLogger("harness.push")


class PushActivities:
    """The push delivery activity of one agent."""

    def __init__(
        self,
        agent_id: str,
        store: TaskStore,
        *,
        allow: Sequence[str],
        agents: Sequence[str] = (),
        timeout: float,
        credential: AgentCredential | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.store = store
        self.allow = tuple(allow)
        self.agents = tuple(agents)
        # Signs a callback token for webhooks with no authentication of their own.
        self.credential = credential
        self.timeout = timeout

    @activity.defn(name="push_deliver")
    async def push_deliver(self, batch: PushBatch) -> None:
        """POST each update to each webhook of the task, in order; any failure retries the batch
        (clients are told to expect duplicates, A2A 1.0 §4.3.3)."""
        if batch.agent_id != self.agent_id:
            raise ApplicationError(
                "the push of another agent", type="WrongAgent", non_retryable=True
            )
        configs = await anyio.to_thread.run_sync(self.store.push_configs, batch.task_id)
        events = list(batch.events)
        if configs and batch.stored_until > batch.stored_after:
            # Archived by an earlier run of the task before they were pushed.
            stored = await anyio.to_thread.run_sync(
                self.store.events, batch.task_id, batch.stored_after, batch.stored_until
            )
            events[:0] = stored
        if not configs or not events:
            return
        bodies = [push_body(event) for event in events]
        failures: list[str] = []
        async with http_client(timeout=self.timeout, follow_redirects=False) as http:
            for config_id, _owner, config in configs:
                failure = await self._deliver(
                    http, batch.task_id, config_id, config, bodies, activity.heartbeat
                )
                if failure is not None:
                    failures.append(f"{config_id}: {failure}")
        if failures:
            # Retried by the workflow's policy, with backoff; our own words only.
            raise ApplicationError(
                f"push notifications of task {batch.task_id} failed: {', '.join(failures)}"
            )

    async def push_now(
        self, task_id: str, config_id: str, config: ProtoJSON, events: Sequence[TaskEvent]
    ) -> bool:
        """POST ``events`` to one webhook now, once (a webhook registered on a task that has
        ended hears how it ended; nothing retries it). True when the webhook took them all."""
        bodies = [push_body(event) for event in events]
        async with http_client(timeout=self.timeout, follow_redirects=False) as http:
            failure = await self._deliver(http, task_id, config_id, config, bodies, lambda: None)
        if failure is not None:
            log.warning("task %s: push config %s: %s; not retried", task_id, config_id, failure)
        return failure is None

    async def _deliver(
        self,
        http: httpx.AsyncClient,
        task_id: str,
        config_id: str,
        config: ProtoJSON,
        bodies: Sequence[ProtoJSON],
        beat: Callable[[], None],
    ) -> str | None:
        """POST ``bodies`` in order to one webhook: None when it took them (or refused them for
        good, or its URL is refused: not worth retrying), else what failed, in our words."""
        checked = await anyio.to_thread.run_sync(
            partial(resolve_webhook, str(config.get("url", "")), self.allow, agents=self.agents)
        )
        if isinstance(checked, str):
            log.warning("task %s: push config %s skipped: %s", task_id, config_id, checked)
            return None
        headers = {"Content-Type": "application/json"}
        if config.get("token"):
            headers["X-A2A-Notification-Token"] = str(config["token"])
        auth = cast("ProtoJSON", config.get("authentication") or {})
        scheme = str(auth.get("scheme", ""))
        if scheme:
            credentials = str(auth.get("credentials", ""))
            headers["Authorization"] = f"{scheme} {credentials}".strip()
        elif self.credential is not None:
            url = str(config.get("url", ""))
            headers["Authorization"] = f"Bearer {self.credential.callback_token(url)}"
        for body in bodies:
            # A worker that dies mid-delivery is noticed by its missing heartbeats.
            beat()
            try:
                answer = await _post(http, checked, body, headers)
            except httpx.HTTPError as error:
                return type(error).__name__
            status = answer.status_code
            if 400 <= status < 500 and status not in (408, 425, 429):
                # The webhook refuses it (a wrong token, a config it forgot): asking again will
                # not help, and must not hold back the other webhooks.
                log.warning(
                    "task %s: push config %s refused with HTTP %d; not retried",
                    task_id,
                    config_id,
                    status,
                )
                return None
            if not 200 <= status < 300:
                return f"HTTP {status}"
        return None

    def all(self) -> list[Callable[..., Any]]:
        return [self.push_deliver]


async def _post(
    http: httpx.AsyncClient, webhook: Webhook, body: ProtoJSON, headers: dict[str, str]
) -> httpx.Response:
    """POST to the addresses the guard checked, in order, never resolving the name again."""
    error: httpx.HTTPError | None = None
    for address in webhook.addresses:
        url, host, extensions = pinned_request(webhook, address)
        try:
            return await http.post(
                url, json=body, headers={**headers, **host}, extensions=extensions
            )
        except httpx.ConnectError as failed:
            error = failed
    raise error if error is not None else httpx.ConnectError(f"{webhook.host} has no address")


def push_body(event: TaskEvent) -> ProtoJSON:
    """An event of the task as the ``StreamResponse`` a webhook gets, with its ``harness.seq``."""
    body = event.body
    key = "statusUpdate" if event.kind == "status" else "artifactUpdate"
    return {key: {**body, "metadata": {**body.get("metadata", {}), "harness.seq": event.seq}}}
