"""How a refused delivery reaches the client: a busy task is a clear, retryable error in our words."""

from __future__ import annotations

import pytest
from a2a.utils.errors import InternalError
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from harness_asgi.a2a_errors import a2a_errors
from harness_core.errors import TaskBusyError
from harness_core.tasks.service import _update_error  # pyright: ignore[reportPrivateUsage]


def test_a_task_still_busy_after_the_senders_patience_is_a_retryable_error_in_our_words() -> None:
    refused = WorkflowUpdateFailedError(ApplicationError("task is busy; retry", type="TaskBusy"))
    error = _update_error(refused, "t-1")
    assert isinstance(error, TaskBusyError)
    with pytest.raises(InternalError) as answered, a2a_errors("SendMessage"):
        raise error
    assert "task t-1 is archiving its conversation" in str(answered.value)
    assert "retry the message in a moment" in str(answered.value)
    assert "internal error (request" not in str(answered.value)
