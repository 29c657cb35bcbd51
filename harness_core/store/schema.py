"""The tables of an agent's store, and the version of their layout (``PRAGMA user_version``).

``tasks`` holds ended tasks' summaries (``TaskRecord``); ``task_messages`` and ``task_events`` the
archived history, at absolute positions; ``task_participants`` who may see a task; ``task_index``
the listing index, one row per task (running, ended, or a tombstone after the retention sweep);
``push_configs`` and ``push_tokens`` webhooks; ``remote_tasks`` the other agents' tasks
the delegations started; ``workspace_files`` the tasks' workspaces (``agents/workspace.py``);
``task_exchanges`` the LLM agent's tool calls and results of a turn, by the position of its answer,
and ``task_folds`` its compactions: the messages before ``upto`` folded into ``summary``;
``meta`` the agent's own keys (the last heartbeat).
"""

from __future__ import annotations

__all__ = ["SCHEMA", "VERSION"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY,
    context_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_context ON tasks (context_id, updated_at);
CREATE INDEX IF NOT EXISTS tasks_updated ON tasks (updated_at);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS task_participants (
    task_id TEXT NOT NULL,
    participant TEXT NOT NULL,
    PRIMARY KEY (participant, task_id)
);
CREATE TABLE IF NOT EXISTS task_messages (
    task_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    sender TEXT,
    body TEXT NOT NULL,
    PRIMARY KEY (task_id, position)
);
CREATE INDEX IF NOT EXISTS task_messages_id ON task_messages (task_id, message_id);
CREATE TABLE IF NOT EXISTS task_events (
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);
CREATE TABLE IF NOT EXISTS task_index (
    task_id TEXT PRIMARY KEY,
    context_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    state TEXT NOT NULL,
    status TEXT NOT NULL,
    status_at INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    closed INTEGER NOT NULL,
    busy INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    written_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS task_index_order ON task_index (status_at, task_id);
CREATE TABLE IF NOT EXISTS push_tokens (
    standin_id TEXT PRIMARY KEY,
    digest TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS remote_tasks (
    standin_id TEXT PRIMARY KEY,
    remote_task_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS push_configs (
    task_id TEXT NOT NULL,
    config_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (task_id, config_id)
);
CREATE INDEX IF NOT EXISTS task_index_context ON task_index (context_id, status_at, task_id);
CREATE TABLE IF NOT EXISTS task_exchanges (
    task_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    exchange TEXT NOT NULL,
    PRIMARY KEY (task_id, position)
);
CREATE TABLE IF NOT EXISTS task_folds (
    task_id TEXT NOT NULL,
    upto INTEGER NOT NULL,
    first INTEGER NOT NULL,
    summary TEXT,
    notified INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, upto)
);
CREATE TABLE IF NOT EXISTS workspace_files (
    task_id TEXT NOT NULL,
    path TEXT NOT NULL,
    content TEXT NOT NULL,
    size INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, path)
);
"""
# PRAGMA user_version: 1 added task_participants; 2 split records into messages and events; 3 added
# the listing index (filled from the ended tasks' records).
VERSION = 3
