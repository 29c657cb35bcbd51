"""A task's delegations, as its workflow runs them: each message a turn hands to another agent is
asked first with a blocking send (a local activity, when every sender waits) or given to a
stand-in child workflow (``harness_core.delegation.workflow``), and the answers become the next
turn's messages.

A mixin of ``TaskWorkflow`` (``harness_core.tasks.workflow``), through ``LlmTurn``, whose
``ask_<agent>`` tools delegate the same way: workflow code, deterministic like the driver.
``asyncio`` here is Temporal's own deterministic workflow loop, as in the driver (``gather`` of
the asks and the stand-ins' starts, ``TimeoutError`` of a timed ``wait_condition``), whichever
backend the host runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from harness_core.payloads import (
    DelegationRequest,
    DelegationResult,
    ProtoJSON,
    TaskStart,
    TurnOutcome,
)
from harness_core.tasks.state import TaskState
from harness_core.temporal.names import DELEGATE_ASK, DELEGATION_WORKFLOW, RELAY_ONCE

__all__ = ["Delegating", "relay_once"]

# Stand-ins that answer within this time do not write their task's waiting state to the index.
_QUICK_DELEGATION = timedelta(seconds=0.5)


class Delegating:
    """The delegations of a task's workflow."""

    _task: TaskState

    async def _checkpoint(self, start: TaskStart) -> None:
        raise NotImplementedError

    async def _delegate(
        self, start: TaskStart, outcome: TurnOutcome, *, asked_first: bool
    ) -> TurnOutcome | None:
        """Hand the turn's messages to other agents and wait for all of them; their answers
        become the next turn's messages. ``asked_first`` (every sender waits, so nobody watches
        the task meanwhile): each new message is first sent blocking from this workflow task,
        for up to ``[delegation] block_for``; the rest go through stand-in child workflows.
        None: the task was canceled meanwhile (the stand-ins, and so the remote tasks, are
        canceled too)."""
        self._task.delegating(outcome)
        sends: list[tuple[str, str, ProtoJSON]] = []
        for index, spec in enumerate(outcome.delegations, start=1):
            message: ProtoJSON = {"role": "ROLE_USER", "parts": list(spec.parts)}
            if spec.task_id:
                message["taskId"] = spec.task_id
            sends.append((str(index), spec.target, message))
        results = await self._answers(start, sends, ask_first=asked_first)
        if results is None:
            return None
        for index, (spec, result) in enumerate(zip(outcome.delegations, results, strict=True), 1):
            if result is None:  # a failed stand-in is told as a failed delegation
                result = DelegationResult(
                    target=spec.target, remote_task_id="", state="", error="the delegation failed"
                )
            self._task.take_answer(index, result)
        # Not an answer: the next turn, with the other agents' answers, decides.
        return TurnOutcome(kind="delegate")

    async def _answers(
        self, start: TaskStart, sends: list[tuple[str, str, ProtoJSON]], *, ask_first: bool
    ) -> list[DelegationResult | None] | None:
        """The other agents' answers to (key, target, message) sends, in order (None for a
        delegation that failed); None when the task was canceled meanwhile. ``ask_first``:
        new messages are first sent blocking, in this workflow task (``_ask_first``); the rest
        go to stand-ins."""
        asking = ask_first and start.block_for > 0
        answers: dict[str, DelegationResult | None] = {}
        if asking:
            answers.update(await self._ask_first(start, sends))
        rest = [send for send in sends if send[0] not in answers]
        if rest:
            followed = await self._stand_ins(start, rest, asked=asking)
            if followed is None:
                return None
            answers.update(zip((key for key, _, _ in rest), followed, strict=True))
        return [answers[key] for key, _, _ in sends]

    def _delegation(
        self, start: TaskStart, key: str, target: str, message: ProtoJSON, *, asked: bool = False
    ) -> tuple[str, DelegationRequest]:
        """The stand-in id and the request of the turn's delegation ``key``. The message id is
        derived from the task, the turn and the key: every send of it reaches one remote task."""
        task = self._task
        number = task.turns
        # The remote tasks belong to the participant whose message asked for this turn.
        participant = task.asker or (
            task.participants[0] if task.participants else f"agent:{start.agent_id}"
        )
        request = DelegationRequest(
            agent_id=start.agent_id,
            parent_task_id=start.task_id,
            target=target,
            message={"messageId": f"{start.task_id}:{number}:{key}", **message},
            participant=participant,
            parent_context_id=start.context_id,
            asked=asked and not message.get("taskId"),
        )
        return f"{start.task_id}:delegate:{number}:{key}", request

    async def _ask_first(
        self, start: TaskStart, sends: list[tuple[str, str, ProtoJSON]]
    ) -> dict[str, DelegationResult]:
        """Send each new message (not an answer to another agent's question, whose stand-in
        notes the question first) blocking, all at once, as local activities of this workflow
        task: the answers that came within ``block_for``, by key. A delegation that failed or
        did not answer yet is left to its stand-in, which sends the same message again."""
        asks = [
            (key, *self._delegation(start, key, target, message))
            for key, target, message in sends
            if not message.get("taskId")
        ]
        if not asks:
            return {}
        outcomes = await asyncio.gather(
            *(
                workflow.execute_local_activity(
                    DELEGATE_ASK,
                    args=[request, stand_in, start.block_for],
                    result_type=DelegationResult,
                    start_to_close_timeout=timedelta(seconds=start.block_for + 10),
                    retry_policy=RetryPolicy(maximum_attempts=1),
                )
                for _, stand_in, request in asks
            ),
            return_exceptions=True,
        )
        answers: dict[str, DelegationResult] = {}
        for (key, _, _), result in zip(asks, outcomes, strict=True):
            if isinstance(result, DelegationResult) and result.state:
                answers[key] = result
            elif not isinstance(result, DelegationResult | ActivityError | ApplicationError):
                raise result
        return answers

    async def _stand_ins(
        self, start: TaskStart, sends: list[tuple[str, str, ProtoJSON]], *, asked: bool
    ) -> list[DelegationResult | None] | None:
        """Start one stand-in child workflow per (key, target, message) of this turn, all at once,
        and wait for all of them: their results in order (None for a stand-in that failed), or
        None when the task was canceled meanwhile (the stand-ins, and so the remote tasks, are
        canceled too). The key names the message and the stand-in within the turn; ``asked``:
        the new messages were sent already, by asks that gave up waiting."""
        task = self._task
        requests = [
            self._delegation(start, key, target, message, asked=asked)
            for key, target, message in sends
        ]
        handles: list[workflow.ChildWorkflowHandle[Any, DelegationResult]] = list(
            await asyncio.gather(
                *(
                    workflow.start_child_workflow(
                        DELEGATION_WORKFLOW,
                        request,
                        id=stand_in,
                        task_queue=workflow.info().task_queue,
                        result_type=DelegationResult,
                    )
                    for stand_in, request in requests
                )
            )
        )

        def waiting() -> bool:
            return not all(h.done() for h in handles) and not task.cancel_requested

        # The task waits, maybe long: past a moment, readers learn that it delegates (and, as
        # they come, what the other agents relay) from the index, while the stand-ins run.
        with contextlib.suppress(asyncio.TimeoutError):
            await workflow.wait_condition(lambda: not waiting(), timeout=_QUICK_DELEGATION)
        while waiting():
            if task.last_seq() > task.indexed_seq:
                await self._checkpoint(start)
            await workflow.wait_condition(
                lambda: not waiting() or task.last_seq() > task.indexed_seq
            )
        if task.cancel_requested:
            for handle in handles:
                if not handle.done():
                    handle.cancel()
            for handle in handles:
                # Each ends as it can (canceled, or done just before); the task is canceled anyway.
                with contextlib.suppress(BaseException):
                    await handle
            return None
        results: list[DelegationResult | None] = []
        for handle in handles:
            try:
                result = handle.result()
            except BaseException:
                results.append(None)
                continue
            # What the other agent said on the way (its stream showed it live already).
            task.relay(result.relays(handle.id), once=relay_once())
            results.append(result)
        return results


def relay_once() -> bool:
    """Whether another agent's progress is relayed once per message id (patch ``relay-once``:
    a stand-in may learn of one status by push, stream and a read of the task)."""
    return workflow.patched(RELAY_ONCE)
