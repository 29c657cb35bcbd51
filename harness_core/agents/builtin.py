"""The agent a ``[model]`` section describes: echo, scripted, a Python factory, or a
model server (OpenAI Chat Completions or Anthropic) driven by the workflow's LLM loop."""

from __future__ import annotations

import importlib
from typing import Any

from harness_core.agents.compaction import DEFAULT_CONTEXT_TOKENS
from harness_core.agents.loop import ModelLoop
from harness_core.agents.turn import Agent
from harness_core.config import Settings
from harness_core.errors import INSTALL_MODELS, ConfigError
from harness_core.model import EchoModel, ScriptedModel, as_agent
from harness_core.plugins.contract import PluginToolError
from harness_core.plugins.runtime import AgentPlugins

__all__ = ["agent_from_config", "import_named", "model_loop_from_config"]


def import_named(spec: str, key: str, label: str) -> Any:
    """The object ``spec`` (``"package.module:name"``, the value of ``key`` in ``label``) names;
    a :class:`ConfigError` in the file's words when it cannot be imported."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0]:
            hint = (
                f" ({exc.name} is looked for on Python's import path: `harness` adds the "
                "directory it runs in; run it from the directory that holds your module, set "
                "PYTHONPATH to that directory, or pip install your package)"
            )
        raise ConfigError(
            f"{label}: '{key}' = {spec!r}: cannot import {module_name}: {exc}{hint}"
        ) from None
    except Exception as exc:  # the module itself fails: a syntax error, or what it raises
        raise ConfigError(
            f"{label}: '{key}' = {spec!r}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(
            f"{label}: '{key}' = {spec!r}: {module_name} has no {attribute}"
        ) from None


def agent_from_config(settings: Settings) -> Agent | None:
    """The turn agent of ``[model]``, or None when the workflow runs an LLM loop instead."""
    model = settings.model
    label = settings.label
    if model.kind == "scripted":
        return ScriptedModel(model.replies, delay=model.delay)
    if model.kind == "echo":
        return EchoModel(delay=model.delay)
    if model.kind == "tck":
        # The A2A TCK's message-id scenarios, on the public turn API (docs/conformance.md).
        from harness_core.agents.tck import TckAgent

        return TckAgent()
    if model.kind == "python":
        factory = import_named(str(model.factory), "model.factory", label)
        if not callable(factory):
            raise ConfigError(
                f"{label}: 'model.factory' = {model.factory!r} is of type {type(factory).__name__}, "
                "not a function that makes the agent"
            )
        try:
            made: Any = factory()
        except Exception as exc:
            raise ConfigError(
                f"{label}: 'model.factory' = {model.factory!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        try:
            return as_agent(made)
        except TypeError as exc:
            raise ConfigError(f"{label}: 'model.factory' = {model.factory!r}: {exc}") from None
    return None


def _mcp_tools(settings: Settings) -> Any:
    """The ``[[mcp]]`` servers (None without any; they need the mcp extra only then)."""
    if not settings.mcp:
        return None
    from harness_core.agents.mcp import McpTools

    return McpTools(settings.mcp, settings.base_dir, settings.label)


def model_loop_from_config(
    settings: Settings, plugins: AgentPlugins | None = None
) -> ModelLoop | None:
    """The model server and tools of ``[model]`` (kind openai or anthropic), else None."""
    model = settings.model
    if not model.is_llm:
        return None
    label = settings.label
    try:
        return ModelLoop(
            kind=model.kind,
            name=model.name or "test",
            base_url=model.base_url,
            api_key=settings.model_api_key(),
            system=model.system,
            tools=model.tools,
            plugins=plugins,
            workspace=model.workspace,
            mcp=_mcp_tools(settings),
            context_tokens=model.context_tokens or DEFAULT_CONTEXT_TOKENS,
        )
    except ImportError as exc:
        # Our own modules' ImportError says how to install the extra already; say it once.
        why = str(exc) if INSTALL_MODELS in str(exc) else f"{INSTALL_MODELS} ({exc})"
        raise ConfigError(
            f'{label}: model.kind = "{model.kind}" needs the models extra: {why}'
        ) from None
    except PluginToolError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{label}: 'model.tools': {exc}") from None
