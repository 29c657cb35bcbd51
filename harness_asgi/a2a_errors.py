"""The A2A errors the handler answers with: a request's checks, and the runtime's errors translated.

A request is checked before it reaches the agent's ``TaskService``: its tenant, its ids, its
``historyLength`` and ``Last-Event-ID``, and whether its caller may send or read (``sender_of``,
``reader_of``). ``a2a_errors`` wraps every call into the runtime: each runtime error becomes the A2A
error it deserves, and any other exception a generic internal error, logged with a request id; its
text never reaches the client.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Generator
from typing import cast

from a2a.server.context import ServerCallContext
from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from harness_asgi.identity import identity_of
from harness_core import errors

__all__ = [
    "MAX_SEQ",
    "a2a_errors",
    "check_history_length",
    "check_ids",
    "check_tenant",
    "last_event_id",
    "reader_of",
    "sender_of",
]

log = logging.getLogger("harness.http")


def sender_of(context: ServerCallContext) -> str | None:
    """Who sends a message; a strict caller nobody named may not."""
    identity = identity_of(context)
    if not identity.admitted:
        raise InvalidRequestError(
            message="no participant: this agent accepts messages only from an authenticated sender"
        )
    return identity.participant


def reader_of(context: ServerCallContext) -> str | None:
    """Whose tasks a read may reach; a strict caller nobody named reaches none."""
    identity = identity_of(context)
    if not identity.admitted:
        raise TaskNotFoundError()
    return identity.participant


#: The largest sequence number an event can have (the store keeps them as 64-bit integers).
MAX_SEQ = 2**63 - 1


def check_ids(*ids: tuple[str, str]) -> None:
    """Ids are names, not content: a control character (NUL above all, which PostgreSQL cannot
    store in text) is refused the same way on every store."""
    for name, value in ids:
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise InvalidParamsError(message=f"{name} must not hold control characters")


def last_event_id(context: ServerCallContext) -> int | None:
    """The ``Last-Event-ID`` a resubscribing client sent, or None when it sent none."""
    headers = cast("dict[str, str] | None", context.state.get("headers"))
    text = (headers or {}).get("last-event-id", "").strip()
    if not text:
        return None
    # harness.seq travels in a protobuf Struct, so clients may echo it as "3.0".
    try:
        seq = float(text)
    except ValueError:
        seq = -1.0
    if seq < 0 or not seq.is_integer() or seq > MAX_SEQ:
        raise InvalidParamsError(message="Last-Event-ID must be the harness.seq of an event")
    return int(seq)


def check_tenant(context: ServerCallContext, agent_id: str) -> None:
    """An agent is served at its own URL, and as the tenant named by its id at its group's root
    (A2A 1.0 tenant: a path or field the card names); a request naming another tenant is refused
    rather than served as if it named none."""
    if context.tenant and context.tenant != agent_id:
        raise InvalidParamsError(
            message=f"this agent is tenant {agent_id!r} only: send requests with that tenant, or "
            "none, to the URL its card names"
        )


def check_history_length(length: int) -> None:
    if length < 0:
        raise InvalidParamsError(message="historyLength must not be negative")


@contextlib.contextmanager
def a2a_errors(operation: str) -> Generator[None, None, None]:
    """Turn runtime errors into A2A errors; never let an exception's text reach the client."""
    try:
        yield
    except A2AError:
        raise
    except errors.TaskNotFoundError:
        raise TaskNotFoundError() from None
    except errors.TaskNotCancelableError:
        raise TaskNotCancelableError() from None
    except errors.TaskClosedError as exc:
        # A2A 1.0 3.1.1: a message to a task in a terminal state is an unsupported operation.
        # Our own message: it names the task and its state, nothing internal.
        raise UnsupportedOperationError(
            message=f"{exc}; start a new task for a new request"
        ) from None
    except errors.InvalidRequestValueError as exc:
        raise InvalidParamsError(message=str(exc)) from None
    except errors.TaskBusyError as exc:
        # Our own words; the same message sent again is delivered once.
        raise InternalError(message=str(exc)) from None
    except errors.HarnessNotStartedError:
        raise InternalError(message="the agent is not started") from None
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        # The caller went away (or waited past Temporal's limit): the message was delivered or
        # not, and a retry of it finds out without running it twice.
        log.info("%s: the update was cancelled or timed out", operation)
        raise InternalError(message="the agent did not answer in time; retry") from None
    except RPCError as exc:
        if exc.status not in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
            request_id = uuid.uuid4().hex[:12]
            log.exception("%s failed (request %s)", operation, request_id)
            raise InternalError(message=f"internal error (request {request_id})") from None
        # Temporal is out of reach (restarting, or the network): the client may retry.
        log.warning("%s: Temporal is unavailable (%s)", operation, exc.status.name)
        raise InternalError(message="the agent's Temporal service is unavailable; retry") from None
    except Exception:
        request_id = uuid.uuid4().hex[:12]
        log.exception("%s failed (request %s)", operation, request_id)
        raise InternalError(message=f"internal error (request {request_id})") from None
