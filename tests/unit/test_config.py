"""Loading one agent's TOML file into Settings, and the one-line errors for every mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_core.config import (
    ModelConfig,
    ServerConfig,
    Settings,
    load_settings,
    parse_duration,
    settings_from_mapping,
)
from harness_core.errors import ConfigError

SECRET = "sk-live-THIS-MUST-NEVER-APPEAR"


def write(tmp_path: Path, text: str, name: str = "agent.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_for(tmp_path: Path, text: str) -> str:
    """Load ``text`` as a file that must be refused; return the message after checking its shape."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    assert "Traceback" not in message
    return message


def test_an_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, ""))

    assert settings.agent_id == "harness"
    assert settings.agent_name == "harness"
    assert settings.effective_task_queue == "harness"
    assert settings.store_path == tmp_path.resolve() / ".harness" / "harness.sqlite3"
    assert settings.database_path == tmp_path.resolve() / ".harness" / "temporal.sqlite3"
    assert settings.base_url == "http://127.0.0.1:8000"
    assert (settings.bind_host, settings.bind_port) == ("127.0.0.1", 8000)
    assert settings.temporal.mode == "embedded"
    assert settings.model == ModelConfig()
    assert settings.server.max_request_bytes == 1_048_576
    assert settings.server.rate_limit_per_minute == 0
    assert settings.server.cors_origins == ()
    assert settings.api_key() is None
    assert settings.tls_enabled is False


def test_the_loader_records_the_resolved_file_and_its_directory(tmp_path: Path) -> None:
    path = write(tmp_path, "")

    settings = load_settings(str(path))

    assert settings.source == path.resolve()
    assert settings.base_dir == tmp_path.resolve()


def test_an_agent_id_names_the_task_queue_the_store_and_the_card(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, '[agent]\nid = "billing"\n'))

    assert settings.effective_task_queue == "billing"
    assert settings.agent_name == "billing"
    assert settings.store_path.name == "billing.sqlite3"


def test_an_explicit_task_queue_and_name_win_over_the_agent_id(tmp_path: Path) -> None:
    text = '[agent]\nid = "billing"\nname = "Billing"\n[temporal]\ntask_queue = "q-1"\n'

    settings = load_settings(write(tmp_path, text))

    assert settings.effective_task_queue == "q-1"
    assert settings.agent_name == "Billing"


def test_relative_paths_resolve_against_the_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_dir = tmp_path / "conf"
    config_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    text = '[store]\npath = "data/a.sqlite3"\n[temporal.embedded]\ndatabase_path = "../t.db"\n'

    settings = load_settings(write(config_dir, text))

    assert settings.store_path == config_dir.resolve() / "data" / "a.sqlite3"
    assert settings.database_path == tmp_path.resolve() / "t.db"


def test_the_database_defaults_to_beside_a_configured_store(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, '[store]\npath = "state/x.sqlite3"\n'))

    assert settings.database_path == tmp_path.resolve() / "state" / "temporal.sqlite3"


def test_a_full_remote_configuration_loads(tmp_path: Path) -> None:
    text = """
[agent]
id = "support-1"
description = "Answers questions"

[temporal]
mode = "remote"
address = "ns.a1b2c.tmprl.cloud:7233"
namespace = "ns.a1b2c"
api_key_env = "TEMPORAL_API_KEY"

[server]
bind = "0.0.0.0:9000"
base_url = "https://agents.example.com/support/"
graceful_timeout = "2s"
max_request_bytes = 65536
rate_limit_per_minute = 120
cors_origins = ["https://app.example.com", "http://localhost:3000"]

[heartbeat]
interval = "5m"

[model]
kind = "scripted"
replies = ["hello", "bye"]
delay = "250ms"
local_activity = false
turn_timeout = 30
"""
    settings = load_settings(write(tmp_path, text))

    assert settings.temporal.address == "ns.a1b2c.tmprl.cloud:7233"
    assert settings.tls_enabled is True
    assert settings.base_url == "https://agents.example.com/support"
    assert (settings.bind_host, settings.bind_port) == ("0.0.0.0", 9000)
    assert settings.server.graceful_timeout == 2.0
    assert settings.server.max_request_bytes == 65536
    assert settings.server.rate_limit_per_minute == 120
    assert settings.server.cors_origins == ("https://app.example.com", "http://localhost:3000")
    assert settings.heartbeat.interval == 300.0
    assert settings.model == ModelConfig(
        kind="scripted",
        replies=("hello", "bye"),
        delay=0.25,
        local_activity=False,
        turn_timeout=30.0,
    )


