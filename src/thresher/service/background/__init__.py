"""The service's work that runs on its own threads: the `scheduler` (queued jobs onto
the coordinator), the request `buffer`'s flusher, and signed `webhooks` with their
retrying `delivery`."""

from __future__ import annotations

__all__: list[str] = []
