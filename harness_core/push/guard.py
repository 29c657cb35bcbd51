"""The SSRF guard of webhooks: which URLs an agent may POST a task's updates to.

A webhook is an ``http``/``https`` URL whose host resolves only to public addresses: loopback,
private, link-local, multicast and reserved addresses are refused, unless ``[push] allow_hosts``
names the host, the address or a network containing it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

__all__ = ["webhook_problem"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _allowed(host: str, addresses: Sequence[Address], allow: Sequence[str]) -> bool:
    for entry in allow:
        if entry.lower() == host.lower():
            return True
        try:
            network = ipaddress.ip_network(entry.strip("[]"), strict=False)
        except ValueError:
            continue
        if addresses and all(address in network for address in addresses):
            return True
    return False


def _looks_like_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _public(address: Address) -> bool:
    return not (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def webhook_problem(url: str, allow: Sequence[str], *, resolve: bool = True) -> str | None:
    """What is wrong with ``url`` as a webhook (None: nothing). Resolves its host: call it in a
    worker thread. With ``resolve`` False (a config being created), a host that does not resolve
    (yet) is accepted: every delivery checks again, and refuses it then."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "it is not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "it must be an http or https URL with a host"
    host = parts.hostname
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        if not resolve and not _looks_like_address(host):
            return None
        return f"its host {host} does not resolve"
    addresses: list[Address] = []
    for info in infos:
        raw: Any = info[4][0]
        addresses.append(ipaddress.ip_address(str(raw).split("%", 1)[0]))
    if _allowed(host, addresses, allow):
        return None
    if not all(_public(a) for a in addresses):
        return (
            f"its host {host} is a loopback, private or reserved address; name it in "
            "[push] allow_hosts to allow it"
        )
    return None