def test_an_ipv6_bind_is_parsed_and_keeps_its_brackets_in_the_base_url(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, '[server]\nbind = "[::1]:8080"\n'))

    assert (settings.bind_host, settings.bind_port) == ("::1", 8080)
    assert settings.base_url == "http://[::1]:8080"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("250ms", 0.25),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("7d", 604800.0),
        ("1.5s", 1.5),
        (2, 2.0),
    ],
)
def test_durations_accept_seconds_and_unit_strings(value: object, seconds: float) -> None:
    parsed = parse_duration(value, key="model.delay", source="a.toml")

    assert parsed == seconds
    assert isinstance(parsed, float)


def test_a_malformed_duration_names_the_key_and_the_accepted_forms(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[model]\ndelay = "5 minutes"\n')

    assert "'model.delay' is '5 minutes'" in message
    assert '"250ms", "30s", "5m", "1h", "7d"' in message


def test_a_duration_of_the_wrong_type_says_what_it_got(tmp_path: Path) -> None:
    message = error_for(tmp_path, "[heartbeat]\ninterval = [1, 2]\n")

    assert message.endswith(
        "'heartbeat.interval' must be a duration (seconds or a string like \"30s\"), got list"
    )


def test_an_unknown_key_names_the_key_the_file_and_the_allowed_keys(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[server]\nbnd = "127.0.0.1:1"\n')

    assert message.endswith(
        "unknown key 'server.bnd' (allowed in [server]: bind, base_url, graceful_timeout, "
        "max_request_bytes, rate_limit_per_minute, cors_origins, ui_dir, access_log)"
    )


def test_an_unknown_section_lists_the_allowed_sections(tmp_path: Path) -> None:
    message = error_for(tmp_path, "[servr]\nbind = 1\n")

    assert message.endswith(
        "unknown section 'servr' (allowed: agent, temporal, server, store, heartbeat, model, retention, push, delegation, card, auth, agents, mcp, plugins)"
    )


def test_an_unknown_key_in_a_nested_table_names_its_full_path(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[temporal.embedded]\npath = "x"\n')

    assert "unknown key 'temporal.embedded.path'" in message
    assert "(allowed in [temporal.embedded]: database_path, ui_port)" in message


def test_a_section_that_is_not_a_table_is_refused(tmp_path: Path) -> None:
    message = error_for(tmp_path, 'agent = "billing"\n')

    assert "'agent' must be a table ([agent]), got string" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[agent]\nid = 5\n", "'agent.id' must be a string, got integer"),
        ('[model]\nlocal_activity = "yes"\n', "'model.local_activity' must be true or false"),
        ("[store]\npath = 1\n", "'store.path' must be a path string, got integer"),
        ('[model]\nreplies = "hi"\n', "'model.replies' must be a list of strings, got string"),
        ('[model]\nreplies = ["a", 2]\n', "'model.replies[1]' must be a string, got integer"),
        (
            '[server]\nmax_request_bytes = "1MB"\n',
            "'server.max_request_bytes' must be an integer, got string",
        ),
        (
            "[server]\nmax_request_bytes = 2048.0\n",
            "'server.max_request_bytes' must be an integer, got float",
        ),
        (
            "[server]\nrate_limit_per_minute = true\n",
            "'server.rate_limit_per_minute' must be an integer, got boolean",
        ),
        (
            '[server]\ncors_origins = "*"\n',
            "'server.cors_origins' must be a list of strings, got string",
        ),
    ],
)
def test_a_value_of_the_wrong_type_names_the_key_and_the_expected_type(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert expected in error_for(tmp_path, text)


def test_an_invalid_agent_id_shows_the_value_and_the_pattern(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[agent]\nid = "Billing!"\n')

    assert message.endswith(
        "'agent.id' is 'Billing!': must match ^[a-z0-9][a-z0-9-]{0,62}$ "
        "(lowercase letters, digits and '-')"
    )


def test_a_long_bad_value_is_shown_truncated(tmp_path: Path) -> None:
    message = error_for(tmp_path, f'[agent]\nid = "{"X" * 500}"\n')

    assert "X" * 50 in message
    assert "X" * 100 not in message


def test_an_unknown_temporal_mode_lists_the_allowed_modes(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[temporal]\nmode = "cloud"\n')

    assert "'temporal.mode' is 'cloud'" in message
    assert '"embedded", "remote"' in message


def test_remote_mode_requires_an_address(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[temporal]\nmode = "remote"\n')

    assert "'temporal.address' is required" in message
    assert 'temporal.mode = "remote"' in message


@pytest.mark.parametrize(
    "line", ['address = "localhost:7233"', 'api_key_env = "TEMPORAL_API_KEY"', "tls = true"]
)
def test_remote_only_keys_are_refused_in_embedded_mode(tmp_path: Path, line: str) -> None:
    key = line.split(" = ")[0]

    message = error_for(tmp_path, f"[temporal]\n{line}\n")

    assert f"'temporal.{key}' is only allowed when temporal.mode = \"remote\"" in message


@pytest.mark.parametrize(
    "table", ["[temporal]", '[temporal]\nmode = "remote"', "[temporal.embedded]"]
)
def test_a_literal_api_key_is_refused_without_echoing_it(tmp_path: Path, table: str) -> None:
    message = error_for(tmp_path, f'{table}\napi_key = "{SECRET}"\n')

    assert SECRET not in message
    assert "api_key'" in message
    assert "environment variable" in message
    assert "temporal.api_key_env" in message


def test_an_api_key_env_holding_something_other_than_a_name_is_not_echoed(tmp_path: Path) -> None:
    text = f'[temporal]\nmode = "remote"\naddress = "h:7233"\napi_key_env = "{SECRET}"\n'

    message = error_for(tmp_path, text)

    assert SECRET not in message
    assert "'temporal.api_key_env' must be the name of an environment variable" in message


def test_the_api_key_is_read_from_the_named_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_TEMPORAL_KEY", SECRET)
    text = '[temporal]\nmode = "remote"\naddress = "h:7233"\napi_key_env = "MY_TEMPORAL_KEY"\n'

    settings = load_settings(write(tmp_path, text))

    assert settings.api_key() == SECRET
    assert settings.tls_enabled is True


@pytest.mark.parametrize("value", [None, "", "  "])
def test_a_missing_or_empty_api_key_variable_is_named_without_a_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("MY_TEMPORAL_KEY", raising=False)
    else:
        monkeypatch.setenv("MY_TEMPORAL_KEY", value)
    text = '[temporal]\nmode = "remote"\naddress = "h:7233"\napi_key_env = "MY_TEMPORAL_KEY"\n'
    settings = load_settings(write(tmp_path, text))

    with pytest.raises(ConfigError, match="MY_TEMPORAL_KEY") as caught:
        settings.api_key()

    assert str(caught.value).startswith(str(settings.source))


def test_the_card_section_names_the_signing_key_variable_and_nothing_else(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "")).card.signing_key_env is None
    assert (
        load_settings(
            write(tmp_path, '[card]\nsigning_key_env = "CARD_KEY"\n')
        ).card.signing_key_env
        == "CARD_KEY"
    )

    message = error_for(tmp_path, f'[card]\nsigning_key = "{SECRET}"\n')

    assert SECRET not in message
    assert message.endswith("unknown key 'card.signing_key' (allowed in [card]: signing_key_env)")


def test_a_signing_key_env_holding_something_other_than_a_name_is_not_echoed(
    tmp_path: Path,
) -> None:
    message = error_for(tmp_path, '[card]\nsigning_key_env = "{\\"kty\\": \\"OKP\\"}"\n')

    assert "OKP" not in message
    assert "'card.signing_key_env' must be the name of an environment variable" in message


def test_tls_can_be_turned_off_explicitly_with_an_api_key(tmp_path: Path) -> None:
    text = '[temporal]\nmode = "remote"\naddress = "h:7233"\napi_key_env = "K"\ntls = false\n'

    assert load_settings(write(tmp_path, text)).tls_enabled is False


@pytest.mark.parametrize(
    ("bind", "reason"),
    [
        ("8000", '"HOST:PORT"'),
        (":8000", '"HOST:PORT"'),
        ("localhost:http", '"HOST:PORT"'),
        ("::1:8000", "brackets"),
        ("127.0.0.1:65536", "0..65535"),
    ],
)
def test_a_bind_that_is_not_host_and_port_is_refused(
    tmp_path: Path, bind: str, reason: str
) -> None:
    message = error_for(tmp_path, f'[server]\nbind = "{bind}"\n')

    assert f"'server.bind' is '{bind}'" in message
    assert reason in message


@pytest.mark.parametrize(
    "url", ["ftp://example.com", "example.com", "http://", "https://example.com:99999", "http:/x"]
)
def test_a_base_url_must_be_an_http_url_with_a_host(tmp_path: Path, url: str) -> None:
    message = error_for(tmp_path, f'[server]\nbase_url = "{url}"\n')

    assert f"'server.base_url' is '{url}'" in message
    assert "http(s) URL with a host" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[heartbeat]\ninterval = "500ms"\n', "'heartbeat.interval' is 0.5s: must be at least 1"),
        ("[model]\ndelay = -1\n", "'model.delay' is -1s: must be >= 0"),
        ("[model]\nturn_timeout = 0\n", "'model.turn_timeout' is 0s: must be more than 0"),
        ("[server]\ngraceful_timeout = -0.5\n", "'server.graceful_timeout' is -0.5s: must be >= 0"),
        ("[model]\ndelay = inf\n", "'model.delay' is inf: must be a finite duration"),
        (
            '[retention]\nidle_timeout = "500ms"\n',
            "'retention.idle_timeout' is 0.5s: must be 0 (never) or at least 1s",
        ),
        ('[retention]\nended_ttl = "10ms"\n', "'retention.ended_ttl' is 0.01s: must be 0 (kept)"),
        ("[retention]\nmax_streams = 0\n", "'retention.max_streams' is 0: must be at least 1"),
        (
            '[retention]\nexpired_state = "done"\n',
            "'retention.expired_state' is 'done': must be one of \"canceled\", \"failed\"",
        ),
    ],
)
def test_out_of_range_durations_are_refused(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error_for(tmp_path, text)


def test_the_smallest_request_body_limit_is_one_kibibyte(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "[server]\nmax_request_bytes = 1024\n"))

    assert settings.server.max_request_bytes == 1024


def test_a_request_body_limit_under_one_kibibyte_is_refused(tmp_path: Path) -> None:
    message = error_for(tmp_path, "[server]\nmax_request_bytes = 1023\n")

    assert message.endswith("'server.max_request_bytes' is 1023: must be at least 1024 (bytes)")


def test_a_negative_rate_limit_is_refused_and_zero_means_no_limit(tmp_path: Path) -> None:
    message = error_for(tmp_path, "[server]\nrate_limit_per_minute = -1\n")

    assert message.endswith("'server.rate_limit_per_minute' is -1: must be >= 0 (0 means no limit)")


@pytest.mark.parametrize(
    "origin",
    [
        "*",
        "https://app.example.com",
        "http://localhost:3000",
        "http://127.0.0.1:8080",
        "http://[::1]:3000",
    ],
)
def test_cors_origins_accept_a_star_or_a_scheme_host_and_port(tmp_path: Path, origin: str) -> None:
    settings = load_settings(write(tmp_path, f'[server]\ncors_origins = ["{origin}"]\n'))

    assert settings.server == ServerConfig(cors_origins=(origin,))


@pytest.mark.parametrize(
    "origin",
    [
        "",
        "app.example.com",
        "ftp://app.example.com",
        "https://",
        "https://app.example.com/",
        "https://app.example.com/ui",
        "https://app.example.com?x=1",
        "https://app.example.com#top",
        "https://user@app.example.com",
        "https://app.example.com:99999",
        "https://app .example.com",
    ],
)
def test_a_cors_origin_that_is_not_an_origin_names_its_index_and_value(
    tmp_path: Path, origin: str
) -> None:
    text = f'[server]\ncors_origins = ["https://ok.example.com", "{origin}"]\n'

    message = error_for(tmp_path, text)

    assert f"'server.cors_origins[1]' is '{origin}': must be \"*\" or an origin like" in message
    assert "no path, query, fragment or trailing slash" in message


@pytest.mark.parametrize(
    ("origin", "reason"),
    [
        ("https://App.example.com", "must be lowercase"),
        ("https://app.example.com:443", "must leave out the default port 443"),
        ("http://localhost:80", "must leave out the default port 80"),
    ],
)
def test_a_cors_origin_a_browser_would_never_send_is_refused(
    tmp_path: Path, origin: str, reason: str
) -> None:
    message = error_for(tmp_path, f'[server]\ncors_origins = ["{origin}"]\n')

    assert f"'server.cors_origins[0]' is '{origin}': {reason}" in message


def test_an_unknown_model_kind_lists_the_allowed_kinds(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[model]\nkind = "gpt"\n')

    assert "'model.kind' is 'gpt': must be one of \"echo\", \"scripted\"" in message


def test_replies_without_the_scripted_model_are_refused(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[model]\nreplies = ["hi"]\n')

    assert "'model.replies' is only used when model.kind = \"scripted\"" in message


def test_invalid_toml_names_the_file_and_the_parsers_position(tmp_path: Path) -> None:
    message = error_for(tmp_path, "[agent]\nid = billing\n")

    assert "invalid TOML" in message
    assert "line 2" in message


def test_a_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"

    with pytest.raises(ConfigError) as caught:
        load_settings(missing)

    assert str(caught.value) == f"{missing}: no such file"


def test_a_mapping_without_a_file_is_labelled_settings() -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping({"agent": {"idd": "x"}})

    assert str(caught.value).startswith("<settings>: unknown key 'agent.idd'")


def test_a_mapping_resolves_paths_against_the_given_base_dir(tmp_path: Path) -> None:
    settings = settings_from_mapping({"agent": {"id": "a"}}, base_dir=tmp_path)

    assert settings.store_path == tmp_path / ".harness" / "a.sqlite3"
    assert settings.source is None


def test_settings_built_in_code_derive_the_same_values() -> None:
    settings = Settings(base_dir=Path("/srv/agent"))

    assert settings.store_path == Path("/srv/agent/.harness/harness.sqlite3")
    assert settings.database_path == Path("/srv/agent/.harness/temporal.sqlite3")


def test_ui_dir_is_resolved_beside_the_file_and_must_be_an_existing_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / "web").mkdir()
    settings = load_settings(write(tmp_path, '[server]\nui_dir = "web"\n'))
    assert settings.ui_path == tmp_path / "web"
    with pytest.raises(ConfigError) as missing:
        load_settings(write(tmp_path, '[server]\nui_dir = "nowhere"\n', name="bad.toml"))
    message = str(missing.value)
    assert "bad.toml" in message
    assert "server.ui_dir" in message
    assert "must be an existing directory" in message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('kind = "openai"', "'model.name' is required when model.kind = \"openai\""),
        ('kind = "echo"\nname = "m"', "'model.name' is only used when model.kind is"),
        ('kind = "openai"\nname = "m"\napi_key = "sk-1"', "'model.api_key' is refused"),
        ('kind = "openai"\nname = "m"\napi_key_env = "sk-live-1"', "not the key itself"),
        ('kind = "openai"\nname = "m"\ntools = ["nope"]', "'model.tools[0]' is 'nope'"),
        ('kind = "python"', "'model.factory' is required"),
        ('kind = "echo"\nfactory = "a.b:c"', "'model.factory' is only used"),
        ('kind = "openai"\nname = "m"\nmax_steps = 0', "'model.max_steps' is 0"),
        ('kind = "openai"\nname = "m"\nbase_url = "ftp://x"', "'model.base_url' is 'ftp://x'"),
        ('kind = "echo"\nagents = ["b"]', "'model.agents' is only used when model.kind is"),
        (
            'kind = "openai"\nname = "m"\nagents = ["b", "b"]',
            "'model.agents[1]' is 'b': is named twice",
        ),
        ('kind = "openai"\nname = "m"\nagents = "b"', "'model.agents' must be a list of strings"),
        (
            'kind = "test"\nbase_url = "http://127.0.0.1:11434/v1"',
            "'model.base_url' is not used when model.kind = \"test\" (pydantic-ai's TestModel: "
            "no model server)",
        ),
    ],
)
def test_a_wrong_model_section_names_the_key_and_what_is_allowed(
    tmp_path: Path, body: str, expected: str
) -> None:
    message = error_for(tmp_path, f"[model]\n{body}\n")
    assert expected in message
    assert "sk-1" not in message and "sk-live-1" not in message


def test_a_model_server_configuration_loads_and_its_key_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        """
        [agent]
        input_modes = ["text/plain", "image/*"]

        [model]
        kind = "anthropic"
        name = "claude-x"
        api_key_env = "TEST_MODEL_KEY"
        system = "Be brief."
        tools = ["my_pkg.tools:lookup"]
        turn_budget = "2m"
        """,
    )
    settings = load_settings(path)
    assert settings.model.is_llm
    assert settings.model.turn_budget == 120.0
    assert settings.agent.input_modes == ("text/plain", "image/*")
    with pytest.raises(ConfigError, match="TEST_MODEL_KEY is not set"):
        settings.model_api_key()
    monkeypatch.setenv("TEST_MODEL_KEY", " sk-from-env\n")
    assert settings.model_api_key() == "sk-from-env"
    assert settings.payloads_path == tmp_path / ".harness" / "temporal-payloads"


def test_a_malformed_media_type_is_refused(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[agent]\ninput_modes = ["images"]\n')
    assert "'agent.input_modes[0]' is 'images': must be a media type" in message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "[temporal.embedded]\nui_port = 70000\n",
            "'temporal.embedded.ui_port' is 70000: must be a port from 1 to 65535, or 0",
        ),
        (
            '[temporal]\nmode = "remote"\naddress = "127.0.0.1:7233"\n'
            "[temporal.embedded]\nui_port = 8233\n",
            "'temporal.embedded.ui_port' is only allowed when temporal.mode = \"embedded\"",
        ),
    ],
    ids=["out-of-range", "remote"],
)
def test_the_web_ui_port_is_checked(tmp_path: Path, body: str, expected: str) -> None:
    assert expected in error_for(tmp_path, body)


def test_the_web_ui_port_loads(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, "[temporal.embedded]\nui_port = 8233\n"))
    assert settings.temporal.embedded.ui_port == 8233
