"""The names Temporal knows the harness's workflows, activities, signals and patches by, in one place.

A name is part of every recorded history: renaming one breaks the replay of histories that used it
(``tests/replay``), so each is written once, here.
"""

from __future__ import annotations

import os

__all__ = [
    "ARCHIVE",
    "CHECKPOINT",
    "COMPACT",
    "DELEGATE_ASK",
    "DELEGATE_CANCEL",
    "DELEGATE_POLL",
    "DELEGATE_SEND",
    "DELEGATE_STATUS",
    "DELEGATE_WAIT",
    "DELEGATION_WORKFLOW",
    "HEARTBEAT",
    "HEARTBEAT_WORKFLOW",
    "MODEL_STEP",
    "PUSH",
    "RELAY_ONCE",
    "RELAY_SIGNAL",
    "RUN_TURN",
    "SANDBOXED",
    "STORE_RECORD",
    "TASK_WORKFLOW",
    "TOOL_CALL",
]

# Workflows. The task and stand-in workflows are in their second generation (issue 14): a clean
# break that dropped the patches of the first, whose histories cannot replay on this code
# (docs/workflows.md). A worker of this code does not run tasks started by the first.
TASK_WORKFLOW = "TaskWorkflow.2"
DELEGATION_WORKFLOW = "DelegationWorkflow.2"
HEARTBEAT_WORKFLOW = "HeartbeatWorkflow"

# A task's activities.
RUN_TURN = "run_turn"
MODEL_STEP = "model_step"
TOOL_CALL = "tool_call"
COMPACT = "compact"
ARCHIVE = "archive"
CHECKPOINT = "checkpoint"
STORE_RECORD = "store_record"
PUSH = "push_deliver"
HEARTBEAT = "heartbeat"

# A delegation's activities: asking first within the delegating task's workflow task, then
# the stand-in's.
DELEGATE_ASK = "delegate_ask"
DELEGATE_SEND = "delegate_send"
DELEGATE_STATUS = "delegate_status"
DELEGATE_POLL = "delegate_poll"
DELEGATE_WAIT = "delegate_wait"
DELEGATE_CANCEL = "delegate_cancel"

# The signal a stand-in relays the other agent's progress with.
RELAY_SIGNAL = "relay"

# The patches of the current generation (docs/workflows.md lists what each one changes).
RELAY_ONCE = "relay-once"

#: Whether the task and stand-in workflows run in Temporal's sandbox. Not in production: the
#: sandbox imports the workflow's modules again for every run (about a third of a short task's
#: time, bench/README.md), and the workflows are thin drivers of pure, property-tested state.
#: ``HARNESS_WORKFLOW_SANDBOX=1`` turns it on; CI replays every recorded history that way
#: (tests/replay/test_sandboxed_replay.py), so time, randomness or I/O in workflow code fails
#: there, loudly.
SANDBOXED = os.environ.get("HARNESS_WORKFLOW_SANDBOX", "") == "1"
