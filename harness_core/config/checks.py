"""The checks of values that have the right type but a wrong value, or clash with each other.

They run on the structured :class:`Settings` (after the document walk has checked the types):
patterns for ids, media types, import paths and variable names, ranges for durations and sizes,
keys that only one ``temporal.mode`` or ``model.kind`` uses, and ``[[agents]]`` entries.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from harness_core.config.sections import AuthConfig, ModelConfig
from harness_core.config.settings import Settings
from harness_core.config.values import (
    gateway_origin_problem,
    origin_problem,
    split_host_port,
    url_problem,
)
from harness_core.config.wording import bad_duration, bad_value
from harness_core.errors import ConfigError

__all__ = ["MAX_STREAM_FOR", "validate"]

_AGENT_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
# Only a name is accepted here; anything else is likely the key itself pasted in by mistake.
_ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
_MEDIA_TYPE_PATTERN = r"(\*/\*|[a-z0-9][a-z0-9.+-]*/(\*|[a-z0-9][a-z0-9.+-]*))"
_IMPORT_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
_IMPORT_HINT = 'must be "package.module:name", e.g. "my_pkg.tools:lookup_order"'
#: The longest ``[delegation] stream_for``: a stand-in hears a cancel only once its send returns.
MAX_STREAM_FOR = 10.0
#: The longest ``[delegation] block_for``: the delegating task's workflow task is held meanwhile
#: (a cancel is heard once it ends), as long as a local turn may be (``tasks.state.LONG_TURN``).
MAX_BLOCK_FOR = 4.0
_MIN_REQUEST_BYTES = 1024


def validate(settings: Settings, label: str) -> None:
    """Check the values that have the right type but a wrong value, or clash with each other."""
    agent, temporal, server = settings.agent, settings.temporal, settings.server
    model = settings.model

    if re.fullmatch(_AGENT_ID_PATTERN, agent.id) is None:
        raise bad_value(
            label,
            "agent.id",
            agent.id,
            f"must match {_AGENT_ID_PATTERN} (lowercase letters, digits and '-')",
        )
    if agent.name is not None and not agent.name.strip():
        raise bad_value(label, "agent.name", agent.name, "must not be blank; leave it out")
    for key, modes in (("input_modes", agent.input_modes), ("output_modes", agent.output_modes)):
        for index, mode in enumerate(modes):
            if re.fullmatch(_MEDIA_TYPE_PATTERN, mode) is None:
                raise bad_value(
                    label,
                    f"agent.{key}[{index}]",
                    mode,
                    'must be a media type like "text/plain", "image/*" or "*/*"',
                )

    for index, spec in enumerate(agent.plugins):
        if re.fullmatch(_IMPORT_PATTERN, spec) is None:
            raise bad_value(label, f"agent.plugins[{index}]", spec, _IMPORT_HINT)
        if spec in agent.plugins[:index]:
            raise bad_value(label, f"agent.plugins[{index}]", spec, "is named twice")

    if not temporal.namespace.strip():
        raise bad_value(label, "temporal.namespace", temporal.namespace, "must not be blank")
    if temporal.task_queue is not None and not temporal.task_queue.strip():
        raise bad_value(
            label, "temporal.task_queue", temporal.task_queue, "must not be blank; leave it out"
        )
    _check_env_name(temporal.api_key_env, "temporal.api_key_env", label)
    if temporal.mode == "embedded":
        remote_only = {
            "address": temporal.address,
            "api_key_env": temporal.api_key_env,
            "tls": temporal.tls,
        }
        for name, value in remote_only.items():
            if value is not None:
                raise ConfigError(
                    f"{label}: 'temporal.{name}' is only allowed when "
                    'temporal.mode = "remote" (mode is "embedded")'
                )
        if not 0 <= temporal.embedded.ui_port <= 65535:
            raise bad_value(
                label,
                "temporal.embedded.ui_port",
                temporal.embedded.ui_port,
                "must be a port from 1 to 65535, or 0 for no Web UI",
            )
    else:
        for name, value in (
            ("database_path", temporal.embedded.database_path),
            ("ui_port", temporal.embedded.ui_port or None),
        ):
            if value is not None:
                raise ConfigError(
                    f"{label}: 'temporal.embedded.{name}' is only allowed when "
                    'temporal.mode = "embedded" (mode is "remote")'
                )
        if temporal.address is None:
            raise ConfigError(
                f"{label}: 'temporal.address' is required when temporal.mode = \"remote\" "
                '("HOST:PORT", e.g. "my-namespace.a1b2c.tmprl.cloud:7233")'
            )
        try:
            split_host_port(temporal.address)
        except ValueError as exc:
            raise bad_value(label, "temporal.address", temporal.address, str(exc)) from None

    try:
        split_host_port(server.bind)
    except ValueError as exc:
        raise bad_value(label, "server.bind", server.bind, str(exc)) from None
    if server.base_url is not None:
        problem = url_problem(server.base_url)
        if problem is not None:
            raise bad_value(label, "server.base_url", server.base_url, problem)
    if server.graceful_timeout < 0:
        raise bad_duration(label, "server.graceful_timeout", server.graceful_timeout, "be >= 0")
    if server.max_request_bytes < _MIN_REQUEST_BYTES:
        raise bad_value(
            label,
            "server.max_request_bytes",
            server.max_request_bytes,
            f"must be at least {_MIN_REQUEST_BYTES} (bytes)",
        )
    if server.rate_limit_per_minute < 0:
        raise bad_value(
            label,
            "server.rate_limit_per_minute",
            server.rate_limit_per_minute,
            "must be >= 0 (0 means no limit)",
        )
    for index, origin in enumerate(server.cors_origins):
        problem = origin_problem(origin)
        if problem is not None:
            raise bad_value(label, f"server.cors_origins[{index}]", origin, problem)

    ui_path = settings.ui_path
    if ui_path is not None and not ui_path.is_dir():
        raise bad_value(
            label, "server.ui_dir", str(server.ui_dir), f"must be an existing directory ({ui_path})"
        )

    if settings.heartbeat.interval < 1:
        raise bad_duration(
            label, "heartbeat.interval", settings.heartbeat.interval, "be at least 1 second"
        )

    _validate_store(settings, label)

    seen_ids: set[str] = {agent.id}
    for index, remote in enumerate(settings.agents):
        where = f"agents[{index}]"
        if re.fullmatch(_AGENT_ID_PATTERN, remote.id) is None:
            raise bad_value(label, f"{where}.id", remote.id, "must match " + _AGENT_ID_PATTERN)
        if remote.id in seen_ids:
            raise bad_value(
                label, f"{where}.id", remote.id, "names this agent or another entry already"
            )
        seen_ids.add(remote.id)
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", remote.url):
            raise bad_value(label, f"{where}.url", remote.url, "must be an http(s) URL")
        _check_headers(remote.headers, where, label)

    _validate_mcp(settings, label)

    for key in ("allow_hosts", "agent_hosts"):
        for index, host in enumerate(getattr(settings.push, key)):
            if not re.fullmatch(r"[A-Za-z0-9.:/\-\[\]]{1,253}", host):
                raise bad_value(
                    label,
                    f"push.{key}[{index}]",
                    host,
                    'must be a host name, an IP address or a network ("10.0.0.0/8")',
                )
    if settings.push.timeout <= 0:
        raise bad_duration(label, "push.timeout", settings.push.timeout, "be more than 0")
    stream_for = settings.delegation.stream_for
    if not 0 <= stream_for <= MAX_STREAM_FOR:
        raise bad_duration(
            label, "delegation.stream_for", stream_for, f"be between 0 and {MAX_STREAM_FOR:g}s"
        )

    block_for = settings.delegation.block_for
    if not 0 <= block_for <= MAX_BLOCK_FOR:
        raise bad_duration(
            label, "delegation.block_for", block_for, f"be between 0 and {MAX_BLOCK_FOR:g}s"
        )

    _check_env_name(settings.card.signing_key_env, "card.signing_key_env", label)

    retention = settings.retention
    if retention.idle_timeout and retention.idle_timeout < 1:
        raise bad_duration(
            label, "retention.idle_timeout", retention.idle_timeout, "be 0 (never) or at least 1s"
        )
    if retention.ended_ttl and retention.ended_ttl < 1:
        raise bad_duration(
            label, "retention.ended_ttl", retention.ended_ttl, "be 0 (kept) or at least 1s"
        )
    if retention.max_streams < 1:
        raise bad_value(label, "retention.max_streams", retention.max_streams, "must be at least 1")

    if model.delay < 0:
        raise bad_duration(label, "model.delay", model.delay, "be >= 0")
    if model.turn_timeout <= 0:
        raise bad_duration(label, "model.turn_timeout", model.turn_timeout, "be more than 0")
    if model.kind != "scripted" and model.replies:
        raise ConfigError(
            f"{label}: 'model.replies' is only used when model.kind = \"scripted\" "
            f'(kind is "{model.kind}")'
        )
    _validate_model(model, label)
    _validate_auth(settings.auth, label)


def _validate_auth(auth: AuthConfig, label: str) -> None:
    for index, origin in enumerate(auth.gateway_origins):
        problem = gateway_origin_problem(origin)
        if problem is not None:
            raise bad_value(label, f"auth.gateway_origins[{index}]", origin, problem)
    if auth.audience is not None and not auth.audience.strip():
        raise bad_value(
            label,
            "auth.audience",
            auth.audience,
            "must not be blank; leave it out for the endpoint URL",
        )
    for key in ("identity_claim", "tenant_claim"):
        name: str = getattr(auth, key)
        if not name.strip():
            raise bad_value(label, f"auth.{key}", name, "must not be blank; leave it out")
    if auth.identity_claim == auth.tenant_claim:
        raise bad_value(
            label,
            "auth.tenant_claim",
            auth.tenant_claim,
            "must differ from auth.identity_claim (one claim holds the caller, the other the tenant)",
        )


def _validate_model(model: ModelConfig, label: str) -> None:
    llm_only = {
        "name": model.name,
        "base_url": model.base_url,
        "api_key_env": model.api_key_env,
        "system": model.system,
        "tools": model.tools or None,
        "agents": model.agents,
        "workspace": model.workspace or None,
        "context_tokens": model.context_tokens,
    }
    if not model.is_llm:
        for key, value in llm_only.items():
            if value is not None:
                raise ConfigError(
                    f"{label}: 'model.{key}' is only used when model.kind is \"openai\", "
                    f'"anthropic" or "test" (kind is "{model.kind}")'
                )
    elif model.kind == "test":
        for key in ("base_url", "api_key_env"):
            if llm_only[key] is not None:
                raise ConfigError(
                    f"{label}: 'model.{key}' is not used when model.kind = \"test\" "
                    "(pydantic-ai's TestModel: no model server)"
                )
    elif model.name is None or not model.name.strip():
        raise ConfigError(
            f"{label}: 'model.name' is required when model.kind = \"{model.kind}\" (the "
            'provider\'s model name, e.g. "gpt-4.1-mini")'
        )
    if model.kind == "python":
        if model.factory is None:
            raise ConfigError(
                f"{label}: 'model.factory' is required when model.kind = \"python\" "
                '("package.module:callable" returning the agent)'
            )
        if re.fullmatch(_IMPORT_PATTERN, model.factory) is None:
            raise bad_value(label, "model.factory", model.factory, _IMPORT_HINT)
    elif model.factory is not None:
        raise ConfigError(
            f"{label}: 'model.factory' is only used when model.kind = \"python\" "
            f'(kind is "{model.kind}")'
        )
    for index, spec in enumerate(model.tools):
        if re.fullmatch(_IMPORT_PATTERN, spec) is None:
            raise bad_value(label, f"model.tools[{index}]", spec, _IMPORT_HINT)
    for index, agent_id in enumerate(model.agents or ()):
        if agent_id in (model.agents or ())[:index]:
            raise bad_value(label, f"model.agents[{index}]", agent_id, "is named twice")
    _check_env_name(model.api_key_env, "model.api_key_env", label)
    if model.base_url is not None:
        problem = url_problem(model.base_url.rstrip("/"))
        if problem is not None:
            raise bad_value(label, "model.base_url", model.base_url, problem)
    if model.context_tokens is not None and model.context_tokens < 1000:
        raise bad_value(
            label, "model.context_tokens", model.context_tokens, "must be at least 1000"
        )
    if model.max_steps < 1:
        raise bad_value(label, "model.max_steps", model.max_steps, "must be at least 1")
    if model.turn_budget <= 0:
        raise bad_duration(label, "model.turn_budget", model.turn_budget, "be more than 0")


def _validate_mcp(settings: Settings, label: str) -> None:
    servers = settings.mcp
    if servers and not settings.model.is_llm:
        raise ConfigError(
            f"{label}: [[mcp]] servers are tools of the built-in LLM agent; model.kind is "
            f'"{settings.model.kind}" (use "openai", "anthropic" or "test")'
        )
    for index, server in enumerate(servers):
        where = f"mcp[{index}]"
        if re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,39}", server.id) is None:
            raise bad_value(label, f"{where}.id", server.id, "must match [a-z0-9][a-z0-9_-]{0,39}")
        if server.id in [s.id for s in servers[:index]]:
            raise bad_value(label, f"{where}.id", server.id, "is used by another [[mcp]] server")
        if (server.command is None) == (server.url is None):
            raise ConfigError(
                f"{label}: '{where}' needs exactly one of command (a program to run, stdio) and "
                "url (streamable HTTP)"
            )
        if server.command is not None and not server.command.strip():
            raise bad_value(label, f"{where}.command", server.command, "must not be blank")
        if server.url is not None:
            problem = url_problem(server.url.rstrip("/"))
            if problem is not None:
                raise bad_value(label, f"{where}.url", server.url, problem)
            for key in ("args", "env"):
                if getattr(server, key):
                    raise ConfigError(f"{label}: '{where}.{key}' is only used with command (stdio)")
            if server.cwd is not None:
                raise ConfigError(f"{label}: '{where}.cwd' is only used with command (stdio)")
        elif server.headers:
            raise ConfigError(f"{label}: '{where}.headers' is only used with url (HTTP)")
        for name in server.env:
            _check_env_name(name, f"{where}.env", label)
        _check_headers(server.headers, where, label)
        if server.prefix and re.fullmatch(r"[A-Za-z0-9_]{1,20}", server.prefix) is None:
            raise bad_value(
                label, f"{where}.prefix", server.prefix, "must match [A-Za-z0-9_]{1,20}"
            )
        if server.timeout <= 0:
            raise bad_duration(label, f"{where}.timeout", server.timeout, "be more than 0")


def _validate_store(settings: Settings, label: str) -> None:
    store = settings.store
    _check_env_name(store.password_env, "store.password_env", label)
    if store.blobs is not None:
        blobs = urlsplit(store.blobs)
        if blobs.scheme not in _BLOB_SCHEMES or not blobs.netloc:
            raise bad_value(
                label,
                "store.blobs",
                store.blobs,
                'must be an object store URL, "s3://BUCKET/PREFIX" (or gs://, az://)',
            )
        if settings.temporal.payloads is not None:
            raise ConfigError(
                f"{label}: 'store.blobs' and 'temporal.payloads' name two places for payloads; "
                "keep one (blobs for an object store, payloads for a directory)"
            )
    if store.url is None:
        for name, value in (("password_env", store.password_env), ("schema", store.schema)):
            if value is not None:
                raise ConfigError(
                    f"{label}: 'store.{name}' is only allowed with store.url (a PostgreSQL store)"
                )
        return
    if store.path is not None:
        raise ConfigError(
            f"{label}: 'store.path' and 'store.url' name two stores; keep one "
            "(url for PostgreSQL, path for a SQLite file)"
        )
    parts = urlsplit(store.url)
    if parts.scheme not in ("postgresql", "postgres") or not (parts.hostname or parts.query):
        raise bad_value(
            label,
            "store.url",
            store.url,
            'must be a PostgreSQL URL, "postgresql://USER@HOST:PORT/DATABASE"',
        )
    # libpq reads percent-escapes in the query's keys too (?pass%77ord=...).
    keys = {key.lower() for key in parse_qs(parts.query, keep_blank_values=True)}
    if parts.password is not None or "password" in keys:
        # Deliberately no value in the message: it holds the password.
        raise ConfigError(
            f"{label}: 'store.url' holds a password: never write it into the file; put it in an "
            "environment variable and name that variable in store.password_env (e.g. "
            'password_env = "HARNESS_PG_PASSWORD")'
        )
    if store.schema is not None and not re.fullmatch(
        r"[A-Za-z_][A-Za-z0-9_$-]{0,62}", store.schema
    ):
        raise bad_value(
            label,
            "store.schema",
            store.schema,
            "must be a schema name: letters, digits, '_', '-' or '$', at most 63, "
            "not starting with a digit",
        )
    if store.pool_size < 1:
        raise bad_value(label, "store.pool_size", store.pool_size, "must be at least 1")


_BLOB_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "azure")


def _check_headers(headers: tuple[str, ...], where: str, label: str) -> None:
    """``Header-Name=ENV_VAR`` entries: a header's value comes from the variable, never the file."""
    for header in headers:
        if not re.fullmatch(r"[A-Za-z0-9-]+=[A-Za-z_][A-Za-z0-9_]*", header):
            raise bad_value(
                label,
                f"{where}.headers",
                header,
                'must be "Header-Name=ENV_VAR" (the value comes from the variable)',
            )


def _check_env_name(name: str | None, key: str, label: str) -> None:
    """``key`` names an environment variable (or nothing); a secret's value never goes in the file."""
    if name is not None and not re.fullmatch(_ENV_NAME_PATTERN, name):
        # Deliberately no value in the message: a malformed "name" may be the key itself.
        raise ConfigError(
            f"{label}: '{key}' must be the name of an environment variable "
            "(letters, digits and '_', not starting with a digit), not the key itself"
        )
