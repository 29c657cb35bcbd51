"""The error examples of docs/configuration.md are what the code says: each file below is checked
and its one line compared with the documented one, word for word (a documented line that drifts
from the code fails here). Lines that need more than a file (an environment variable, a module of
the user's, a file that is not a TOML file, a second process) are produced through the command
line, ``main([...])`` run in a temporary directory, and its ``harness: `` line compared the same
way; where the documented line holds a machine's path or pid, the test's own is put in its place.
Every ``harness: `` line of the page is checked here."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from harness_core import ConfigError, load_settings
from harness_core.cli import main

DOC = Path(__file__).parents[2] / "docs" / "configuration.md"

# (the file's text, the documented line after "harness: agent.toml: ")
CASES = [
    (
        '[server]\nbnd = "x"\n',
        "unknown key 'server.bnd' (allowed in [server]: bind, base_url, "
        "graceful_timeout, max_request_bytes, rate_limit_per_minute, cors_origins, ui_dir, access_log)",
    ),
    (
        '[agnt]\nid = "a"\n',
        "unknown section 'agnt' (allowed: agent, temporal, server, store, "
        "heartbeat, model, retention, push, delegation, card, auth, agents, mcp, plugins)",
    ),
    ('agent = "a"\n', "'agent' must be a table ([agent]), got string"),
    (
        '[agent]\nid = "Billing!"\n',
        "'agent.id' is 'Billing!': must match ^[a-z0-9][a-z0-9-]{0,62}$ "
        "(lowercase letters, digits and '-')",
    ),
    ("[agent]\nid = 5\n", "'agent.id' must be a string, got integer"),
    ('[agent]\nname = "  "\n', "'agent.name' is '  ': must not be blank; leave it out"),
    (
        '[agent]\nowner = "x"\n',
        "unknown key 'agent.owner' (allowed in [agent]: id, name, description, input_modes, "
        "output_modes, plugins)",
    ),
    (
        '[temporal]\nmode = "cloud"\n',
        "'temporal.mode' is 'cloud': must be one of \"embedded\", \"remote\"",
    ),
    (
        '[temporal]\nmode = "remote"\n',
        "'temporal.address' is required when temporal.mode = \"remote\" "
        '("HOST:PORT", e.g. "my-namespace.a1b2c.tmprl.cloud:7233")',
    ),
    (
        '[temporal]\nmode = "remote"\naddress = "localhost"\n',
        "'temporal.address' is 'localhost': "
        'must be "HOST:PORT", e.g. "127.0.0.1:8000" (IPv6 as "[::1]:8000")',
    ),
    (
        '[temporal]\naddress = "h:1"\n',
        '\'temporal.address\' is only allowed when temporal.mode = "remote" (mode is "embedded")',
    ),
    ('[temporal]\nnamespace = " "\n', "'temporal.namespace' is ' ': must not be blank"),
    (
        '[temporal.embedded]\npath = "x"\n',
        "unknown key 'temporal.embedded.path' (allowed in "
        "[temporal.embedded]: database_path, ui_port)",
    ),
    (
        '[server]\nbind = "8000"\n',
        "'server.bind' is '8000': must be \"HOST:PORT\", e.g. "
        '"127.0.0.1:8000" (IPv6 as "[::1]:8000")',
    ),
    (
        "[server]\nmax_request_bytes = 100\n",
        "'server.max_request_bytes' is 100: must be at least 1024 (bytes)",
    ),
    (
        '[server]\ncors_origins = "x"\n',
        "'server.cors_origins' must be a list of strings, got string",
    ),
    ("[retention]\nmax_streams = 0\n", "'retention.max_streams' is 0: must be at least 1"),
    (
        '[retention]\nexpired_state = "done"\n',
        "'retention.expired_state' is 'done': must be one of \"canceled\", \"failed\"",
    ),
    (
        '[model]\nkind = "gpt"\n',
        "'model.kind' is 'gpt': must be one of \"echo\", \"scripted\", "
        '"tck", "openai", "anthropic", "test", "python"',
    ),
    (
        '[model]\nkind = "openai"\n',
        "'model.name' is required when model.kind = \"openai\" (the "
        'provider\'s model name, e.g. "gpt-4.1-mini")',
    ),
    (
        '[model]\nname = "m"\n',
        "'model.name' is only used when model.kind is "
        '"openai", "anthropic" or "test" (kind is "echo")',
    ),
    (
        '[model]\nkind = "openai"\nname = "m"\ntools = ["not a path"]\n',
        "'model.tools[0]' is "
        '\'not a path\': must be "package.module:name", e.g. "my_pkg.tools:lookup_order"',
    ),
    (
        '[model]\nkind = "python"\n',
        "'model.factory' is required when model.kind = \"python\" "
        '("package.module:callable" returning the agent)',
    ),
    (
        '[model]\nkind = "openai"\nname = "m"\nmax_steps = 0\n',
        "'model.max_steps' is 0: must be at least 1",
    ),
    (
        '[model]\nlocal_activity = "yes"\n',
        "'model.local_activity' must be true or false, got string",
    ),
    (
        '[model]\nkind = "test"\n[[mcp]]\nid = "files"\n',
        "'mcp[0]' needs exactly one of command (a program to run, stdio) and url (streamable HTTP)",
    ),
    (
        '[[mcp]]\nid = "files"\ncommand = "npx"\n',
        '[[mcp]] servers are tools of the built-in LLM agent; model.kind is "echo" '
        '(use "openai", "anthropic" or "test")',
    ),
    (
        '[model]\nkind = "test"\n[[mcp]]\nid = "files"\nurl = "http://127.0.0.1:9/mcp"\n'
        'headers = ["X-Token: abc"]\n',
        "'mcp[0].headers' is 'X-Token: abc': must be \"Header-Name=ENV_VAR\" (the value comes "
        "from the variable)",
    ),
    (
        '[agent]\nplugins = ["journal"]\n',
        "'agent.plugins[0]' is 'journal': must be \"package.module:name\", "
        'e.g. "my_pkg.tools:lookup_order"',
    ),
    (
        '[plugins]\njournal = "x"\n',
        "'plugins.journal' must be a table ([plugins.journal]) of the plugin's options, got string",
    ),
    (
        '[model]\nkind = "test"\ncontext_tokens = 500\n',
        "'model.context_tokens' is 500: must be at least 1000",
    ),
    (
        "[model]\nworkspace = true\n",
        '\'model.workspace\' is only used when model.kind is "openai", "anthropic" or '
        '"test" (kind is "echo")',
    ),
]


@pytest.mark.parametrize(("text", "line"), CASES, ids=[c[1].split(":")[0][:40] for c in CASES])
def test_a_documented_error_is_what_the_code_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, line: str
) -> None:
    assert f"harness: agent.toml: {line}\n" in DOC.read_text(), "not in docs/configuration.md"
    (tmp_path / "agent.toml").write_text(text)
    monkeypatch.chdir(tmp_path)  # named as a user names it: agent.toml
    with pytest.raises(ConfigError) as caught:
        load_settings("agent.toml")
    assert str(caught.value) == f"agent.toml: {line}"


# Refused when the file is loaded, like the above.
MORE = [
    (
        "[agent\n",
        "invalid TOML: Expected ']' at the end of a table declaration (at line 1, column 7)",
    ),
    ("[agent]\ndescription = 5\n", "'agent.description' must be a string, got integer"),
    (
        "[temporal]\nmode = 5\n",
        '\'temporal.mode\' must be one of "embedded", "remote", got integer',
    ),
    (
        '[temporal]\nmode = "remote"\naddress = "::1:7233"\n',
        "'temporal.address' is '::1:7233': an IPv6 host goes in brackets, e.g. \"[::1]:8000\"",
    ),
    (
        '[temporal]\napi_key_env = "K"\n',
        "'temporal.api_key_env' is only allowed when "
        'temporal.mode = "remote" (mode is "embedded")',
    ),
    (
        "[temporal]\ntls = true\n",
        '\'temporal.tls\' is only allowed when temporal.mode = "remote" (mode is "embedded")',
    ),
    (
        '[temporal]\nmode = "remote"\naddress = "h:1"\ntls = "yes"\n',
        "'temporal.tls' must be true or false, got string",
    ),
    (
        '[temporal]\ntask_queue = ""\n',
        "'temporal.task_queue' is '': must not be blank; leave it out",
    ),
    (
        '[temporal]\nmode = "remote"\naddress = "h:1"\n[temporal.embedded]\ndatabase_path = "x"\n',
        "'temporal.embedded.database_path' is only allowed when temporal.mode = \"embedded\" "
        '(mode is "remote")',
    ),
    (
        '[temporal.embedded]\ndatabase_path = ""\n',
        "'temporal.embedded.database_path' is '': must not be empty; leave it out for the default",
    ),
    (
        '[server]\nbind = "127.0.0.1:65536"\n',
        "'server.bind' is '127.0.0.1:65536': the port must be 0..65535",
    ),
    (
        '[server]\nbind = "::1:8000"\n',
        "'server.bind' is '::1:8000': an IPv6 host goes in brackets, e.g. \"[::1]:8000\"",
    ),
    (
        '[server]\nbase_url = "example.com"\n',
        "'server.base_url' is 'example.com': must be an "
        'http(s) URL with a host, e.g. "https://agents.example.com"',
    ),
    ("[server]\ngraceful_timeout = -1\n", "'server.graceful_timeout' is -1s: must be >= 0"),
    (
        '[server]\ngraceful_timeout = "5 seconds"\n',
        "'server.graceful_timeout' is '5 seconds': "
        'must be a number of seconds or a number with a unit: "250ms", "30s", "5m", "1h", "7d"',
    ),
    (
        "[server]\ngraceful_timeout = true\n",
        "'server.graceful_timeout' must be a duration "
        '(seconds or a string like "30s"), got boolean',
    ),
    (
        '[server]\nmax_request_bytes = "1"\n',
        "'server.max_request_bytes' must be an integer, got string",
    ),
    (
        "[server]\nrate_limit_per_minute = -1\n",
        "'server.rate_limit_per_minute' is -1: must be >= 0 (0 means no limit)",
    ),
    (
        '[server]\ncors_origins = ["https://App.example.com"]\n',
        "'server.cors_origins[0]' is "
        "'https://App.example.com': must be lowercase (browsers send the Origin header lowercase)",
    ),
    (
        '[server]\ncors_origins = ["https://app.example.com:443"]\n',
        "'server.cors_origins[0]' is "
        "'https://app.example.com:443': must leave out the default port 443 (browsers leave it out "
        "of the Origin header)",
    ),
    ('[store]\npath = ""\n', "'store.path' is '': must not be empty; leave it out for the default"),
    ("[store]\npath = 5\n", "'store.path' must be a path string, got integer"),
    (
        '[store]\nurl = "postgresql://app:hunter2@db.internal/agents"\n',
        "'store.url' holds a password: never write it into the file; put it in an environment "
        "variable and name that variable in store.password_env "
        '(e.g. password_env = "HARNESS_PG_PASSWORD")',
    ),
    (
        '[store]\nurl = "postgresql://app@db.internal/agents"\npassword = "x"\n',
        "'store.password' is refused: never write the password into the file; put it in an "
        "environment variable and name that variable in store.password_env "
        '(e.g. password_env = "HARNESS_PG_PASSWORD")',
    ),
    (
        '[store]\nurl = "postgresql://app@db.internal/agents"\npath = "a.sqlite3"\n',
        "'store.path' and 'store.url' name two stores; keep one "
        "(url for PostgreSQL, path for a SQLite file)",
    ),
    (
        '[store]\nurl = "mysql://app@db.internal/agents"\n',
        "'store.url' is 'mysql://app@db.internal/agents': must be a PostgreSQL URL, "
        '"postgresql://USER@HOST:PORT/DATABASE"',
    ),
    (
        '[store]\nschema = "billing"\n',
        "'store.schema' is only allowed with store.url (a PostgreSQL store)",
    ),
    (
        '[store]\nurl = "postgresql://app@db.internal/agents"\npool_size = 0\n',
        "'store.pool_size' is 0: must be at least 1",
    ),
    (
        '[store]\nblobs = "ftp://files/x"\n',
        "'store.blobs' is 'ftp://files/x': must be an object store URL, "
        '"s3://BUCKET/PREFIX" (or gs://, az://)',
    ),
    (
        '[temporal]\npayloads = "p"\n[store]\nblobs = "s3://bucket/p"\n',
        "'store.blobs' and 'temporal.payloads' name two places for payloads; keep one "
        "(blobs for an object store, payloads for a directory)",
    ),
    ("[heartbeat]\ninterval = 0.5\n", "'heartbeat.interval' is 0.5s: must be at least 1 second"),
    (
        "[heartbeat]\ninterval = [1]\n",
        "'heartbeat.interval' must be a duration (seconds or a string like \"30s\"), got list",
    ),
    (
        "[retention]\nidle_timeout = 0.5\n",
        "'retention.idle_timeout' is 0.5s: must be 0 (never) or at least 1s",
    ),
    (
        '[delegation]\nstream_for = "30s"\n',
        "'delegation.stream_for' is 30s: must be between 0 and 10s",
    ),
    (
        '[delegation]\nblock_for = "10s"\n',
        "'delegation.block_for' is 10s: must be between 0 and 4s",
    ),
    (
        '[auth]\naudience = " "\n',
        "'auth.audience' is ' ': must not be blank; leave it out for the endpoint URL",
    ),
    (
        '[[agents]]\nid = "x"\nurl = "ftp://y"\n',
        "'agents[0].url' is 'ftp://y': must be an http(s) URL",
    ),
    (
        '[[agents]]\nid = "x"\nurll = "http://y"\n',
        "unknown key 'agents[0].urll' (allowed in [agents[0]]: id, url, tenant, updates, headers)",
    ),
    (
        '[model]\nkind = "openai"\nname = "m"\napi_key_env = "sk-1"\n',
        "'model.api_key_env' must be "
        "the name of an environment variable (letters, digits and '_', not starting with a digit), "
        "not the key itself",
    ),
    (
        '[model]\nkind = "openai"\nname = "m"\nbase_url = "ftp://x"\n',
        "'model.base_url' is "
        "'ftp://x': must be an http(s) URL with a host, e.g. \"https://agents.example.com\"",
    ),
    (
        '[model]\nreplies = ["a"]\n',
        '\'model.replies\' is only used when model.kind = "scripted" (kind is "echo")',
    ),
    (
        '[model]\nkind = "scripted"\nreplies = ["a", 1]\n',
        "'model.replies[1]' must be a string, got integer",
    ),
    ("[model]\ndelay = -1\n", "'model.delay' is -1s: must be >= 0"),
    ("[model]\nturn_timeout = 0\n", "'model.turn_timeout' is 0s: must be more than 0"),
]


@pytest.mark.parametrize(("text", "line"), MORE, ids=[c[1].split(":")[0][:40] for c in MORE])
def test_more_documented_errors_are_what_the_code_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, line: str
) -> None:
    test_a_documented_error_is_what_the_code_says(tmp_path, monkeypatch, text, line)


# Refused when the file is loaded too; found after the first 60 were checked.
ALSO = [
    (
        '[temporal]\napi_key = "k"\n',
        "'temporal.api_key' is refused: never write the API key into the file; put it in an "
        "environment variable and name that variable in temporal.api_key_env "
        '(e.g. api_key_env = "TEMPORAL_API_KEY")',
    ),
    (
        '[temporal]\nmode = "remote"\naddress = "h:1"\napi_key_env = "sk-1"\n',
        "'temporal.api_key_env' must be the name of an environment variable "
        "(letters, digits and '_', not starting with a digit), not the key itself",
    ),
    (
        '[server]\nbase_url = "https://example.com/?x=1"\n',
        "'server.base_url' is 'https://example.com/?x=1': must be an http(s) URL with a host, "
        'e.g. "https://agents.example.com", without query, fragment or spaces',
    ),
    (
        '[server]\ncors_origins = ["https://app.example.com/"]\n',
        "'server.cors_origins[0]' is 'https://app.example.com/': must be \"*\" or an origin like "
        '"https://app.example.com" or "http://localhost:3000" (scheme, host and optional port; '
        "no path, query, fragment or trailing slash)",
    ),
    (
        '[card]\nsigning_key_env = "{\\"kty\\": \\"OKP\\"}"\n',
        "'card.signing_key_env' must be the name of an environment variable "
        "(letters, digits and '_', not starting with a digit), not the key itself",
    ),
    (
        '[auth]\ngateway_origins = ["https://gateway.example.com/keys"]\n',
        "'auth.gateway_origins[0]' is 'https://gateway.example.com/keys': must be a gateway "
        'origin: a host with an optional port, e.g. "gateway.example.com" or '
        '"https://gateway.example.com:8443" (http:// is read as https://; no path, query or user)',
    ),
    (
        '[auth]\ngateway_origins = [""]\n',
        "'auth.gateway_origins[0]' is '': must be a gateway origin: a host with an optional "
        'port, e.g. "gateway.example.com" or "https://gateway.example.com:8443" (http:// is '
        "read as https://; no path, query or user); an allowed gateway origin cannot be empty",
    ),
    (
        '[auth]\ntenant_claim = "https://loopingai.org/identity"\n',
        "'auth.tenant_claim' is 'https://loopingai.org/identity': must differ from "
        "auth.identity_claim (one claim holds the caller, the other the tenant)",
    ),
    (
        '[model]\nkind = "openai"\nname = "m"\napi_key = "sk-1"\n',
        "'model.api_key' is refused: never write the API key into the file; put it in an "
        "environment variable and name that variable in model.api_key_env "
        '(e.g. api_key_env = "OPENAI_API_KEY")',
    ),
]


@pytest.mark.parametrize(("text", "line"), ALSO, ids=[c[1].split(":")[0][:40] for c in ALSO])
def test_also_documented_errors_are_what_the_code_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, line: str
) -> None:
    test_a_documented_error_is_what_the_code_says(tmp_path, monkeypatch, text, line)


# The documented examples run in /tmp/agents; the tests put their own directory in its place.
DOC_DIR = "/tmp/agents"

UI_DIR = "'server.ui_dir' is 'nope': must be an existing directory (/tmp/agents/nope)"


def test_a_missing_ui_dir_is_named_with_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert f"harness: agent.toml: {UI_DIR}\n" in DOC.read_text(), "not in docs/configuration.md"
    (tmp_path / "agent.toml").write_text('[server]\nui_dir = "nope"\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_settings("agent.toml")
    # /tmp/agents is the directory of the documented agent.toml; here, the test's (resolved).
    assert str(caught.value) == "agent.toml: " + UI_DIR.replace(DOC_DIR, os.getcwd())


Harness = Callable[..., str]


@pytest.fixture
def harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Harness]:
    """``harness ARGS...`` run in tmp_path (``main`` in this process): checks its exit code and
    returns the one line it printed that starts with ``harness: ``. Undone afterwards: the
    directory on sys.path, the modules imported from it, the logging ``serve`` sets up."""
    monkeypatch.chdir(tmp_path)
    here = os.getcwd()
    # On sys.path already, so `harness` does not add it for good; a module written here imports.
    monkeypatch.syspath_prepend(here)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    noisy = {name: logging.getLogger(name).level for name in ("temporalio", "httpx", "a2a.client")}

    def run(*argv: str, code: int = 2) -> str:
        assert main(list(argv)) == code
        err = capsys.readouterr().err
        said = [line for line in err.splitlines() if line.startswith("harness: ")]
        assert len(said) == 1, err
        return said[0]

    try:
        yield run
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, was in noisy.items():
            logging.getLogger(name).setLevel(was)
        for name, module in list(sys.modules.items()):
            if Path(getattr(module, "__file__", None) or "/").is_relative_to(here):
                del sys.modules[name]


def documented(line: str) -> str:
    assert f"{line}\n" in DOC.read_text(), "not in docs/configuration.md"
    return line


# (the file `harness check` is given, the documented line)
NOT_TOML = [
    ("missing.toml", "harness: missing.toml: no such file"),
    ("d1", "harness: d1: is a directory, not a TOML file"),
    ("bin.toml", "harness: bin.toml: invalid TOML: the file is not UTF-8 text"),
]


@pytest.mark.parametrize(("name", "line"), NOT_TOML, ids=["missing", "a directory", "not UTF-8"])
def test_a_file_that_is_not_a_toml_file_is_named(
    tmp_path: Path, harness: Harness, name: str, line: str
) -> None:
    (tmp_path / "d1").mkdir()
    (tmp_path / "bin.toml").write_bytes(b'[agent]\nid = "\xff\xfe"\n')
    assert harness("check", name) == documented(line)


# mypkg/agent.py, the user's module of the documented examples.
MYPKG = """
def explode():
    raise RuntimeError("factory exploded")


