"""The process-wide claims registry: two agents in one process may not share an id, a namespace and
task queue, or a store file. Claims are taken before any connection, so a clash starts nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Generator
from pathlib import Path

import attrs

from harness_core.config import Settings
from harness_core.errors import HarnessConflictError

__all__ = ["Claims", "claims"]


@attrs.frozen
class _Claim:
    kind: str
    value: str
    description: str


class Claims:
    """Who holds which agent id, (namespace, queue) and store file in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], str] = {}

    @staticmethod
    def _claims_of(settings: Settings) -> list[_Claim]:
        namespace = settings.temporal.namespace
        queue = settings.effective_task_queue
        return [
            _Claim("agent id", settings.agent_id, f"agent id {settings.agent_id!r}"),
            _Claim(
                "queue",
                # Not keyed by the address: one cluster has many spellings (localhost,
                # 127.0.0.1, a DNS name), and two agents polling one queue would run each
                # other's turns. Two clusters with equal namespace and queue names clash too,
                # which errs on the safe side.
                f"{namespace}|{queue}",
                f"task queue {queue!r} in namespace {namespace!r}",
            ),
            _Claim(
                "store",
                str(Path(settings.store_path).resolve()),
                f"store file {settings.store_path}",
            )
            if settings.store.url is None
            else _Claim(
                "store",
                f"{settings.store.url}#{settings.store_schema}",
                f"store schema {settings.store_schema!r} at {settings.store.url}",
            ),
        ]

    @contextlib.contextmanager
    def hold(self, settings: Settings, holder: str) -> Generator[None, None, None]:
        """Claim everything ``settings`` needs for ``holder`` until the block exits.

        Raises ``HarnessConflictError`` naming the clash and its holder, having claimed nothing.
        """
        wanted = self._claims_of(settings)
        with self._lock:
            for claim in wanted:
                owner = self._held.get((claim.kind, claim.value))
                if owner is not None:
                    raise HarnessConflictError(
                        f"{claim.description} is already claimed by {owner} "
                        f"(agents in one process need their own id, queue and store)"
                    )
            for claim in wanted:
                self._held[(claim.kind, claim.value)] = holder
        try:
            yield
        finally:
            with self._lock:
                for claim in wanted:
                    self._held.pop((claim.kind, claim.value), None)


claims = Claims()
