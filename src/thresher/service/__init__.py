"""The HTTP service (`thresher serve`): files, jobs, the request buffer, webhooks, metrics.

Needs the `service` extra (`pip install 'thresher[service]'`). Its parts:

- `app` — `create_app(state)` and `serve()`; `state` — `ServiceState`, the data shared by
  all parts; `config` — the server's TOML config; `errors`, `schemas` — API shapes;
- `submission` — a tenant's job body made into a full spec, and `submit_job`;
  `uploads`, `downloads` — files in, results out;
- `routers/` — the HTTP routes; `background/` — the scheduler, the buffer's flusher,
  webhooks; `policies/` — tokens and tenants, readable roots, webhook addresses.
"""

from __future__ import annotations

__all__: list[str] = []  # import the module you need: app, config, auth, …