def make_sync():
    def turn(ctx):
        return "hi"

    return turn
"""

# What `harness check` builds (the agent, its model loop) finds these:
# (agent.toml, mypkg/agent.py or None, the documented line)
BUILT = [
    (
        '[model]\nkind = "python"\nfactory = "mypkg.agent:make"\n',
        None,
        "harness: agent.toml: 'model.factory' = 'mypkg.agent:make': cannot import mypkg.agent: "
        "No module named 'mypkg' (mypkg is looked for on Python's import path: `harness` adds "
        "the directory it runs in; run it from the directory that holds your module, set "
        "PYTHONPATH to that directory, or pip install your package)",
    ),
    (
        '[model]\nkind = "python"\nfactory = "mypkg.agent:explode"\n',
        MYPKG,
        "harness: agent.toml: 'model.factory' = 'mypkg.agent:explode' raised RuntimeError: "
        "factory exploded",
    ),
    (
        '[model]\nkind = "python"\nfactory = "mypkg.agent:make_sync"\n',
        MYPKG,
        "harness: agent.toml: 'model.factory' = 'mypkg.agent:make_sync': "
        "make_sync.<locals>.turn is not an async function: define the agent with `async def`, "
        "e.g. `async def agent(ctx): ...`",
    ),
    (
        '[model]\nkind = "python"\nfactory = "nosuch.mod:make"\n',
        None,
        "harness: agent.toml: 'model.factory' = 'nosuch.mod:make': cannot import nosuch.mod: "
        "No module named 'nosuch' (nosuch is looked for on Python's import path: `harness` adds "
        "the directory it runs in; run it from the directory that holds your module, set "
        "PYTHONPATH to that directory, or pip install your package)",
    ),
    (
        '[model]\nkind = "openai"\nname = "m"\ntools = ["nosuch.mod:fn"]\n',
        None,
        "harness: agent.toml: 'model.tools': tool 'nosuch.mod:fn': module 'nosuch.mod' "
        "cannot be imported (No module named 'nosuch')",
    ),
    (
        '[model]\nkind = "openai"\nname = "m"\napi_key_env = "OPENAI_API_KEY"\n',
        None,
        "harness: agent.toml: environment variable OPENAI_API_KEY is not set; it must hold the "
        "model server's API key (model.api_key_env names it)",
    ),
]


# mypkg/plug.py, the user's plugin module of the documented examples.
PLUG = """
from harness_core.plugins import Plugin

