"""Background loops survive one tenant's poison object in a real `thresher serve`
(issue 34, finding 2): a tenant's schedule that does not read, put straight in the store
(as one stored by an older server would be), is quarantined while another schedule goes
on ticking, that tenant's listing answers, and `/healthz` stays ok. (Before: the ticker's
look failed as a whole at every pass, and no schedule of any tenant ticked.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from thresher.store import TickOutcome, open_store, schedule_key

from .servers import Server, ServiceSite
from .test_service_schedules import clock_reaching, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FIRE = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def test_a_schedule_that_does_not_read_is_quarantined_and_another_still_ticks(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(parents=True)
    (shared / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n')
    job = {"model": "double", "source": {"uri": str(shared / "in.jsonl")}, "id_column": "id"}
    settings = f"""quarantine_after = 2

[schedules.minutely]
cron = "* * * * *"
tenant = "acme"
overlap = "queue"
job = {{ model = "double", source = {{ uri = {json.dumps(job["source"]["uri"])} }}, \
id_column = "id" }}
"""
    site = ServiceSite(tmp_path, settings=settings)
    store = open_store(site.store)
    store.schedules.create("evil", "never", json.dumps({"cron": 7, "job": job}))
    server = Server(site, env={"THRESHER_CLOCK": clock_reaching(FIRE, seconds=4, rate=12)})
    try:
        ledger = store.ticks
        wait_until(
            lambda: len([t for t in ledger.recent("minutely") if t.job_id]) >= 2,
            60,
            "two ticks of the healthy schedule",
        )
        assert {t.outcome for t in ledger.recent("minutely")} <= {
            TickOutcome.STARTED,
            TickOutcome.CLAIMED,
        }
        row = wait_until(
            lambda: (
                (r := store.schedules.find(schedule_key("evil", "never"))) and r.quarantined and r
            ),
            30,
            "the poison schedule's quarantine",
        )
        assert "2 failures in a row" in row.quarantined
        with server.client(site.token("evil")) as evil:
            listed = evil.get("/v1/schedules")
            assert listed.status_code == 200, listed.text
            assert evil.get("/healthz").json() == {"status": "ok"}
        before = len(ledger.recent("minutely"))
        wait_until(lambda: len(ledger.recent("minutely")) > before, 30, "a later tick")
    finally:
        server.stop()
