"""The service's work that runs on its own threads: the `scheduler` (queued jobs onto
the coordinator), the request `buffer`'s flusher, the `ticker` and the `watcher`, and
the `webhooks` sender's hooks (its sending and retries are `thresher.notify`'s)."""

from __future__ import annotations

__all__: list[str] = []
