"""What the service allows: `auth` (bearer tokens and tenants), `roots` (which
server-side paths a job may read), `inputs` (which of them a tenant may name), `quotas`
(what a tenant may use). Which addresses a webhook may go to is the sender's own rule
(`thresher.notify.urls`), kept by the service and the command line alike."""

from __future__ import annotations

__all__: list[str] = []
