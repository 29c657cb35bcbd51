"""The built-in LLM agent's steps: one model request (``model_step``) and one tool call (``tool_call``).

The workflow runs the loop (``TaskWorkflow._llm_turn``); these are what its activities call. A model
request is built from the turn's messages (the task's history, files included) and the loop's own
exchange this turn (earlier responses and tool results, as pydantic-ai JSON that the workflow carries
without reading). Each entry of the exchange is its own activity argument, so the claim check
(``harness_core.temporal.codec``) stores a large one once and every later step refers to it: a turn's
history grows by a reference per step, not by the whole exchange. The model's text streams into the turn's response artifact as it arrives. Provider
failures are classified (``harness_core.agents.llm``): a rate limit, timeout or 5xx is retried by the
workflow with backoff; a refused key or request fails the turn at once, with our message, never the
provider's text.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from harness_core.agents.compaction import DEFAULT_CONTEXT_TOKENS, Row, Transcript
from harness_core.agents.context import ActivityTurnContext
from harness_core.agents.turn import TurnMessage
from harness_core.payloads import (
    ModelStep,
    ModelStepInput,
    ToolCallInput,
    ToolCallOutput,
    ToolCallSpec,
)

if TYPE_CHECKING:
    from pydantic_ai.models import Model as PaiModel

    from harness_core.agents.mcp import McpTools
    from harness_core.agents.tools import LoadedTool
    from harness_core.agents.workspace import Workspace
    from harness_core.plugins.runtime import AgentPlugins

__all__ = ["ModelLoop"]

log = logging.getLogger("harness.worker")

#: The most messages of a context's earlier tasks the model is given before the task's own.
CONTEXT_MESSAGES = 50


class ModelLoop:
    """Model requests and tool calls for one agent: its model server, system prompt and tools.

    Building it imports pydantic-ai (the ``models`` extra) and every configured tool, so a missing
    package or a wrong tool path fails when the agent starts, not on its first turn.
    """

    def __init__(
        self,
        *,
        kind: str,
        name: str,
        base_url: str | None,
        api_key: str | None,
        system: str | None,
        tools: Sequence[str] = (),
        plugins: AgentPlugins | None = None,
        workspace: bool = False,
        mcp: McpTools | None = None,
        context_tokens: int = DEFAULT_CONTEXT_TOKENS,
    ) -> None:
        from harness_core.agents import llm
        from harness_core.agents.tools import InvalidToolError, describe_tool, load_tool
        from harness_core.plugins.contract import PluginToolError

        self._llm = llm
        self._model: PaiModel = llm.build_model(
            cast("Any", kind), name, base_url=base_url, api_key=api_key
        )
        # The plugins' capability texts follow the configured prompt.
        capabilities = plugins.capabilities() if plugins is not None else ""
        self._system = "\n\n".join(p for p in (system or "", capabilities) if p) or None
        self._plugins = plugins
        # Where the requests go, for the log: the model and its server, without any user
        # information a URL may hold.
        self._where = (
            "the test model"
            if kind == "test"
            else f"{name} at {llm.server_of(cast('Any', kind), base_url)}"
        )
        loaded = [load_tool(spec) for spec in tools]
        self._tools: dict[str, LoadedTool] = {tool.name: tool for tool in loaded}
        for key, function in plugins.tools() if plugins is not None else ():
            label = f"{getattr(function, '__qualname__', function)!s} of plugin {key!r}"
            try:
                described = describe_tool(function, label, owner=key)
            except InvalidToolError as error:
                raise PluginToolError(str(error)) from None
            clash = self._tools.get(described.name)
            if clash is not None:
                raise PluginToolError(
                    f"the tool {described.name!r} of plugin {key!r} has the name of "
                    f"{clash.spec!r} (model.tools); rename one (@tool(name=...))"
                )
            self._tools[described.name] = described
        # The task's file workspace (agents/workspace.py): offered when configured or when a
        # plugin supplies its backing; its Workspace is set while the agent runs.
        self.offers_workspace = workspace or (
            plugins is not None and plugins.workspace() is not None
        )
        if self.offers_workspace:
            from harness_core.agents.workspace import WORKSPACE_TOOLS

            for name in WORKSPACE_TOOLS:
                if name in self._tools:
                    raise PluginToolError(
                        f"the tool {self._tools[name].spec!r} is named {name!r}, a workspace "
                        "tool's name; rename it (@tool(name=...)) or turn the workspace off"
                    )
        self.workspace: Workspace | None = None
        # [[mcp]] servers' tools: listed when the agent starts (start_mcp), on the Temporal loop.
        self._mcp = mcp
        #: The budget of one model request, in estimated tokens (agents/compaction.py).
        self.context_tokens = context_tokens
        #: The agents this one may ask, as (id, description) (set by its harness): each is
        #: offered to the model as a tool ``ask_<id>`` that delegates over A2A.
        self.delegates: Callable[[], list[tuple[str, str]]] = list

    def _delegation_tools(self) -> dict[str, tuple[str, Any]]:
        """Tool name -> (agent id, tool definition) for every agent this one may ask."""
        from pydantic_ai.tools import ToolDefinition

        tools: dict[str, tuple[str, Any]] = {}
        for agent_id, description in self.delegates():
            name = "ask_" + re.sub(r"[^A-Za-z0-9_]", "_", agent_id)
            tools[name] = (
                agent_id,
                ToolDefinition(
                    name=name,
                    description=f"Ask the agent {agent_id} (another A2A agent) and get its "
                    f"answer. {description}",
                    parameters_json_schema={
                        "type": "object",
                        "properties": {
                            "message": {"type": "string", "description": "what to ask it"}
                        },
                        "required": ["message"],
                    },
                ),
            )
        return tools

    def _workspace_definitions(self) -> list[Any]:
        if not self.offers_workspace:
            return []
        from harness_core.agents.workspace import workspace_tool_definitions

        return workspace_tool_definitions()

    async def start_mcp(self) -> None:
        """List the ``[[mcp]]`` servers' tools (a required server that cannot be reached raises
        ``ConfigError``). Runs on the Temporal loop, which owns the servers' sessions."""
        if self._mcp:
            self._mcp.reserve({*self._tools, *self._delegation_tools(), *self._workspace_names()})
            await self._mcp.start()

    def _workspace_names(self) -> list[str]:
        if not self.offers_workspace:
            return []
        from harness_core.agents.workspace import WORKSPACE_TOOLS

        return list(WORKSPACE_TOOLS)

    async def aclose(self) -> None:
        try:
            if self._mcp:
                await self._mcp.aclose()
        finally:
            await self._llm.close_model(self._model)

    def _exchange_messages(self, exchange: Sequence[Any]) -> list[Any]:
        """A turn's exchange (model responses and tool results, as the workflow carries them) as
        pydantic-ai messages."""
        llm = self._llm
        messages: list[Any] = []
        for item in exchange:
            if isinstance(item, dict) and "tool_results" in item:
                results = cast("list[dict[str, Any]]", cast("dict[str, Any]", item)["tool_results"])
                messages.append(
                    llm.tool_return_message(
                        [
                            (
                                llm.ToolCall(str(r["tool_call_id"]), str(r["name"]), "{}"),
                                str(r["text"]),
                                bool(r["failed"]),
                            )
                            for r in results
                        ]
                    )
                )
            else:
                messages.extend(llm.load_messages([item]))
        return messages

    def _rows_messages(self, rows: Sequence[Row], system: str | None) -> list[Any]:
        """The task's messages as pydantic-ai messages: an earlier turn's answer that came with
        tool calls is that turn's exchange (its tool calls, their results and the answer)."""
        llm = self._llm
        out: list[Any] = []
        segment: list[TurnMessage] = []
        for row in rows:
            if row.exchange and row.message.role == "agent":
                out.extend(llm.to_model_messages(segment, system=None if out else system))
                segment = []
                if not out and system:
                    out.extend(llm.to_model_messages([], system=system))
                out.extend(self._exchange_messages(row.exchange))
            else:
                segment.append(row.message)
        out.extend(llm.to_model_messages(segment, system=None if out else system))
        return out

    async def step(
        self,
        transcript: Transcript,
        step: ModelStepInput,
        ctx: ActivityTurnContext,
        *,
        stream: bool = True,
    ) -> ModelStep:
        from harness_core.agents.compaction import choose_fold, estimate_tokens

        llm = self._llm
        system = self._system
        if transcript.summary:
            system = (
                f"{system or ''}\n\nA summary of this conversation's earlier messages, which "
                f"were folded away:\n{transcript.summary}"
            ).strip()
        # The context's earlier tasks with this sender first: what was said before this task.
        earlier = list(await ctx.context_history(CONTEXT_MESSAGES))
        rows = transcript.rows
        current = self._exchange_messages(step.exchange)
        messages = self._rows_messages([*(Row(-1, m) for m in earlier), *rows], system)
        messages.extend(current)
        budget = self.context_tokens
        total = estimate_tokens(messages)
        # Over the budget: the context's earlier tasks go first, oldest first.
        while earlier and total > budget:
            earlier.pop(0)
            messages = self._rows_messages([*(Row(-1, m) for m in earlier), *rows], system)
            messages.extend(current)
            total = estimate_tokens(messages)
        if total > budget and not step.final:
            # Then the task's own oldest messages, folded into a summary (not on the last step,
            # so that a turn cannot fold for ever).
            costs = [estimate_tokens(self._rows_messages([row], None)) for row in rows]
            cut = choose_fold(costs, total - sum(costs), budget, transcript.foldable)
            if cut:
                upto = rows[cut - 1].position + 1
                return ModelStep(
                    text="", tool_calls=(), response=None, compact=(rows[0].position, upto)
                )
        if total > budget:
            log.warning(
                "task %s: the model request is ~%d tokens, over the context budget of %d, "
                "with nothing left to fold that would help (the turn's own messages and tool "
                "results)",
                ctx.task_id,
                total,
                budget,
            )
        delegations = self._delegation_tools()
        if self._mcp:
            await self._mcp.refresh()
        mcp_tools = {t.name: t for t in self._mcp.tools()} if self._mcp else {}
        tools = (
            []
            if step.final
            else [
                *(tool.definition for tool in self._tools.values()),
                *(definition for _, definition in delegations.values()),
                *self._workspace_definitions(),
                *(t.definition() for t in mcp_tools.values()),
            ]
        )
        try:
            response = await llm.request(
                self._model, messages, tools, on_text_delta=ctx.delta, stream=stream
            )
        except llm.ModelCallError as error:
            # One line of ours; temporalio logs a benign failure at DEBUG only, without the
            # traceback of the provider's exception.
            log.warning(
                "task %s: a model request failed (%s): %s%s",
                ctx.task_id,
                self._where,
                error.message,
                "" if error.retryable else " (not retried)",
            )
            raise ApplicationError(
                error.message,
                type="ModelRefused" if not error.retryable else "ModelUnavailable",
                non_retryable=not error.retryable,
                category=ApplicationErrorCategory.BENIGN,
                next_retry_delay=(
                    timedelta(seconds=error.retry_after) if error.retry_after is not None else None
                ),
            ) from None
        text, calls = llm.response_summary(response)
        ctx.finish()
        specs: list[ToolCallSpec] = []
        for call in calls:
            tool = self._tools.get(call.name)
            target = delegations.get(call.name)
            remote = mcp_tools.get(call.name)
            # Each call the model asks for is a WORKING update (its name, not its arguments,
            # which may hold what the user said): streams and GetTask show the agent at work.
            doing = (
                f"asking {target[0]}"
                if target is not None and tool is None
                else f"calling {call.name}"
            )
            await ctx.progress(f"tool:{step.step}:{call.tool_call_id}", doing)
            specs.append(
                ToolCallSpec(
                    delegate=target[0] if target is not None and tool is None else "",
                    call_id=call.tool_call_id,
                    name=call.name,
                    arguments=call.args_json,
                    idempotent=(
                        tool.idempotent
                        if tool is not None
                        else remote.idempotent
                        if remote is not None
                        else True
                    ),
                    timeout=(
                        tool.timeout
                        if tool is not None
                        else remote.timeout
                        if remote is not None
                        else 60.0
                    ),
                )
            )
        return ModelStep(
            text=text,
            tool_calls=tuple(specs),
            response=llm.dump_messages([response])[0],
            emitted=tuple(ctx.emitted),
        )

    async def summarize(
        self,
        previous: str | None,
        messages: Sequence[tuple[int, TurnMessage]],
        exchanges: dict[int, list[Any]],
    ) -> str:
        """A summary of ``messages`` (and of the summary before them), made by the model."""
        from pydantic_ai import messages as pai

        from harness_core.agents.compaction import SUMMARY_INSTRUCTIONS, transcript

        llm = self._llm
        request = [
            pai.ModelRequest(
                parts=[
                    pai.SystemPromptPart(SUMMARY_INSTRUCTIONS),
                    pai.UserPromptPart(transcript(previous, messages, exchanges)),
                ]
            )
        ]
        try:
            response = await llm.request(self._model, request, [], on_text_delta=None, stream=False)
        except llm.ModelCallError as error:
            log.warning("a summary request failed (%s): %s", self._where, error.message)
            raise ApplicationError(
                error.message,
                type="ModelRefused" if not error.retryable else "ModelUnavailable",
                non_retryable=not error.retryable,
                category=ApplicationErrorCategory.BENIGN,
            ) from None
        text, _ = llm.response_summary(response)
        return text

    async def call_tool(self, call: ToolCallInput) -> ToolCallOutput:
        from harness_core.agents.tools import ToolArgumentsError
        from harness_core.agents.workspace import WORKSPACE_TOOLS
        from harness_core.plugins.contract import PluginError, entered, left

        tool = self._tools.get(call.name)
        if tool is None:
            if self.workspace is not None and call.name in WORKSPACE_TOOLS:
                return await self.workspace.call(call.name, call.task_id, call.arguments)
            remote = self._mcp.get(call.name) if self._mcp else None
            if remote is not None and self._mcp is not None:
                return await self._mcp.call(remote, call.arguments)
            return ToolCallOutput(f"there is no tool named {call.name!r}", failed=True)
        # A plugin's tool finds its plugin's context (options, tables, the task) while it runs.
        token = (
            entered(self._plugins.context(tool.owner, call.task_id))
            if tool.owner and self._plugins is not None
            else None
        )
        try:
            return ToolCallOutput(await tool.call(call.arguments))
        except ToolArgumentsError as error:
            return ToolCallOutput(str(error), failed=True)
        except PluginError as error:
            # A plugin's code used the runtime wrongly (a refused statement): trying again cannot
            # help. Our own words, so the log says what was refused; the model hears the type.
            log.warning("task %s: the tool %s failed: %s", call.task_id, call.name, error)
            return ToolCallOutput(f"the tool {call.name} failed (PluginError)", failed=True)
        except Exception as error:
            # Retried by the workflow when the tool is idempotent; the model hears the type only.
            raise ApplicationError(
                f"the tool {call.name} raised {type(error).__name__}",
                type="ToolFailed",
                non_retryable=not tool.idempotent,
            ) from None
        finally:
            if token is not None:
                left(token)
