"""The error examples of docs/configuration.md are what the code says: each file below is checked
and its one line compared with the documented one, word for word (a documented line that drifts
from the code fails here). Lines that need more than a file (an environment variable, a running
process) are covered by their own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_core import ConfigError, load_settings

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
        "heartbeat, model, retention, push, delegation, card, auth, agents)",
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
        "unknown key 'agent.owner' (allowed in [agent]: id, name, description, input_modes, output_modes)",
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
        '"tck", "openai", "anthropic", "python"',
    ),
    (
        '[model]\nkind = "openai"\n',
        "'model.name' is required when model.kind = \"openai\" (the "
        'provider\'s model name, e.g. "gpt-4.1-mini")',
    ),
    (
        '[model]\nname = "m"\n',
        '\'model.name\' is only used when model.kind is "openai" or "anthropic" (kind is "echo")',
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
