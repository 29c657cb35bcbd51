"""Every error the runtime raises on purpose; all subclass :class:`HarnessError`.

Messages name the offending value and say what to do, so that the CLI can print them as one
line and the HTTP layer can log them without ever forwarding their text to a client.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EmbeddedTemporalError",
    "HarnessAlreadyStartedError",
    "HarnessConflictError",
    "HarnessError",
    "HarnessNotStartedError",
    "HarnessStoppedError",
    "InvalidRequestValueError",
    "TaskClosedError",
    "TaskNotCancelableError",
    "TaskNotFoundError",
]


class HarnessError(Exception):
    """Base class of every error raised on purpose by a2a-harness."""


class ConfigError(HarnessError):
    """A configuration file or value is wrong; the message names the file, the key and what is allowed."""


class HarnessConflictError(HarnessError):
    """Two agents in one process claim the same id, namespace and queue, or store file."""


class HarnessNotStartedError(HarnessError):
    """Something needs a started agent (its Temporal client, its tasks) before it started."""


class HarnessAlreadyStartedError(HarnessError):
    """An agent or group was started a second time while it runs."""


class HarnessStoppedError(HarnessError):
    """An agent or group was started again after it stopped; each one runs once."""


class EmbeddedTemporalError(HarnessError):
    """The embedded Temporal dev server could not be started or stopped."""


class TaskClosedError(HarnessError):
    """A message was sent to a task that has already ended (completed, failed or canceled)."""


class TaskNotFoundError(HarnessError):
    """No task with this id exists for this agent."""


class TaskNotCancelableError(HarnessError):
    """The task has already ended, so it cannot be canceled."""


class InvalidRequestValueError(HarnessError):
    """A value in a request is not one the runtime can use; the message is safe to show the client."""
