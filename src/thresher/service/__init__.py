"""The HTTP service (`thresher serve`): files, jobs, the request buffer, webhooks, metrics.

Needs the `service` extra (`pip install 'thresher[service]'`). The modules, one concern each:

- `app` — `create_app(state)` and `serve()`; `state` — `ServiceState`, shared by all parts;
- `config` — the server's TOML config; `auth` — bearer tokens and tenants;
- `files`, `uploads` — uploads; `jobs`, `submission`, `roots`, `downloads` — jobs;
- `scheduler` — runs queued jobs; `metrics` — `/metrics`, `/healthz`;
- `buffer*` — the request buffer; `webhooks`, `delivery` — signed job-end webhooks.
"""

from __future__ import annotations

__all__: list[str] = []  # import the module you need: app, config, auth, …
