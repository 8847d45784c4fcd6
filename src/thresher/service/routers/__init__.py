"""The HTTP routes, one module per resource: `files` (`/v1/files`), `jobs` (`/v1/jobs`),
`requests` (the request buffer, `/v1/requests`), `triggers` (`/v1/triggers`, read-only),
`metrics` (`/metrics`, `/healthz`). A route checks the caller's tenant and input, then
works through `ServiceState` and the store; nothing here runs after the response."""

from __future__ import annotations

__all__: list[str] = []
