"""``[auth]``: the gateway-token settings, their defaults, and the one-line errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_core.config import AuthConfig, Settings, load_settings
from tests.unit.test_config import error_for, write


def load(tmp_path: Path, text: str) -> Settings:
    return load_settings(write(tmp_path, text))


def test_gateway_tokens_are_off_by_default_with_the_reference_claim_names(tmp_path: Path) -> None:
    auth = load(tmp_path, "").auth

    assert auth == AuthConfig()
    assert auth.gateway_origins == ()
    assert auth.audience is None
    assert auth.identity_claim == "https://loopingai.org/identity"
    assert auth.tenant_claim == "https://loopingai.org/tenant"


def test_the_auth_table_is_read(tmp_path: Path) -> None:
    auth = load(
        tmp_path,
        "[auth]\n"
        'gateway_origins = ["gateway.example.com", "http://gw.example.com:8443/"]\n'
        'audience = "https://agents.example.com/a2a"\n'
        'identity_claim = "urn:who"\n'
        'tenant_claim = "urn:tenant"\n',
    ).auth

    assert auth.gateway_origins == ("gateway.example.com", "http://gw.example.com:8443/")
    assert auth.audience == "https://agents.example.com/a2a"
    assert (auth.identity_claim, auth.tenant_claim) == ("urn:who", "urn:tenant")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "cannot be empty"),
        ("  ", "cannot be empty"),
        ("gateway.example.com:99999", "not a URL"),
        ("ftp://gateway.example.com", "only https:// or http:// may stand before the host"),
        ("gate_way example.com", "the host may hold only"),
        ("https://gateway.example.com/keys", "no path, query or user"),
        ("https://gateway.example.com?x=1", "no path, query or user"),
        ("user@gateway.example.com", "no path, query or user"),
    ],
)
def test_a_bad_gateway_origin_is_refused_naming_its_index_and_what_is_allowed(
    tmp_path: Path, value: str, why: str
) -> None:
    message = error_for(tmp_path, f'[auth]\ngateway_origins = ["gateway.test", "{value}"]\n')

    assert f"'auth.gateway_origins[1]' is {value!r}: must be a gateway origin" in message
    assert '"gateway.example.com"' in message
    assert why in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[auth]\ngateway_origins = "gateway.test"\n', "'auth.gateway_origins' must be a list"),
        ("[auth]\ngateway_origins = [1]\n", "'auth.gateway_origins[0]' must be a string"),
        ('[auth]\naudience = " "\n', "'auth.audience' is ' ': must not be blank"),
        ('[auth]\nidentity_claim = ""\n', "'auth.identity_claim' is '': must not be blank"),
        (
            '[auth]\ntenant_claim = "https://loopingai.org/identity"\n',
            "'auth.tenant_claim' is 'https://loopingai.org/identity': must differ from",
        ),
        (
            '[auth]\norigins = ["gateway.test"]\n',
            "unknown key 'auth.origins' (allowed in [auth]: gateway_origins, audience, "
            "identity_claim, tenant_claim)",
        ),
    ],
)
def test_other_auth_mistakes_are_named(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error_for(tmp_path, text)
