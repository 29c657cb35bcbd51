"""The SSRF guard of webhooks (``harness_core.push.guard``): which addresses pass, which lists
allow what, and how a delivery reaches the address that was checked."""

from __future__ import annotations

import ipaddress

import pytest

from harness_core.push.guard import (
    Webhook,
    global_address,
    pinned_request,
    resolve_webhook,
    webhook_problem,
)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",  # carrier-grade NAT
        "100.100.100.200",  # a cloud metadata service inside 100.64.0.0/10
        "198.18.0.1",  # benchmarking
        "192.0.0.1",  # IETF protocol assignments
        "192.0.2.1",  # documentation
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2001:db8::1",
        "ff02::1",
    ],
)
def test_addresses_that_are_not_global_are_refused(address: str) -> None:
    assert not global_address(ipaddress.ip_address(address))
    host = f"[{address}]" if ":" in address else address
    problem = webhook_problem(f"http://{host}:8080/hook", allow=[])
    assert problem is not None and "not a public address" in problem


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_global_addresses_pass(address: str) -> None:
    assert global_address(ipaddress.ip_address(address))
    host = f"[{address}]" if ":" in address else address
    assert webhook_problem(f"https://{host}/hook", allow=[]) is None


def test_allow_hosts_opens_any_path_and_agent_hosts_only_push_receivers() -> None:
    receiver = "http://127.0.0.1:9000/agents/a/a2a/push/standin-1"
    other = "http://127.0.0.1:9000/admin/reset"
    assert webhook_problem(other, allow=["127.0.0.1"]) is None
    assert webhook_problem(receiver, allow=[], agents=["127.0.0.0/8"]) is None
    assert webhook_problem(other, allow=[], agents=["127.0.0.0/8"]) is not None
    # The receiver's id is required, and the path must end there.
    assert webhook_problem("http://127.0.0.1:9000/a2a/push/", allow=[], agents=["127.0.0.1"])
    assert webhook_problem("http://127.0.0.1:9000/a2a/push/x/more", allow=[], agents=["127.0.0.1"])


def test_a_name_is_checked_at_every_address_it_resolves_to() -> None:
    # localhost resolves to loopback only: refused unless named, by name or by network.
    assert webhook_problem("http://localhost:1/hook", allow=[]) is not None
    assert webhook_problem("http://localhost:1/hook", allow=["localhost"]) is None
    checked = resolve_webhook("http://localhost:1/hook", allow=["localhost"])
    assert isinstance(checked, Webhook)
    assert checked.addresses and all(a.is_loopback for a in checked.addresses)


def test_bad_urls_say_what_is_wrong() -> None:
    assert webhook_problem("ftp://example.com/x", allow=[]) == (
        "it must be an http or https URL with a host"
    )
    assert webhook_problem("http://[::1/x", allow=[]) == "it is not a URL"
    assert webhook_problem("http://no-such-host.invalid/x", allow=[]) == (
        "its host no-such-host.invalid does not resolve"
    )
    # A config being created may name a host that does not resolve yet: delivery checks again.
    assert webhook_problem("http://no-such-host.invalid/x", allow=[], resolve=False) is None


def test_a_delivery_names_the_checked_address_and_keeps_the_name_for_host_and_tls() -> None:
    webhook = Webhook(
        url="https://hooks.example.com:8443/in?x=1",
        host="hooks.example.com",
        addresses=(ipaddress.ip_address("2606:4700::1111"),),
    )
    url, headers, extensions = pinned_request(webhook, webhook.addresses[0])
    assert url == "https://[2606:4700::1111]:8443/in?x=1"
    assert headers == {"Host": "hooks.example.com:8443"}
    assert extensions == {"sni_hostname": "hooks.example.com"}
    plain = Webhook(
        url="http://hooks.example.com/in",
        host="hooks.example.com",
        addresses=(ipaddress.ip_address("93.184.216.34"),),
    )
    assert pinned_request(plain, plain.addresses[0]) == (
        "http://93.184.216.34/in",
        {"Host": "hooks.example.com"},
        {},
    )
