"""Where webhooks may go: http(s) URLs whose host resolves only to public addresses.
The service checks a job's webhook with it when the job is submitted, and the sender
again at every attempt (`attempts.py`); `thresher run` allows private addresses.

Loopback, private, link-local, multicast, reserved, unspecified and other non-global
addresses are refused, unless the server sets `webhook_allow_private = true`. An IPv6
address that wraps an IPv4 one is judged as the address it wraps: IPv4-mapped
(`::ffff:a.b.c.d`) and 6to4 (`2002::/16`, whose relays route to the embedded address);
Teredo (`2001::/32`), IPv4-compatible (`::a.b.c.d`) and NAT64 (`64:ff9b::/96`) addresses
are refused as private or reserved whatever they wrap. Every address the host resolves to
must pass, so a name with one public and one private address is refused.

A URL with a control character or white space (a NUL, a CR LF that would split the
request's header lines) or over `MAX_URL_LENGTH` characters is refused whatever the
setting: such a URL could never be delivered.
"""

from __future__ import annotations

import ipaddress
import socket
import unicodedata
from urllib.parse import urlsplit

__all__ = ["MAX_URL_LENGTH", "check_webhook_url", "resolve_webhook_url"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL_LENGTH = 2048


def check_webhook_url(url: str, allow_private: bool) -> None:
    """Raise ValueError, saying why, unless `url` is a webhook this server may call."""
    resolve_webhook_url(url, allow_private)


def resolve_webhook_url(url: str, allow_private: bool) -> list[IPAddress]:
    """The addresses to call `url` at, all checked against the policy (none are looked up
    when private addresses are allowed). Raises ValueError for a URL the policy refuses."""
    _check_text(url)
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


def _check_text(url: str) -> None:
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"notify.webhook: a URL of at most {MAX_URL_LENGTH} characters")
    bad = next((c for c in url if c.isspace() or unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise ValueError(f"notify.webhook: {bad!r} is not allowed in a URL; percent-encode it")


def _not_public(address: IPAddress) -> str | None:
    """Why `address` is not a public one, or None when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped:
            address = address.ipv4_mapped
        elif address.sixtofour:
            inner = _not_public(address.sixtofour)
            return f"6to4 of {address.sixtofour}: {inner}" if inner else None
    for kind in ("loopback", "unspecified", "link_local", "multicast", "private", "reserved"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if address.is_global else "non-global"
