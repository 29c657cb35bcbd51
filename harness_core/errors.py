"""Every error the runtime raises on purpose; all subclass :class:`HarnessError`.

Messages name the offending value and say what to do, so that the CLI can print them as one
line and the HTTP layer can log them without ever forwarding their text to a client.
"""

from __future__ import annotations

import re

__all__ = [
    "INSTALL_MODELS",
    "CardSigningError",
    "ConfigError",
    "EmbeddedTemporalError",
    "HarnessAlreadyStartedError",
    "HarnessConflictError",
    "HarnessError",
    "HarnessNotStartedError",
    "HarnessStoppedError",
    "InvalidRequestValueError",
    "SigningKeyError",
    "TaskBusyError",
    "TaskClosedError",
    "TaskNotCancelableError",
    "TaskNotFoundError",
    "TemporalConnectionError",
]

#: How to get what the LLM agent needs (pydantic-ai and the provider SDKs), said the same everywhere.
INSTALL_MODELS = (
    "install the a2a-harness 'models' extra (in a checkout: pip install -e '.[models]')"
)


class HarnessError(Exception):
    """Base class of every error raised on purpose by a2a-harness."""


class ConfigError(HarnessError):
    """A configuration file or value is wrong; the message names the file, the key and what is allowed."""


class SigningKeyError(ConfigError):
    """The card signing key is not a private Ed25519 JWK with a kid, or two keys share a kid; the
    message says what is wrong and never shows the key."""


class CardSigningError(HarnessError):
    """A card cannot be signed so that every verifier accepts it: a REQUIRED field is empty, or
    the SDK would serve it with v0.3 fields the signature does not cover."""


class HarnessConflictError(HarnessError):
    """Two agents in one process claim the same id, namespace and queue, or store file."""


class HarnessNotStartedError(HarnessError):
    """Something needs a started agent (its Temporal client, its tasks) before it started."""


class HarnessAlreadyStartedError(HarnessError):
    """An agent or group was started a second time while it runs."""


class HarnessStoppedError(HarnessError):
    """An agent or group was started again after it stopped; each one runs once."""


class EmbeddedTemporalError(HarnessError):
    """The embedded Temporal dev server could not be started, reached or stopped."""

    @classmethod
    def connect_failed(cls, address: str, failure: BaseException) -> EmbeddedTemporalError:
        """The error for a failed ``Client.connect`` to the dev server this process started."""
        reason, _ = _connect_failure_reason(failure)
        return cls(f"the embedded Temporal dev server on {address} does not answer ({reason})")


class EmbeddedServerInUse(EmbeddedTemporalError):
    """The embedded database is locked by another live process, which runs its server."""

    def __init__(self, message: str, *, database: str, owner: int | None) -> None:
        super().__init__(message)
        self.database = database
        self.owner = owner


class TemporalConnectionError(HarnessError):
    """The remote Temporal server could not be reached, or it refused the connection."""

    @classmethod
    def connect_failed(cls, address: str, failure: BaseException) -> TemporalConnectionError:
        """The error for a failed ``Client.connect`` to ``address``, in our words.

        The client's own text (Rust transport errors, in Rust's debug format) is only read for its
        cause; raised ``from`` it, it stays on ``__cause__`` for a DEBUG log.
        """
        reason, key = _connect_failure_reason(failure)
        if key == "api_key_env":
            return cls(
                f"the Temporal server at {address} refused the connection ({reason}): "
                "check [temporal] api_key_env and namespace"
            )
        return cls(
            f"cannot reach the Temporal server at {address} ({reason}): check [temporal] {key}"
        )


# What a failed Temporal connect says in the client's (Rust) words, the cause in ours, and the
# [temporal] key to check. The first that matches wins.
_CONNECT_FAILURES: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), reason, key)
    for pattern, reason, key in (
        (r"connection ?refused", "connection refused", "address"),
        (
            r"dns error|failed to lookup address|name or service not known",
            "unknown host",
            "address",
        ),
        (r"(host|network) ?unreachable|no route to host", "no route to the host", "address"),
        (r"unauthenticated|permission ?denied", "credentials refused", "api_key_env"),
        (r"certificate|tls|ssl|handshake", "TLS failed", "tls"),
        (r"connection ?reset|broken ?pipe", "connection reset", "address and tls"),
        (r"timed ?out|deadline", "timed out", "address"),
    )
)


def _connect_failure_reason(failure: BaseException) -> tuple[str, str]:
    """A few words for why connecting to Temporal failed, and the ``[temporal]`` key to check."""
    text = str(failure)
    for pattern, reason, key in _CONNECT_FAILURES:
        if pattern.search(text):
            return reason, key
    return "the connection failed", "address"


class StoreUnavailableError(HarnessError):
    """The agent's PostgreSQL store could not be reached, or it refused the connection. The text
    names the server (never a password) and the ``[store]`` key to check."""


class TaskClosedError(HarnessError):
    """A message was sent to a task that has already ended (completed, failed or canceled)."""


class TaskBusyError(HarnessError):
    """A task stayed busy archiving its run for longer than a sender waits: retry in a moment."""


class TaskNotFoundError(HarnessError):
    """No task with this id exists for this agent."""


class TaskNotCancelableError(HarnessError):
    """The task has already ended, so it cannot be canceled."""


class InvalidRequestValueError(HarnessError):
    """A value in a request is not one the runtime can use; the message is safe to show the client."""
