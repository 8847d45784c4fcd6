"""What the service allows: `auth` (bearer tokens and tenants), `roots` (which
server-side paths a job may read), `webhook_urls` (which webhook addresses it may call)."""

from __future__ import annotations

__all__: list[str] = []
