"""Signing in to the dashboard: a tenant's bearer token, given once on the sign-in page,
is exchanged for a session cookie (HttpOnly, SameSite=Strict, Secure over HTTPS), so no
token travels in a URL, a page or a script.

The cookie holds the tenant, the token's sha256 (never the token: it cannot be used as a
bearer token) and an expiry, signed with a key derived from the server's secret. Each
request checks the signature, the expiry and that the token still exists (a revoked
token's sessions end at once). A form's action carries a CSRF token, the HMAC of the
session: a page of another site cannot make it, and SameSite=Strict keeps the cookie off
its requests besides.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

__all__ = ["COOKIE", "MAX_AGE", "Session", "SessionKey"]

COOKIE = "thresher_session"
MAX_AGE = 8 * 3600  # seconds a sign-in lasts


@dataclass(frozen=True)
class Session:
    tenant: str
    digest: str  # the token's sha256, to check it still exists
    value: str  # the cookie as set


@dataclass(frozen=True)
class SessionKey:
    """The key sessions are signed with, derived from the server's secret."""

    key: bytes

    @classmethod
    def of(cls, secret: str) -> SessionKey:
        return cls(
            hmac.new(secret.encode(), b"thresher dashboard sessions", hashlib.sha256).digest()
        )

    def seal(self, tenant: str, digest: str, now: float | None = None) -> str:
        expires = int((time.time() if now is None else now) + MAX_AGE)
        body = json.dumps({"t": tenant, "d": digest, "e": expires}, separators=(",", ":"))
        encoded = base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")
        return f"{encoded}.{self._sign(encoded)}"

    def open(self, value: str | None, now: float | None = None) -> Session | None:
        """The session a cookie holds, or None for one that is forged, broken or old."""
        if not value or value.count(".") != 1:
            return None
        encoded, signature = value.split(".")
        if not hmac.compare_digest(signature, self._sign(encoded)):
            return None
        try:
            body = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
            tenant, digest, expires = str(body["t"]), str(body["d"]), int(body["e"])
        except (ValueError, KeyError, TypeError):
            return None
        if expires < (time.time() if now is None else now):
            return None
        return Session(tenant, digest, value)

    def csrf(self, session: Session) -> str:
        """The token a form of this session carries."""
        return self._sign("csrf:" + session.value)

    def _sign(self, text: str) -> str:
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()
