"""A tenant's webhook endpoints stay within the limit however many are made at once, from
connections of their own (as two servers on one store would)."""

from __future__ import annotations

import threading

import pytest

from thresher.notify.endpoints import new_endpoint_id, new_secret
from thresher.store import EndpointRow, Store, open_store

pytestmark = pytest.mark.unit


def row(tenant: str) -> EndpointRow:
    return EndpointRow(
        new_endpoint_id(), tenant, "hook", "https://example.com/h", [], new_secret(), None,
        None, 1, 1,
    )  # fmt: skip


def test_endpoints_made_at_once_stop_at_the_limit(store: Store) -> None:
    added: list[bool] = []
    start = threading.Barrier(8)

    def make() -> None:
        own = open_store(store.url)  # a connection of its own
        start.wait()
        added.append(own.webhook_endpoints.add(row("acme"), limit=3))
        own.db.close()

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(added) == [False] * 5 + [True] * 3
    table = store.webhook_endpoints
    assert len(table.of_tenant("acme", 100, None)) == 3
    assert table.add(row("globex"), limit=3)  # another tenant's count is its own
