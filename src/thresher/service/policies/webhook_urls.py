"""Where webhooks may go: http(s) URLs whose host resolves only to public addresses.

Loopback, private, link-local, multicast, reserved, unspecified and other non-global
addresses are refused (an IPv4-mapped IPv6 address is judged as the IPv4 address it
maps), unless the server sets `webhook_allow_private = true`. Every address the host
resolves to must pass, so a name with one public and one private address is refused.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_webhook_url(url: str, allow_private: bool) -> None:
    """Raise ValueError, saying why, unless `url` is a webhook this server may call."""
    resolve_webhook_url(url, allow_private)


def resolve_webhook_url(url: str, allow_private: bool) -> list[IPAddress]:
    """The addresses to call `url` at, all checked against the policy (none are looked up
    when private addresses are allowed). Raises ValueError for a URL the policy refuses."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"notify.webhook: only http:// and https:// URLs are allowed, not {url!r}")
    host = parts.hostname
    if not host:
        raise ValueError(f"notify.webhook: {url!r} names no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ValueError(f"notify.webhook: {url!r} has a bad port") from None
    if allow_private:
        return []
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"notify.webhook: cannot resolve {host!r} ({exc})") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos))
    for address in addresses:
        reason = _not_public(address)
        if reason:
            raise ValueError(
                f"notify.webhook: {url} points at {address} ({reason}), not a public address; "
                "webhooks go only to public addresses unless the server sets "
                "webhook_allow_private = true"
            )
    return addresses


def _not_public(address: IPAddress) -> str | None:
    """Why `address` is not a public one, or None when it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    for kind in ("loopback", "unspecified", "link_local", "multicast", "private", "reserved"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if address.is_global else "non-global"
