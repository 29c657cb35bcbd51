"""The workflows' logger: Temporal's replay-aware adapter (nothing is written while a history
replays), under the name ``harness.workflow``, without the workflow's info appended to each line as
a dict (``{'attempt': 1, 'namespace': ...}``): the line names its task, and the info stays on the
record (``temporal_workflow``) for a formatter that wants it."""

from __future__ import annotations

import logging

from temporalio import workflow

__all__ = ["log"]

log = workflow.LoggerAdapter(logging.getLogger("harness.workflow"), None)
log.workflow_info_on_message = False
