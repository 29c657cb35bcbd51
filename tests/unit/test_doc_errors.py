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
