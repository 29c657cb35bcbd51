"""The SSRF guard of webhooks: which URLs an agent may POST a task's updates to, and where.

A webhook is an ``http``/``https`` URL whose host resolves only to globally routable addresses
(``ipaddress``'s ``is_global``, with IPv4-mapped, IPv4-compatible, NAT64 and 6to4 IPv6 addresses
judged by the IPv4 address they carry). Anything else (loopback, private, link-local, carrier-grade NAT, benchmarking,
documentation, multicast, reserved) is refused unless allowed:

- ``[push] allow_hosts`` names hosts, addresses or networks allowed for any webhook;
- ``[push] agent_hosts`` names those allowed only for another agent's push receiver (a URL whose
  path ends in ``/a2a/push/<id>``, which checks its own token), so agents on a private network can
  push to each other without opening that network to clients' webhooks.

The host is resolved once, by :func:`resolve_webhook`, and delivery connects to the addresses that
were checked (:func:`pinned_request`), never resolving the name again: a name that answers a public
address to the check and a private one to the connection (DNS rebinding) reaches nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs

__all__ = ["Webhook", "global_address", "pinned_request", "resolve_webhook", "webhook_problem"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv6 forms that carry an IPv4 address in their last 32 bits: NAT64, and IPv4-compatible.
_EMBEDDING = (
    ipaddress.ip_network("64:ff9b::/96"),
    ipaddress.ip_network("64:ff9b:1::/48"),
    ipaddress.ip_network("::/96"),
)
# Not global, although older Pythons' tables say so of parts of it (3.11 knows only the /29).
_NOT_GLOBAL = (ipaddress.ip_network("192.0.0.0/24"),)


@attrs.frozen
class Webhook:
    """A webhook URL that passed the guard, with the addresses it was checked at."""

    url: str
    host: str
    addresses: tuple[Address, ...]


def global_address(address: Address) -> bool:
    """Whether ``address`` is globally routable, judging an IPv6 address that carries an IPv4 one
    (IPv4-mapped, IPv4-compatible, NAT64, 6to4) by that IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return global_address(address.ipv4_mapped)
        if address.sixtofour is not None:
            return global_address(address.sixtofour)
        if any(address in network for network in _EMBEDDING):
            return global_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    elif any(address in network for network in _NOT_GLOBAL):
        return False
    return address.is_global and not address.is_multicast


def _listed(host: str, addresses: Sequence[Address], entries: Sequence[str]) -> bool:
    for entry in entries:
        if entry.lower() == host.lower():
            return True
        try:
            network = ipaddress.ip_network(entry.strip("[]"), strict=False)
        except ValueError:
            continue
        if addresses and all(address in network for address in addresses):
            return True
    return False


def _receiver_path(path: str) -> bool:
    """An agent's push receiver: ``.../a2a/push/<id>``."""
    segments = path.split("/")
    return len(segments) >= 4 and segments[-3:-1] == ["a2a", "push"] and bool(segments[-1])


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def resolve_webhook(
    url: str,
    allow: Sequence[str],
    *,
    agents: Sequence[str] = (),
    resolve: bool = True,
) -> Webhook | str:
    """``url`` as a :class:`Webhook` with the addresses it may be reached at, or what is wrong
    with it. Resolves its host (blocking: call it in a worker thread). With ``resolve`` False (a
    config being created), a name that does not resolve (yet) passes: every delivery checks it
    again and refuses it then."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "it is not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "it must be an http or https URL with a host"
    host = parts.hostname
    literal = _literal(host)
    if literal is not None:
        addresses: list[Address] = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, ValueError, UnicodeError):
            if not resolve:
                return Webhook(url=url, host=host, addresses=())
            return f"its host {host} does not resolve"
        addresses = []
        for info in infos:
            raw: Any = info[4][0]
            address = ipaddress.ip_address(str(raw).split("%", 1)[0])
            if address not in addresses:
                addresses.append(address)
    webhook = Webhook(url=url, host=host, addresses=tuple(addresses))
    if all(global_address(a) for a in addresses):
        return webhook
    if _listed(host, addresses, allow):
        return webhook
    if _receiver_path(parts.path) and _listed(host, addresses, agents):
        return webhook
    return (
        f"its host {host} is not a public address (loopback, private or reserved); name it in "
        "[push] allow_hosts to allow it"
    )


def webhook_problem(
    url: str, allow: Sequence[str], *, agents: Sequence[str] = (), resolve: bool = True
) -> str | None:
    """What is wrong with ``url`` as a webhook (None: nothing); see :func:`resolve_webhook`."""
    checked = resolve_webhook(url, allow, agents=agents, resolve=resolve)
    return checked if isinstance(checked, str) else None


def pinned_request(
    webhook: Webhook, address: Address
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The URL, headers and httpx extensions that reach ``webhook`` at ``address`` without
    resolving its name again: the URL names the address, ``Host`` the name, and TLS verifies the
    name (``sni_hostname``)."""
    parts = urlsplit(webhook.url)
    literal = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    url = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    host = webhook.host if _literal(webhook.host) is None else literal
    default = 443 if parts.scheme == "https" else 80
    headers = {"Host": host if not parts.port or parts.port == default else f"{host}:{parts.port}"}
    extensions: dict[str, Any] = {}
    if parts.scheme == "https" and _literal(webhook.host) is None:
        extensions["sni_hostname"] = webhook.host
    return url, headers, extensions
