"""Push notification configs in the store: clients' webhooks per task, and the digests of the
tokens that another agent's pushes to one of our delegations must carry.
"""

from __future__ import annotations

import json
from typing import cast

from harness_core.payloads import ProtoJSON
from harness_core.store.connection import StoreConnection
from harness_core.store.rows import dumps

__all__ = ["PushConfigStore"]


class PushConfigStore(StoreConnection):
    """Webhooks and push tokens: a part of :class:`~harness_core.store.TaskStore`."""

    def put_push_config(self, task_id: str, config_id: str, owner: str, body: ProtoJSON) -> None:
        """Keep (or replace) a client's webhook for a task."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO push_configs VALUES (?, ?, ?, ?)",
                (task_id, config_id, owner, dumps(body)),
            )

    def push_configs(self, task_id: str) -> list[tuple[str, str, ProtoJSON]]:
        """The task's webhooks: (config id, owner, body), oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT config_id, owner, body FROM push_configs WHERE task_id = ? ORDER BY rowid",
                (task_id,),
            ).fetchall()
        return [(str(r[0]), str(r[1]), cast("ProtoJSON", json.loads(r[2]))) for r in rows]

    def put_push_token(self, standin_id: str, digest: str) -> None:
        """The digest of the token another agent's pushes to a delegation must carry."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO push_tokens VALUES (?, ?)", (standin_id, digest)
            )

    def push_token(self, standin_id: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT digest FROM push_tokens WHERE standin_id = ?", (standin_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def delete_push_config(self, task_id: str, config_id: str) -> bool:
        with self._lock:
            return bool(
                self._db.execute(
                    "DELETE FROM push_configs WHERE task_id = ? AND config_id = ?",
                    (task_id, config_id),
                ).rowcount
            )
