"""The built-in LLM agent's turn, as the task's workflow runs it: a model request (an activity),
then each tool call the model asked for (an activity each, or a stand-in for an ``ask_<agent>``
tool), until the model answers or the turn's budget (steps, wall clock) is spent.

A mixin of ``TaskWorkflow`` (``harness_core.tasks.workflow``): the loop is workflow code, so it lives
beside the driver, and needs the driver's attempts and stand-ins.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, cast

import attrs
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from harness_core.payloads import (
    CompactRequest,
    ModelStep,
    ProtoJSON,
    TaskStart,
    ToolCallInput,
    ToolCallOutput,
    ToolCallSpec,
    TurnOutcome,
    TurnRequest,
)
from harness_core.tasks.attempts import (
    MODEL_ATTEMPTS,
    STALLED,
    TOOL_ATTEMPTS,
    Attempts,
    failure_type,
    not_counted,
)
from harness_core.tasks.delegating import Delegating
from harness_core.tasks.state import TaskState, answer_parts, text_message
from harness_core.temporal.names import COMPACT, MODEL_STEP, TOOL_CALL

__all__ = ["LlmTurn", "turn_failed"]


def turn_failed(error: BaseException) -> TurnOutcome:
    """A turn (or a model request) whose attempts are spent: the task fails, in our words."""
    cause = error.__cause__ if isinstance(error, ActivityError) else error
    text = "the agent could not complete this task"
    if isinstance(cause, ApplicationError) and cause.type in (
        "ModelRefused",
        "ModelUnavailable",
        STALLED,
    ):
        # Our own message (the activity classified the provider's answer, or the workflow
        # counted the stalls), safe to show.
        text = f"{text}: {cause.message}"
    return TurnOutcome(kind="fail", message=text_message(text))


class LlmTurn(Delegating):
    """The LLM loop of a task's workflow (its ``ask_<agent>`` tools delegate: ``Delegating``)."""

    _task: TaskState
    _attempts: Attempts

    async def _llm_turn(
        self, start: TaskStart, request: TurnRequest, local: bool
    ) -> TurnOutcome | None:
        """The model loop: request, call the tools it asks for, until it answers or the budget ends."""
        exchange: list[Any] = []
        emitted: list[tuple[str, ProtoJSON]] = []
        # Artifacts the turn's tools return with the answer (workspace files attached).
        attached: dict[str, ProtoJSON] = {}
        started = workflow.now()
        seq = self._task.last_seq()
        budget = timedelta(seconds=start.turn_seconds)
        step = 0
        while True:
            step += 1
            final = step >= start.max_steps or workflow.now() - started >= budget
            try:
                answer = await self._attempts.run(
                    MODEL_STEP,
                    # The first step writes the index entry; the others need not carry it. The
                    # turn and each exchange entry are arguments of their own: a large one is
                    # stored once by the claim check, and every later step refers to it.
                    (
                        request
                        if step == 1
                        else self._later_step(
                            request,
                            emitted,
                            attached,
                            self._task.last_seq() != seq or bool(self._task.mailbox),
                        )
                    ),
                    ModelStep,
                    step,
                    final,
                    *exchange,
                    # Streams follow the model's text live only when the workflow is free to
                    # answer their reads.
                    local=local,
                    attempts=MODEL_ATTEMPTS,
                )
            except (ActivityError, ApplicationError) as error:
                return turn_failed(error)
            if answer is None:
                return None
            if answer.declined:
                return TurnOutcome(kind="declined", declined=answer.declined)
            if answer.compact is not None:
                # Over the context budget: fold the oldest messages into a summary (its own
                # activity, once), then the next step asks with what is left. A fold counts as
                # a step, so a turn cannot fold for ever.
                first, upto = answer.compact
                fold = CompactRequest(
                    agent_id=start.agent_id,
                    task_id=start.task_id,
                    context_id=start.context_id,
                    first=first,
                    upto=upto,
                )
                try:
                    done = await self._attempts.run(
                        COMPACT, fold, int, local=local, attempts=MODEL_ATTEMPTS
                    )
                except (ActivityError, ApplicationError) as error:
                    return turn_failed(error)
                if done is None:
                    return None
                continue
            emitted.extend(answer.emitted)
            exchange.append(answer.response)
            if not answer.tool_calls or final:
                return TurnOutcome(
                    kind="complete",
                    message=answer.message or text_message(answer.text),
                    emitted=tuple(emitted),
                    artifacts=tuple(attached.values()),
                    recorded=answer.recorded,
                )
            results: list[Any] = []
            for spec in answer.tool_calls:
                if spec.delegate:
                    output = await self._ask(start, spec, local)
                else:
                    output = await self._tool(start, spec, local)
                if output is None:
                    return None
                for artifact in output.artifacts:
                    attached[str(artifact.get("artifactId", ""))] = artifact
                results.append(
                    {
                        "tool_call_id": spec.call_id,
                        "name": spec.name,
                        "text": output.text,
                        "failed": output.failed,
                    }
                )
            exchange.append({"tool_results": results})

    @staticmethod
    def _later_step(
        request: TurnRequest, emitted: list[Any], attached: dict[str, ProtoJSON], moved: bool
    ) -> TurnRequest:
        """A model step after the first: it does not write the index entry again, but keeps it
        (``entry``), with what the earlier steps emitted, to store the task's end when it
        answers. Not after tools' artifacts, nor once the task has new events or messages
        (``moved``: another agent's progress relayed, a message that came in while a tool ran as
        a regular activity): the workflow's outcome would then hold more than the step knows."""
        if not request.record_at or attached or moved:
            return attrs.evolve(request, index=None, record_at="")
        return attrs.evolve(request, index=None, entry=request.index, emitted=tuple(emitted))

    async def _ask(
        self, start: TaskStart, spec: ToolCallSpec, local: bool
    ) -> ToolCallOutput | None:
        """The model asked another agent (a delegation tool): one delegation (asked first when
        the turn is ``local``), its answer as the tool's result. None: the task was canceled
        meanwhile."""
        try:
            arguments: Any = json.loads(spec.arguments or "{}")
            text = (
                str(cast("ProtoJSON", arguments).get("message", ""))
                if isinstance(arguments, dict)
                else ""
            )
        except ValueError:
            text = ""
        if not text:
            return ToolCallOutput(f"{spec.name} needs a message to send", failed=True)
        message: ProtoJSON = {"role": "ROLE_USER", "parts": [{"text": text}]}
        sends = [(spec.call_id, spec.delegate, message)]
        results = await self._answers(start, sends, ask_first=local)
        if results is None:
            return None
        [result] = results
        if result is None:  # a failed stand-in is a failed tool call
            return ToolCallOutput(f"the agent {spec.delegate} could not be asked", failed=True)
        if result.error:
            return ToolCallOutput(f"the agent {spec.delegate} failed: {result.error}", failed=True)
        texts = [str(p.get("text", "")) for p in answer_parts(result) if "text" in p]
        state = result.state.removeprefix("TASK_STATE_").lower()
        return ToolCallOutput(f"({spec.delegate} {state}) " + "\n".join(texts))

    async def _tool(
        self, start: TaskStart, spec: ToolCallSpec, local: bool
    ) -> ToolCallOutput | None:
        call = ToolCallInput(
            agent_id=start.agent_id,
            task_id=start.task_id,
            call_id=spec.call_id,
            name=spec.name,
            arguments=spec.arguments,
        )
        try:
            return await self._attempts.run(
                TOOL_CALL,
                call,
                ToolCallOutput,
                # In a local turn an idempotent tool is a local activity too: the whole turn is
                # one workflow task. A tool that must not run twice stays a regular activity: a
                # local one runs again when its workflow task is retried on another worker.
                local=local and spec.idempotent,
                attempts=TOOL_ATTEMPTS if spec.idempotent else 1,
                seconds=spec.timeout,
                # A tool that must not run twice is not run again after a worker stopped it: it
                # may have taken effect.
                free_retries=spec.idempotent,
            )
        except (ActivityError, ApplicationError) as error:
            # The model hears that the tool failed and decides what to do; nothing internal.
            kind = failure_type(error) or "error"
            if not_counted(error):
                kind = "interrupted; it may or may not have taken effect"
            return ToolCallOutput(f"the tool {spec.name} failed ({kind})", failed=True)
