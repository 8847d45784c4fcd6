"""Bearer tokens, each mapped to a tenant. Only a token's sha256 is stored, so the store
never holds a usable secret; `thresher token create --tenant NAME` prints a new token
once.

Every `/v1/...` route takes `Depends(current_tenant)`: a request without a token the
server knows answers 401, and everything a tenant sees is filtered by its name.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from thresher.service.errors import Unauthorized
from thresher.service.state import StateDep
from thresher.store import Store
from thresher.store.uploads import TokenTable

PREFIX = "thr_"

bearer = HTTPBearer(auto_error=False, description="A token from `thresher token create`.")


def create_token(store: Store, tenant: str) -> str:
    """A new token for `tenant`; the only time it is seen in clear."""
    if not tenant.strip():
        raise ValueError("a tenant name must not be empty")
    token = PREFIX + secrets.token_urlsafe(32)
    TokenTable(store.db).add(_digest(token), tenant.strip())
    return token


def tenant_of(store: Store, token: str) -> str | None:
    """The tenant a token belongs to, or None for a token the server does not know."""
    return TokenTable(store.db).tenant_of(_digest(token))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def current_tenant(credentials: Credentials, state: StateDep) -> str:
    """FastAPI dependency: the caller's tenant, from `Authorization: Bearer <token>`;
    401 without a token the server knows."""
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
