"""The sections of an agent's TOML file, one frozen attrs class per table.

Each class is a table (``[agent]``, ``[temporal]``, ``[[agents]]``...), each field a key with its
default; the comments say what a key means. The loader walks these classes' field types to check
a file (``document``), so a new key is a new field here and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import attrs

__all__ = [
    "AgentConfig",
    "AuthConfig",
    "CardConfig",
    "DelegationConfig",
    "EmbeddedConfig",
    "HeartbeatConfig",
    "McpServerConfig",
    "ModelConfig",
    "PushConfig",
    "RemoteAgentConfig",
    "RetentionConfig",
    "ServerConfig",
    "StoreConfig",
    "TemporalConfig",
]


@attrs.frozen
class AgentConfig:
    """``[agent]``: who this agent is."""

    id: str = "harness"
    name: str | None = None  # the card name; None means the id
    description: str | None = None
    # Media types the agent accepts and produces ("image/png", "image/*"); () means its own
    # declaration, else what its kind handles (text/plain for echo, scripted and custom agents).
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()
    # Plugins, as "package.module:name" of a Plugin or of a function returning one; a plugin's
    # options are the [plugins.<its key>] table (docs/plugins.md).
    plugins: tuple[str, ...] = ()


@attrs.frozen
class AuthConfig:
    """``[auth]``: gateway tokens, bearer EdDSA JWTs whose keys a listed gateway serves."""

    # Gateways whose tokens are accepted: origins like "gateway.example.com" (read as https://);
    # a token's jku and iss must both be one of them. Empty: gateway tokens are off.
    gateway_origins: tuple[str, ...] = ()
    audience: str | None = None  # the aud a token must carry; None means the endpoint's URL
    # Where the token carries the caller (an object whose "key" becomes the participant) and the
    # tenant it may address. An override moves a claim: override both names or neither.
    identity_claim: str = "https://loopingai.org/identity"
    tenant_claim: str = "https://loopingai.org/tenant"


@attrs.frozen
class EmbeddedConfig:
    """``[temporal.embedded]``: the Temporal dev server the runtime starts itself."""

    database_path: Path | None = None  # None means temporal.sqlite3 beside the store
    ui_port: int = 0  # Temporal's Web UI on 127.0.0.1:<ui_port>; 0 means none (headless)


@attrs.frozen
class TemporalConfig:
    """``[temporal]``: which Temporal service to use and how to reach it."""

    mode: Literal["embedded", "remote"] = "embedded"
    address: str | None = None  # remote only, "host:port"
    namespace: str = "default"
    task_queue: str | None = None  # None means the agent id
    api_key_env: str | None = None  # remote only: the NAME of the variable holding the key
    tls: bool | None = None  # remote only; None means on exactly when an API key is configured
    # The claim check's directory: payloads over 16 KiB (files, long replies, tool results) are
    # kept there by digest and travel through Temporal as references. Every process that uses
    # the same Temporal connection must share it. None means beside the embedded database
    # (<database>-payloads/), or .harness/temporal-payloads/ beside the store when remote (in a
    # process, agents on one connection use its first agent's).
    payloads: Path | None = None
    embedded: EmbeddedConfig = attrs.field(factory=EmbeddedConfig)


@attrs.frozen
class ServerConfig:
    """``[server]``: the HTTP endpoint that serves the agent."""

    bind: str = "127.0.0.1:8000"  # "HOST:PORT", IPv6 as "[::1]:8000"
    base_url: str | None = None  # the public URL; None means "http://<bind>"
    graceful_timeout: float = 5.0  # seconds in-flight work gets on shutdown
    max_request_bytes: int = 1_048_576  # the largest request body accepted, at least 1024
    rate_limit_per_minute: int = 0  # requests a minute per client address; 0 means no limit
    cors_origins: tuple[str, ...] = ()  # "*" or origins like "https://app.example.com"
    ui_dir: Path | None = None  # static files served at <public URL>/ui; an existing directory
    access_log: bool = False  # one INFO line per request on the "harness.access" logger


@attrs.frozen
class StoreConfig:
    """``[store]``: where the agent keeps its own state."""

    path: Path | None = None  # None means .harness/<agent id>.sqlite3
    # A PostgreSQL store instead of the SQLite file: "postgresql://user@host:port/database" (no
    # password in it); the agent's tables go in their own schema of that database.
    url: str | None = None
    password_env: str | None = None  # the NAME of the variable holding the password
    schema: str | None = None  # None means the agent id
    pool_size: int = 8  # connections this process may hold, at least 1
    # The claim check's payloads in an object store instead of [temporal] payloads' directory:
    # "s3://bucket/prefix", "gs://bucket/prefix" or "az://container/prefix" (credentials from the
    # environment), shared by every host.
    blobs: str | None = None


@attrs.frozen
class HeartbeatConfig:
    """``[heartbeat]``: how often the agent reports that it is alive."""

    interval: float = 60.0  # seconds, at least 1


@attrs.frozen
class RemoteAgentConfig:
    """``[[agents]]``: another agent this one may delegate to, served elsewhere."""

    id: str  # the id turns use to name it (Delegation(to=id))
    url: str  # its A2A base URL (where its card is, under /.well-known/agent-card.json)
    tenant: str | None = None  # the tenant to send as, if its endpoint serves several
    # stream: read on the send's stream for [delegation] stream_for, then as push (or follow)
    # would; push: it pushes to us from the start (if its card offers it); follow: we read.
    updates: Literal["stream", "push", "follow"] = "stream"
    # Headers to send, by name; each value is the NAME of an environment variable holding it.
    headers: tuple[str, ...] = ()


@attrs.frozen
class McpServerConfig:
    """``[[mcp]]``: an MCP server whose tools the built-in LLM agent may call."""

    id: str  # names the server in logs and errors
    command: str | None = None  # stdio: the program to run (exactly one of command and url)
    args: tuple[str, ...] = ()  # stdio: its arguments
    cwd: Path | None = None  # stdio: its working directory; None means the file's directory
    env: tuple[str, ...] = ()  # stdio: NAMES of environment variables it is given
    url: str | None = None  # streamable HTTP: the server's URL
    headers: tuple[str, ...] = ()  # HTTP: "Header-Name=ENV_VAR", the value from the variable
    prefix: str = ""  # put before each tool's name, as the model sees it
    idempotent: bool = True  # false: each call of its tools gets one attempt
    not_idempotent: tuple[str, ...] = ()  # its tools (as it names them) that must not run twice
    timeout: float = 60.0  # seconds one call may take
    required: bool = True  # false: start without it if it cannot be reached, and ask again


@attrs.frozen
class DelegationConfig:
    """``[delegation]``: how this agent's delegations follow the other agents' answers."""

    # A delegation reads the answer on its send's own stream (SendStreamingMessage) for this
    # long; a task still running then is followed by pushes, or by reading it. 0: from the start.
    stream_for: float = 2.0
    # A delegating turn whose senders all wait first asks with a blocking send, within its own
    # workflow task, for this long; only an answer that takes longer needs a stand-in. 0: never.
    block_for: float = 2.0


@attrs.frozen
class PushConfig:
    """``[push]``: push notifications (webhooks) to A2A clients."""

    enabled: bool = True  # the card declares pushNotifications; the four config methods work
    # Webhook hosts allowed although they are loopback or private (SSRF guard): host names, IP
    # addresses or networks ("127.0.0.1", "localhost", "10.0.0.0/8").
    allow_hosts: tuple[str, ...] = ()
    # The same, allowed only for other agents' push receivers (".../a2a/push/<id>"), so agents on
    # a private network push to each other without opening it to clients' webhooks.
    agent_hosts: tuple[str, ...] = ()
    timeout: float = 10.0  # seconds one webhook call may take


@attrs.frozen
class CardConfig:
    """``[card]``: how the agent card is served."""

    # The NAME of the variable holding the private Ed25519 JWK (with a kid) that signs the card;
    # None means the card is served unsigned.
    signing_key_env: str | None = None


@attrs.frozen
class RetentionConfig:
    """``[retention]``: how long tasks, their records and streams may last."""

    # A task waiting for input (or auth) that gets no message for this long ends; 0 means never.
    idle_timeout: float = 7 * 86400.0
    expired_state: Literal["canceled", "failed"] = "canceled"  # how an expired task ends
    # Ended tasks (record, messages, events) and blobs nothing refers to any more are removed by
    # the heartbeat this long after they ended; 0 means they are kept.
    ended_ttl: float = 30 * 86400.0
    max_streams: int = 1000  # open streams (SSE) of the agent in this process; past it: 503


@attrs.frozen
class ModelConfig:
    """``[model]``: what answers each turn: a built-in agent, a model server, or Python code."""

    kind: Literal["echo", "scripted", "tck", "openai", "anthropic", "test", "python"] = "echo"
    name: str | None = None  # openai/anthropic: the provider's model name
    base_url: str | None = None  # openai/anthropic: another server (Ollama, vLLM, a proxy)
    api_key_env: str | None = None  # openai/anthropic: the NAME of the variable holding the key
    system: str | None = None  # openai/anthropic: the system prompt
    tools: tuple[str, ...] = ()  # openai/anthropic: "package.module:function" async tools
    # openai/anthropic: the agents the model may ask (an ask_<id> tool each); unset: every agent
    # of the group and of [[agents]]; [] none.
    agents: tuple[str, ...] | None = None
    factory: str | None = None  # python: "package.module:callable" returning the agent
    replies: tuple[str, ...] = ()  # scripted: in order, then the last repeats; empty echoes
    delay: float = 0.0  # seconds each turn waits before answering
    local_activity: bool = True  # a local activity skips a task-queue round trip per turn
    turn_timeout: float = 60.0  # seconds one attempt of a turn (or a model request) may take
    max_steps: int = 20  # openai/anthropic: model requests per turn before it must answer
    # openai/anthropic/test: the model gets a file workspace per task (workspace_* tools); on
    # also when a plugin supplies a workspace backing.
    workspace: bool = False
    # openai/anthropic/test: the most (estimated) tokens one model request may hold; past it the
    # task's oldest messages are folded into a summary. None means 100000.
    context_tokens: int | None = None
    turn_budget: float = 600.0  # openai/anthropic: seconds of wall clock per turn

    @property
    def is_llm(self) -> bool:
        """The workflow runs the model loop (a model server, or pydantic-ai's offline ``TestModel``),
        not one activity per turn."""
        return self.kind in ("openai", "anthropic", "test")