JOURNAL = Plugin(key="journal")
FUTURE = Plugin(key="future", contract_version=2)
NOT_A_PLUGIN = {"key": "journal"}


def make():
    return Plugin(key="journal")


def explode():
    raise RuntimeError("plugin exploded")
"""

BUILT += [
    (
        '[agent]\nplugins = ["mypkg.plug:explode"]\n',
        PLUG,
        "harness: agent.toml: 'agent.plugins[0]' = 'mypkg.plug:explode' raised RuntimeError: "
        "plugin exploded",
    ),
    (
        '[agent]\nplugins = ["mypkg.plug:NOT_A_PLUGIN"]\n',
        PLUG,
        "harness: agent.toml: 'agent.plugins[0]' = 'mypkg.plug:NOT_A_PLUGIN' is a dict, not a "
        "harness_core.plugins.Plugin (or a function that returns one)",
    ),
    (
        '[agent]\nplugins = ["mypkg.plug:make", "mypkg.plug:JOURNAL"]\n',
        PLUG,
        "harness: agent.toml: plugin key 'journal' is used twice: by agent.plugins[0] = "
        "'mypkg.plug:make' and by agent.plugins[1] = 'mypkg.plug:JOURNAL'",
    ),
    (
        '[agent]\nplugins = ["mypkg.plug:FUTURE"]\n',
        PLUG,
        "harness: agent.toml: plugin 'future' (agent.plugins[0] = 'mypkg.plug:FUTURE') was "
        "written for plugin contract version 2; this runtime speaks version 1",
    ),
    (
        '[agent]\nplugins = ["mypkg.plug:make"]\n[plugins.jounral]\nx = 1\n',
        PLUG,
        "harness: agent.toml: [plugins.jounral] holds options for a plugin 'jounral', which is "
        "not loaded (loaded: 'journal'; agent.plugins names them)",
    ),
]


@pytest.mark.parametrize(
    ("text", "module", "line"),
    BUILT,
    ids=[
        "no mypkg",
        "factory raises",
        "factory not async",
        "no nosuch",
        "tool",
        "api key",
        "plugin raises",
        "not a plugin",
        "plugin key twice",
        "contract version",
        "options of no plugin",
    ],
)
def test_what_check_builds_fails_as_documented(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    harness: Harness,
    text: str,
    module: str | None,
    line: str,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "agent.toml").write_text(text)
    if module is not None:
        (tmp_path / "mypkg").mkdir()
        (tmp_path / "mypkg" / "__init__.py").write_text("")
        (tmp_path / "mypkg" / ("plug.py" if module is PLUG else "agent.py")).write_text(module)
    assert harness("check", "agent.toml") == documented(line)


TWO_NAMESPACES = (
    "harness: b.toml: agents that share the embedded database "
    "/tmp/agents/.harness/temporal.sqlite3 must use one namespace "
    "(a.toml uses 'team-a', this file 'default')"
)


def test_two_namespaces_on_one_embedded_database_fail_check(
    tmp_path: Path, harness: Harness
) -> None:
    (tmp_path / "a.toml").write_text('[agent]\nid = "a"\n[temporal]\nnamespace = "team-a"\n')
    (tmp_path / "b.toml").write_text('[agent]\nid = "b"\n')
    said = harness("check", "a.toml", "b.toml")
    # /tmp/agents, the documented files' directory, is the test's here.
    assert said == documented(TWO_NAMESPACES).replace(DOC_DIR, os.getcwd())


# Quoted inline in the documentation: `...`.
BIND = """`harness: bind 'nonsense': must be "HOST:PORT", e.g. "127.0.0.1:8000" (IPv6 as "[::1]:8000")`."""


def test_a_bind_option_that_is_not_host_port_is_refused(tmp_path: Path, harness: Harness) -> None:
    (tmp_path / "agent.toml").write_text('[agent]\nid = "a"\n')
    said = harness("serve", "agent.toml", "--bind", "nonsense")
    assert f"`{said}`." == documented(BIND)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def private_jwk(**changes: str | None) -> str:
    """A private Ed25519 JWK as JSON, with ``changes`` (None leaves a member out)."""
    key = Ed25519PrivateKey.generate()
    x = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    d = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    jwk: dict[str, str | None] = {
        "kty": "OKP",
        "crv": "Ed25519",
        "kid": "card-key-1",
        "x": b64(x),
        "d": b64(d),
    }
    jwk.update(changes)
    return json.dumps({k: v for k, v in jwk.items() if v is not None})


# The public key of another private key than the JWK's.
OTHER_X = b64(
    Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    .public_key()
    .public_bytes(Encoding.Raw, PublicFormat.Raw)
)
CARD_KEY = "harness: agent.toml: environment variable CARD_KEY"
# What the documented lines abbreviate as "…" (the not-JSON line shows it whole).
KEY_SHAPE = (
    'a private Ed25519 JWK: a JSON object with "kty": "OKP", "crv": "Ed25519", "kid", "x" and "d"'
)

# (the value of CARD_KEY, None for unset; the documented line)
CARD_KEYS = [
    (
        None,
        f"{CARD_KEY} is not set; it must hold the card signing key, a private Ed25519 JWK "
        "(card.signing_key_env names it)",
    ),
    (
        "{not json",
        f"{CARD_KEY} (named by card.signing_key_env) is not JSON; it must be {KEY_SHAPE}",
    ),
    (
        private_jwk(kid=None),
        f"{CARD_KEY} (named by card.signing_key_env) has no kid (verifiers find the key by it); "
        "it must be …",
    ),
    (
        private_jwk(crv="X25519"),
        f"{CARD_KEY} (named by card.signing_key_env) is not an Ed25519 key; it must be …",
    ),
    (
        private_jwk(d=None),
        f"{CARD_KEY} (named by card.signing_key_env) is a public key (it has no d); it must be …",
    ),
    (
        private_jwk(x=OTHER_X),
        f"{CARD_KEY} (named by card.signing_key_env) has an x that is not the public key of "
        "its d; it must be …",
    ),
]


@pytest.mark.parametrize(
    ("value", "line"),
    CARD_KEYS,
    ids=["not set", "not JSON", "no kid", "not Ed25519", "public key", "x not d's"],
)
def test_a_card_signing_key_that_is_not_usable_stops_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, harness: Harness, value: str | None, line: str
) -> None:
    if value is None:
        monkeypatch.delenv("CARD_KEY", raising=False)
    else:
        monkeypatch.setenv("CARD_KEY", value)
    (tmp_path / "agent.toml").write_text(
        '[agent]\nid = "a"\n[server]\nbind = "127.0.0.1:0"\n[card]\nsigning_key_env = "CARD_KEY"\n'
    )
    # Read when serve builds the agent's HTTP face, before anything starts. The "…" of the
    # documented line is the KEY_SHAPE that the not-JSON line shows.
    said = harness("serve", "agent.toml")
    assert said == documented(line).replace("…", KEY_SHAPE)


IN_USE = (
    "harness: the database /tmp/agents/.harness/temporal.sqlite3 is in use by another "
    "process (pid 17347); stop it or give this server another database"
)

HOLD_THE_LOCK = """
import sys
from pathlib import Path

from harness_core.embedded.database import lock_database

lock_database(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_an_embedded_database_another_process_holds_stops_serve(
    tmp_path: Path, harness: Harness
) -> None:
    (tmp_path / "agent.toml").write_text('[agent]\nid = "a"\n[server]\nbind = "127.0.0.1:0"\n')
    database = Path(os.getcwd()) / ".harness" / "temporal.sqlite3"
    database.parent.mkdir()
    # Another process holds the database's lock as a serving host does, and has not written
    # its server's address (with it, this process would use that server instead).
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        said = harness("serve", "agent.toml", code=1)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    # The documented directory and pid are this test's and the holder's.
    expected = documented(IN_USE).replace(DOC_DIR, os.getcwd()).replace("17347", str(holder.pid))
    assert said == expected


def test_a_trace_exporter_serve_does_not_know_stops_it(
    tmp_path: Path, harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "agent.toml").write_text('[agent]\nid = "traced"\n')
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    line = (
        "harness: OTEL_TRACES_EXPORTER is 'zipkin': harness serve knows otlp and console (or none)"
    )
    assert harness("serve", "agent.toml") == documented(line)
