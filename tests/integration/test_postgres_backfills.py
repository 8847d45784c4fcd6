"""Backfills' store on a live PostgreSQL server (`scripts/postgres.sh`): the migration,
the backfill rows, and the tick ledger's claims made by two stores (two servers) at once —
each fire time won once, a jobless tick taken over once, a live claim never taken."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest

from thresher.store import BackfillState, JobState, Store, TickOutcome, open_store

pytestmark = pytest.mark.integration

DAY = datetime(2026, 11, 1, 1, tzinfo=UTC)


@pytest.fixture
def url(postgres_server: str, pg_schema: str) -> str:
    return f"{postgres_server}?options={quote(f'-csearch_path={pg_schema}')}"


@contextmanager
def store_at(url: str) -> Iterator[Store]:
    store = open_store(url)
    try:
        yield store
    finally:
        store.db.close()


def test_two_stores_claiming_one_backfills_fire_times_win_each_once(url: str) -> None:
    times = [DAY + timedelta(days=d) for d in range(40)]
    with store_at(url) as one, store_at(url) as two:
        row = one.backfills.create(
            "backfill-1", "acme", schedule=("nightly", "nightly", "Europe/Berlin"),
            span=("2026-11-01", "2026-12-10"), nominals=times, priority=-1, max_running=None,
        )  # fmt: skip
        assert two.backfills.find("backfill-1") == row
        assert [r.id for r in two.backfills.running()] == ["backfill-1"]

        def claim(store: Store, owner: str) -> list[datetime]:
            return [t for t in times if store.ticks.claim_for_backfill("nightly", t, row.id, owner)]

        with ThreadPoolExecutor(2) as pool:
            won = list(pool.map(claim, (one, two), ("server-a", "server-b")))
        assert sorted(won[0] + won[1]) == times  # every fire time once, by one of them
        ticks = one.ticks.at("nightly", times)
        assert {t.backfill for t in ticks.values()} == {"backfill-1"}
        assert one.ticks.unsettled("nightly") == []  # the ticker's view leaves them out


def test_a_jobless_tick_is_taken_over_once_and_a_live_claim_never(url: str, job_spec: Any) -> None:
    missed, live, started = DAY, DAY + timedelta(days=1), DAY + timedelta(days=2)
    with store_at(url) as one, store_at(url) as two:
        ledger = one.ticks
        for nominal in (missed, live, started):
            assert ledger.claim("nightly", nominal, "ticker")
        ledger.settle("nightly", missed, TickOutcome.MISSED, message="too late to run")
        ledger.settle("nightly", started, TickOutcome.STARTED, job_id="job-live")
        assert one.ticks.claim_for_backfill("nightly", missed, "backfill-1", "server-a")
        assert not two.ticks.claim_for_backfill("nightly", missed, "backfill-2", "server-b")
        assert not two.ticks.claim_for_backfill("nightly", live, "backfill-2", "server-b")
        assert not two.ticks.claim_for_backfill("nightly", started, "backfill-2", "server-b")
        taken = two.ticks.at("nightly", [missed])[missed]
        assert (taken.outcome, taken.backfill, taken.claimed_by) == (
            TickOutcome.CLAIMED, "backfill-1", "server-a",
        )  # fmt: skip
        assert ledger.last("nightly") == started  # the ticker's own decisions only
        one.queue_job("job-1", job_spec(), "acme", "tick:nightly:x")
        assert one.backfills.job_states(["job-1", "job-gone"]) == {"job-1": JobState.QUEUED.value}


def test_a_backfill_is_cancelled_or_ended_once(url: str) -> None:
    with store_at(url) as store:
        for name in ("a", "b"):
            store.backfills.create(
                name, "acme", schedule=("nightly", "nightly", "UTC"), span=("x", "y"),
                nominals=[DAY], priority=0, max_running=2,
            )  # fmt: skip
        assert store.backfills.cancel("a") and not store.backfills.cancel("a")
        store.backfills.end("b")
        assert not store.backfills.cancel("b")  # an ended backfill stays ended
        found = {r.id: r.state for r in store.backfills.of_schedule("nightly")}
        assert found == {"a": BackfillState.CANCELLED, "b": BackfillState.ENDED}
        assert store.backfills.running() == []
