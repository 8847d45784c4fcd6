"""How every webhook thresher sends is signed: the Standard Webhooks scheme
(standardwebhooks.com), which OpenAI's batch events use too, so a receiver checks any of
them with an existing library (`standardwebhooks.Webhook(secret).verify(body, headers)`,
or the official OpenAI client's `webhooks.unwrap`).

Each attempt carries `webhook-id` (the message's id, the same on every retry, for the
receiver to drop a repeat), `webhook-timestamp` (the attempt's Unix time) and
`webhook-signature`: `v1,` + the base64 HMAC-SHA256 of `"<id>.<timestamp>.<body>"`, one
per secret it is signed with (an endpoint keeps its old secret a while after a
rotation), separated by spaces. A secret is `whsec_` + a base64 key; any other string
is its own UTF-8 bytes as the key (a server's `webhook_secret` as written in its config),
and `standard_secret` gives its `whsec_` form for receivers' libraries.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping

__all__ = [
    "ID_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "message_id",
    "signed_headers",
    "standard_secret",
    "verify_signature",
]

ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER = (
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
)
SECRET_PREFIX = "whsec_"


def message_id(subject: str, event: str) -> str:
    """A message's id, made from what it is about, so a retry or a resend after a restart
    carries the same one."""
    return "msg_" + hashlib.sha256(f"{subject}\0{event}".encode()).hexdigest()[:24]


def signed_headers(
    secrets: Iterable[str], message: str, body: bytes, at: float | None = None
) -> dict[str, str]:
    """The headers of one attempt to send `body` as message `message` at `at` (Unix
    seconds; now), signed with each of `secrets`."""
    timestamp = str(int(time.time() if at is None else at))
    return {
        ID_HEADER: message,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: " ".join(_signature(s, message, timestamp, body) for s in secrets),
    }


def verify_signature(
    secret: str, headers: Mapping[str, str], body: bytes | str, max_age: float | None = 300.0
) -> bool:
    """For receivers: whether `headers` sign `body` with `secret`, and their timestamp is
    at most `max_age` seconds from now (None: any age), so a captured delivery cannot be
    replayed later. Recompute over the raw bytes received, not re-serialised JSON."""
    lower = {k.lower(): v for k, v in headers.items()}
    message, timestamp = lower.get(ID_HEADER, ""), lower.get(TIMESTAMP_HEADER, "")
    try:
        if max_age is not None and abs(time.time() - int(timestamp)) > max_age:
            return False
    except ValueError:
        return False
    raw = body.encode() if isinstance(body, str) else body
    want = _signature(secret, message, timestamp, raw)
    given = lower.get(SIGNATURE_HEADER, "").split()
    return any(hmac.compare_digest(want, one) for one in given)


def standard_secret(secret: str) -> str:
    """The `whsec_` form of `secret`, as Standard Webhooks libraries take it."""
    if secret.startswith(SECRET_PREFIX):
        return secret
    return SECRET_PREFIX + base64.b64encode(secret.encode()).decode("ascii")


def _signature(secret: str, message: str, timestamp: str, body: bytes) -> str:
    signed = f"{message}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def _key(secret: str) -> bytes:
    if secret.startswith(SECRET_PREFIX):
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    return secret.encode()
