"""Delegation's pure parts: relaying another agent's status (whatever JSON it sends) and how a
failed call to another agent is classified."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from a2a.client.errors import A2AClientError
from a2a.utils.errors import A2AError, InternalError, TaskNotFoundError
from temporalio.exceptions import ApplicationError

from harness_core.delegation.calls import REFUSED, UNREACHABLE, _refused  # pyright: ignore[reportPrivateUsage]
from harness_core.payloads import DelegationProgress, relayed_status, status_key


def progress(status: dict[str, Any]) -> DelegationProgress:
    return DelegationProgress(
        stand_in="t:delegate:1:1", target="b", remote_task_id="rt", status=status
    )


def test_a_relayed_status_names_the_agents_it_came_through() -> None:
    """Given d's progress relayed by b, when a relays it, then its path is [b, d], its message id
    derives from the stand-in and the remote message, and it belongs to a's task."""
    status = {
        "state": "TASK_STATE_WORKING",
        "message": {
            "messageId": "m-1",
            "parts": [{"text": "d is thinking"}],
            "metadata": {"harness.delegation": {"agent": "d", "path": ["d"]}},
        },
    }
    relayed = relayed_status(progress(status), "task-a", "ctx-a")
    message = relayed["message"]
    assert relayed["state"] == "TASK_STATE_WORKING"
    assert message["messageId"] == "t:delegate:1:1:m-1"
    assert message["taskId"] == "task-a" and message["contextId"] == "ctx-a"
    assert message["parts"] == [{"text": "d is thinking"}]
    assert message["metadata"]["harness.delegation"] == {
        "agent": "b",
        "taskId": "rt",
        "state": "TASK_STATE_WORKING",
        "path": ["b", "d"],
    }


@pytest.mark.parametrize(
    "status",
    [
        {"state": "TASK_STATE_WORKING", "message": "just text"},
        {"state": "TASK_STATE_WORKING", "message": {"parts": "x", "metadata": "y"}},
        {"state": "TASK_STATE_WORKING", "message": {"metadata": {"harness.delegation": "x"}}},
        {
            "state": "TASK_STATE_WORKING",
            "message": {"metadata": {"harness.delegation": {"path": 3}}},
        },
        {"state": "TASK_STATE_WORKING", "message": {"parts": [1, {"text": "ok"}]}},
    ],
)
def test_a_status_of_any_shape_is_relayed_without_failing(status: dict[str, Any]) -> None:
    """Given another agent's status in a shape A2A does not give it, when it is relayed, then
    nothing raises (it runs in workflow code, where a raise would hang the task) and only what
    has the right shape is kept."""
    relayed = relayed_status(progress(status), "task-a", "ctx-a")
    message = relayed["message"]
    assert all(isinstance(part, dict) for part in message["parts"])
    assert message["metadata"]["harness.delegation"]["path"] == ["b"]
    assert isinstance(status_key(status), str)


def http_error(status: int) -> A2AClientError:
    request = httpx.Request("POST", "http://127.0.0.1/")
    response = httpx.Response(status, request=request)
    try:
        try:
            response.raise_for_status()
        except httpx.HTTPStatusError as cause:
            raise A2AClientError("HTTP Error: secret internal detail") from cause
    except A2AClientError as error:
        return error
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("error", "kind", "retried"),
    [
        (TaskNotFoundError("task x of tenant secret-internal not found"), REFUSED, False),
        (http_error(401), REFUSED, False),
        (http_error(404), REFUSED, False),
        (http_error(429), UNREACHABLE, True),
        (http_error(503), UNREACHABLE, True),
        (A2AClientError("connection refused to 10.0.0.7"), UNREACHABLE, True),
        (InternalError("database exploded"), UNREACHABLE, True),
    ],
)
def test_a_failed_call_is_told_in_our_words_and_retried_only_when_it_may_pass(
    error: A2AError, kind: str, retried: bool
) -> None:
    failure = _refused("b", error)
    assert isinstance(failure, ApplicationError)
    assert failure.type == kind
    assert failure.non_retryable is (not retried)
    text = failure.message
    assert text.startswith("agent b ")
    assert "secret" not in text and "10.0.0.7" not in text and "exploded" not in text


def test_a_remote_turn_a_plugins_gate_declined_ends_the_delegation_as_a_rejection():
    from a2a.types import Task, TaskStatus
    from a2a.types import TaskState as State

    from harness_core.delegation.activities import _from_task  # pyright: ignore[reportPrivateUsage]

    task = Task(id="r1", status=TaskStatus(state=State.TASK_STATE_SUBMITTED))
    task.metadata.update({"harness.declined": {"turn": 1, "plugins": ["quiet"]}})
    result = _from_task("b", task)
    assert result.state == "TASK_STATE_REJECTED"
    assert result.parts == ({"text": "the agent b declined to take this turn"},)
    plain = _from_task("b", Task(id="r2", status=TaskStatus(state=State.TASK_STATE_WORKING)))
    assert plain.state == "TASK_STATE_WORKING"
