"""Bearer tokens, each mapped to a tenant. Only a token's sha256 is stored, so the store
never holds a usable secret; `thresher token create --tenant NAME` prints a new token
once. `thresher token list` shows each token's tenant, age and fingerprint (the first
characters of its sha256, which tell tokens apart and are of no use to a thief), and
`thresher token revoke FINGERPRINT` forgets one: the next request with it answers 401.

Every `/v1/...` route takes `Depends(current_tenant)`: a request without a token the
server knows answers 401, and everything a tenant sees is filtered by its name.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from thresher.service.errors import Unauthorized
from thresher.service.state import ServiceState, StateDep
from thresher.store import Store

PREFIX = "thr_"
FINGERPRINT_LENGTH = 12  # hex digits of the token's sha256 shown by `thresher token list`

bearer = HTTPBearer(auto_error=False, description="A token from `thresher token create`.")


def create_token(store: Store, tenant: str) -> str:
    """A new token for `tenant`; the only time it is seen in clear."""
    if not tenant.strip():
        raise ValueError("a tenant name must not be empty")
    token = PREFIX + secrets.token_urlsafe(32)
    store.tokens.add(_digest(token), tenant.strip())
    return token


def tenant_of(store: Store, token: str) -> str | None:
    """The tenant a token belongs to, or None for a token the server does not know."""
    return store.tokens.tenant_of(_digest(token))


@dataclass(frozen=True)
class TokenInfo:
    """What may be shown of a token: never the token, nor enough of its hash to look it up."""

    fingerprint: str
    tenant: str
    created_at: str


def list_tokens(store: Store) -> list[TokenInfo]:
    """Every token's fingerprint, tenant and creation time, by tenant then age."""
    return [
        TokenInfo(digest[:FINGERPRINT_LENGTH], tenant, created)
        for digest, tenant, created in store.tokens.all()
    ]


def revoke_token(store: Store, fingerprint: str) -> TokenInfo:
    """Forget the one token whose fingerprint (or a longer prefix of its sha256) is
    `fingerprint`; returns what it was. ValueError when none or several match."""
    wanted = fingerprint.strip().lower()
    if len(wanted) < 8:
        raise ValueError(
            "give at least 8 characters of the fingerprint `thresher token list` shows"
        )
    table = store.tokens
    matches = [row for row in table.all() if row[0].startswith(wanted)]
    if len(matches) != 1:
        found = "no token has" if not matches else f"{len(matches)} tokens have"
        raise ValueError(f"{found} the fingerprint {fingerprint!r}; see `thresher token list`")
    digest, tenant, created = matches[0]
    table.remove(digest)
    return TokenInfo(digest[:FINGERPRINT_LENGTH], tenant, created)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def current_tenant(request: Request, credentials: Credentials, state: StateDep) -> str:
    """FastAPI dependency: the caller's tenant (`authenticate`), kept in the request's
    state for the access log (`service/logs.py`), once its token's request rate allows
    the request (429 with Retry-After when not: `policies/rates.py`)."""
    tenant = authenticate(credentials, state)
    request.state.tenant = tenant
    assert credentials is not None  # authenticate refused a request without one
    limits = state.config.limits(tenant)
    key = _digest(credentials.credentials)
    state.rates.take(key, limits.requests_per_second, limits.requests_burst)
    return tenant


def authenticate(credentials: HTTPAuthorizationCredentials | None, state: ServiceState) -> str:
    """The caller's tenant, from `Authorization: Bearer <token>`; 401 without a token
    the server knows."""
    if credentials is None or not credentials.credentials:
        raise Unauthorized(
            "send `Authorization: Bearer <token>`; `thresher token create` makes one"
        )
    tenant = tenant_of(state.store, credentials.credentials)
    if tenant is None:
        raise Unauthorized("unknown token; `thresher token create --tenant NAME` makes one")
    return tenant


Tenant = Annotated[str, Depends(current_tenant)]
"""A route parameter typed `Tenant` receives the caller's tenant (401 without a token)."""
