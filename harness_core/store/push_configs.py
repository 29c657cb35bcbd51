"""Push notification configs in the store: clients' webhooks per task, and the digests of the
tokens that another agent's pushes to one of our delegations must carry.
"""

from __future__ import annotations

import json
from typing import cast

from harness_core.payloads import ProtoJSON
from harness_core.store.connection import StoreConnection
from harness_core.store.rows import dumps, now_micros

__all__ = ["PushConfigStore"]


class PushConfigStore(StoreConnection):
    """Webhooks and push tokens: a part of :class:`~harness_core.store.TaskStore`."""

    def put_push_config(self, task_id: str, config_id: str, owner: str, body: ProtoJSON) -> bool:
        """Keep (or replace) a client's webhook for a task. False, changing nothing, when another
        participant holds that config id on the task: an id belongs to its owner."""
        with self._read() as db:
            cursor = db.execute(
                "INSERT INTO push_configs (task_id, config_id, owner, body, added_at) "
                "VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (task_id, config_id) DO UPDATE SET body = excluded.body "
                "WHERE push_configs.owner = excluded.owner",
                (task_id, config_id, owner, dumps(body), now_micros()),
            )
            return cursor.rowcount == 1

    def push_configs(self, task_id: str) -> list[tuple[str, str, ProtoJSON]]:
        """The task's webhooks: (config id, owner, body), oldest first."""
        with self._read() as db:
            rows = db.execute(
                "SELECT config_id, owner, body FROM push_configs WHERE task_id = ? ORDER BY added_at, config_id",
                (task_id,),
            ).fetchall()
        return [(str(r[0]), str(r[1]), cast("ProtoJSON", json.loads(r[2]))) for r in rows]

    def put_push_token(self, standin_id: str, digest: str) -> None:
        """The digest of the token another agent's pushes to a delegation must carry."""
        with self._read() as db:
            db.execute(
                "INSERT INTO push_tokens VALUES (?, ?) "
                "ON CONFLICT (standin_id) DO UPDATE SET digest = excluded.digest",
                (standin_id, digest),
            )

    def push_token(self, standin_id: str) -> str | None:
        with self._read() as db:
            row = db.execute(
                "SELECT digest FROM push_tokens WHERE standin_id = ?", (standin_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def put_remote_task(self, standin_id: str, remote_task_id: str) -> None:
        """The other agent's task a delegation (its stand-in) started, as soon as it is known."""
        with self._read() as db:
            db.execute(
                "INSERT INTO remote_tasks VALUES (?, ?) "
                "ON CONFLICT (standin_id) DO UPDATE SET remote_task_id = excluded.remote_task_id",
                (standin_id, remote_task_id),
            )

    def remote_task(self, standin_id: str) -> str | None:
        with self._read() as db:
            row = db.execute(
                "SELECT remote_task_id FROM remote_tasks WHERE standin_id = ?", (standin_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def delete_push_config(self, task_id: str, config_id: str, owner: str) -> bool:
        """Remove ``owner``'s webhook ``config_id`` of the task; False when it has none."""
        with self._read() as db:
            return bool(
                db.execute(
                    "DELETE FROM push_configs WHERE task_id = ? AND config_id = ? AND owner = ?",
                    (task_id, config_id, owner),
                ).rowcount
            )
