"""Prefixes, public URLs (the seed's table) and who a request speaks for."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.requests import Request

from harness_asgi.identity import IDENTITY_KEY, Identity, resolve_identity
from harness_core import ConfigError, Harness, HarnessGroup, settings_from_mapping
from harness_core.urls import normalize_prefix, public_url


@pytest.mark.parametrize(
    ("base_url", "prefix", "expected"),
    [
        ("https://h.test", None, "https://h.test"),
        ("https://h.test/", "", "https://h.test"),
        ("https://h.test", "/agents/a", "https://h.test/agents/a"),
        ("https://h.test/", "agents/a/", "https://h.test/agents/a"),
        ("https://h.test/agents/a", None, "https://h.test/agents/a"),
        ("https://h.test/agents/a/", "/agents/a", "https://h.test/agents/a"),
        ("https://h.test/api/agents/a", "/agents/a", "https://h.test/api/agents/a"),
    ],
)
def test_the_public_url_joins_base_url_and_prefix_as_the_table_says(
    base_url: str, prefix: str | None, expected: str
) -> None:
    assert public_url(base_url, prefix) == expected


@pytest.mark.parametrize("base_url", ["https://h.test/agents/b", "https://h.test/xagents/a"])
def test_a_prefix_that_disagrees_with_base_urls_path_names_both(base_url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        public_url(base_url, "/agents/a")
    assert "'/agents/a'" in str(refused.value)
    assert repr(base_url) in str(refused.value)


@pytest.mark.parametrize("prefix", ["/a?b", "/a#b", "/a b", "/a//b", "/a/../b", "/a/./b", "/%2e"])
def test_a_prefix_that_is_not_a_plain_path_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigError, match="prefix"):
        normalize_prefix(prefix)


def test_slash_alone_is_no_prefix() -> None:
    assert normalize_prefix("/") == normalize_prefix(None) == ""


def settings(tmp_path: Path, agent_id: str, **server: str):
    return settings_from_mapping({"agent": {"id": agent_id}, "server": server}, base_dir=tmp_path)


def test_a_group_serves_agents_without_a_prefix_under_agents_id_and_refuses_a_shared_one(
    tmp_path: Path,
) -> None:
    a = Harness(settings(tmp_path, "a"))
    b = Harness(settings(tmp_path, "b"), prefix="/team/b")
    HarnessGroup(a, b).asgi_app()
    assert (a.prefix, b.prefix) == ("/agents/a", "/team/b")
    assert a.public_url == "http://127.0.0.1:8000/agents/a"

    c = Harness(settings(tmp_path, "c"), prefix="/same")
    d = Harness(settings(tmp_path, "d"), prefix="/same/")
    with pytest.raises(ConfigError, match="same prefix '/same'"):
        HarnessGroup(c, d).asgi_app()


def request(headers: dict[str, str]) -> dict[str, object]:
    return {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }


def test_without_a_resolver_the_header_names_the_participant(tmp_path: Path) -> None:
    harness = Harness(settings(tmp_path, "a"))
    scope = request({"X-Participant-Id": " alice "})
    assert resolve_identity(harness, scope) == Identity("alice", strict=False)
    assert scope[IDENTITY_KEY] == Identity("alice", strict=False)
    assert resolve_identity(harness, request({})) == Identity(None, strict=False)
    assert Identity(None, strict=False).admitted


def test_with_a_resolver_the_header_is_never_read(tmp_path: Path) -> None:
    def resolver(req: Request) -> str | None:
        return req.headers.get("x-user") or None

    harness = Harness(settings(tmp_path, "a"), participant=resolver)
    spoofed = request({"X-Participant-Id": "admin", "X-User": "alice"})
    assert resolve_identity(harness, spoofed) == Identity("alice", strict=True)
    nobody = resolve_identity(harness, request({"X-Participant-Id": "admin"}))
    assert nobody == Identity(None, strict=True)
    assert not nobody.admitted
