"""The dashboard's pages through the app (FastAPI's TestClient), signed in as a tenant: the
jobs list filtered in the store (a name among 10,000 jobs is found, not only among the
newest), paged, and fast; the batches, triggers and queue pages show the tenant's own
objects and no other's; their actions need the session's CSRF token."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from thresher.service.app import create_app
from thresher.service.background.slots import capacity, retry_request
from thresher.service.config import ServerConfig, prepare
from thresher.service.policies.auth import create_token
from thresher.service.state import ServiceState
from thresher.spec import parse_spec
from thresher.store import open_store, retry_lease
from thresher.store._batches import BatchRow, BatchStatus

pytestmark = [pytest.mark.unit, pytest.mark.slow]
JOBS = 10_000


def spec(name: str, priority: int = 0) -> Any:
    return parse_spec({
        "job": {"name": name, "priority": priority},
        "source": {"uri": "/nowhere/in.jsonl"},
        "model": {"kind": "python", "uri": "/nowhere/m.py:M"},
        "sink": {"uri": "/nowhere/out/"},
    })  # fmt: skip


class Browser:
    """A signed-in tenant's session on the app (its cookie, its CSRF token)."""

    def __init__(self, app: Any, token: str) -> None:
        self.client = TestClient(app, base_url="http://testserver")
        answer = self.client.post("/ui/login", data={"token": token}, follow_redirects=False)
        assert answer.status_code == 303, answer.text

    def get(self, path: str) -> Any:
        answer = self.client.get(path)
        assert answer.status_code == 200, (path, answer.status_code)
        return answer.text

    def csrf(self, path: str) -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', self.get(path))
        assert found
        return found[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("site")
    config = prepare(ServerConfig(data_dir=root / "data"))
    store = open_store(f"sqlite:///{root / 'store.db'}")
    with store.db.transaction():
        pass
    for n in range(JOBS):
        store.queue_job(f"job-{n:05d}", spec(f"nightly-{n:05d}", priority=n % 3), tenant="acme")
    store.queue_job("other-1", spec("theirs"), tenant="globex")
    store.batches.create(
        BatchRow("batch_a1", "acme", "file-in", "/v1/embeddings", "24h",
                 BatchStatus.IN_PROGRESS, int(time.time()))
    )  # fmt: skip
    store.batches.create(
        BatchRow("batch_g1", "globex", "file-x", "/v1/embeddings", "24h",
                 BatchStatus.VALIDATING, int(time.time()))
    )  # fmt: skip
    state = ServiceState(store=store, config=config, data_dir=config.data_dir)
    app = create_app(state, background=False)
    return app, create_token(store, "acme"), create_token(store, "globex")


def test_a_name_among_ten_thousand_jobs_is_found_and_the_page_is_fast(site: Any) -> None:
    app, acme, _ = site
    browser = Browser(app, acme)
    browser.get("/ui/jobs")  # warm: templates compiled
    started = time.perf_counter()
    page = browser.get("/ui/jobs")
    assert time.perf_counter() - started < 1.0  # the bound, with 10,000 jobs
    assert page.count('<tr data-id="') == 50 and "job-09999" in page and "other-1" not in page
    assert '<th scope="col">Priority</th>' in page
    oldest = browser.get("/ui/jobs?name=NIGHTLY-00007")  # any case; far below the newest
    assert oldest.count('<tr data-id="') == 1 and "job-00007" in oldest
    literal = browser.get("/ui/jobs?name=nightly_0")  # `_` is no wildcard
    assert literal.count('<tr data-id="') == 0
    older = re.search(r'href="(/ui/jobs\?[^"]*after=[^"]+)" rel="next"', page)
    assert older
    second = browser.get(older[1].replace("&amp;", "&"))
    assert "job-09949" in second and 'data-id="job-09950"' not in second
    queued = browser.client.get("/ui/jobs.json?status=queued&name=nightly-0000").json()["data"]
    assert sorted(j["id"] for j in queued) == [f"job-{n:05d}" for n in range(10)]


def test_the_queue_shows_the_tenant_s_waiting_jobs_in_start_order(site: Any) -> None:
    app, acme, globex = site
    page = Browser(app, acme).get("/ui/queue")
    assert "job-00002" in page and "other-1" not in page  # priority 2 first, oldest first
    assert page.index("job-00002") < page.index("job-00005")
    assert "job-00000" not in page and f"and {JOBS - 200} more" in page
    assert "next to start" in page
    assert "other-1" in Browser(app, globex).get("/ui/queue")


def test_the_queue_shows_a_retry_round_as_its_job_s(site: Any) -> None:
    """A round holds slots under a lease of its own: the queue lists it by its job, whose
    page the link opens, not by the lease's name (no job has it)."""
    app, acme, _ = site
    state = app.state.service
    record = state.store.job("job-00001")
    grant = state.store.leases.acquire(retry_request(state.config, record), capacity(state.config))
    assert grant.granted
    try:
        page = Browser(app, acme).get("/ui/queue")
        assert '<a href="/ui/jobs/job-00001">job-00001</a> (retry round)' in page
        assert ".retry" not in page
    finally:
        state.store.leases.release(retry_lease("job-00001"))


def test_batches_are_the_tenant_s_own(site: Any) -> None:
    app, acme, globex = site
    a, g = Browser(app, acme), Browser(app, globex)
    assert "batch_a1" in a.get("/ui/batches") and "batch_g1" not in a.get("/ui/batches")
    detail = a.get("/ui/batches/batch_a1")
    assert "in_progress" in detail and "created" in detail
    assert g.client.get("/ui/batches/batch_a1").status_code == 404
    assert "No files yet." in a.get("/ui/files")


def test_triggers_and_schedules_pages_and_their_actions_need_the_csrf_token(site: Any) -> None:
    app, acme, _ = site
    browser = Browser(app, acme)
    assert "No triggers." in browser.get("/ui/triggers")
    assert "No schedules." in browser.get("/ui/schedules")
    forged = browser.client.post(
        "/ui/triggers/x/pause", data={"csrf": "forged"}, follow_redirects=False
    )
    assert forged.status_code == 403
    token = browser.csrf("/ui/triggers")
    unknown = browser.client.post(
        "/ui/triggers/nope/pause", data={"csrf": token}, follow_redirects=False
    )
    assert unknown.status_code == 404


def test_signed_out_pages_go_to_the_sign_in(tmp_path: Path, site: Any) -> None:
    app, _, _ = site
    client = TestClient(app)
    for path in ("/ui/batches", "/ui/triggers", "/ui/queue", "/ui/schedules"):
        answer = client.get(path, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/login"


def test_only_a_failed_or_cancelled_job_is_resumed(site: Any) -> None:
    app, acme, globex = site
    client = TestClient(app)
    waiting = client.post("/v1/jobs/job-00001/resume", headers={"Authorization": f"Bearer {acme}"})
    assert waiting.status_code == 409 and "only a failed or cancelled job" in waiting.text
    theirs = client.post("/v1/jobs/job-00001/resume", headers={"Authorization": f"Bearer {globex}"})
    assert theirs.status_code == 404


def test_a_job_s_webhook_deliveries_are_on_its_page(site: Any) -> None:
    from thresher.store._deliveries import DeliveryState

    app, acme, _ = site
    store = app.state.service.store
    store.deliveries.add("job-00003", "job.failed", "https://hooks.example/in", "{}")
    key = ("job-00003", "job.failed", "https://hooks.example/in")
    store.deliveries.record(key, 3, (503, "Service Unavailable"), DeliveryState.FAILED)
    browser = Browser(app, acme)
    page = browser.get("/ui/jobs/job-00003")
    assert "https://hooks.example/in" in page and "503" in page and "failed" in page
    token = browser.csrf("/ui/jobs/job-00003")
    again = browser.client.post(
        "/ui/webhooks/jobs/job-00003/redeliver", data={"csrf": token}, follow_redirects=False
    )
    assert again.status_code == 409  # this app runs no background sender: it says so
    assert "sends no webhooks now" in again.text
    assert "No webhook endpoints." in browser.get("/ui/webhooks")
