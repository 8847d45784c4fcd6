"""`/v1/schedules` through the whole HTTP app in this process (FastAPI's TestClient, no
background threads; the ticker is driven by hand with a fake clock): a tenant's schedules
are its own, bad ones are refused when they are given, naming the field, and each tick
makes one job."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from thresher.service import submission
from thresher.service.app import create_app
from thresher.service.background.ticker import Ticker
from thresher.service.config import ServerConfig, prepare
from thresher.service.policies.auth import create_token
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import open_store

MODEL = "class M:\n    def predict(self, batch):\n        return {'prediction': batch['x']}\n"


class Site:
    def __init__(self, tmp_path: Path) -> None:
        (tmp_path / "m.py").write_text(MODEL)
        self.shared = tmp_path / "shared"
        self.shared.mkdir()
        (self.shared / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n')
        nightly = {"cron": "0 2 * * *", "tenant": "acme", "job": self.job()}
        config = prepare(
            ServerConfig(
                data_dir=tmp_path / "data",
                models={"m": ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")},
                allowed_roots=[str(self.shared)],
                schedules={"ops-nightly": nightly},
            )
        )
        store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
        self.state = ServiceState(store=store, config=config, data_dir=config.data_dir)
        self.tokens = {t: create_token(store, t) for t in ("acme", "globex")}
        self.client = TestClient(create_app(self.state, background=False))

    def job(self, **fields: Any) -> dict[str, Any]:
        return {"model": "m", "source": {"uri": str(self.shared / "in.jsonl")}, **fields}

    def call(self, method: str, path: str, tenant: str = "acme", **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[tenant]}"}
        return self.client.request(method, path, headers=headers, **kw)

    def tick(self, now: datetime) -> None:
        state = self.state

        def submit(tenant: str, body: Any, key: str, tick: Any) -> str:
            return submission.submit_job(state, tenant, body, key, tick)

        Ticker(state, submit).look(now)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    made = Site(tmp_path)
    with made.client:
        yield made


def test_a_tenant_makes_reads_changes_and_deletes_its_schedule(site: Site) -> None:
    body = {"name": "hourly", "cron": "0 * * * *", "timezone": "Europe/Berlin", "job": site.job()}
    made = site.call("POST", "/v1/schedules", json=body)
    assert made.status_code == 201, made.text
    info = made.json()
    assert (info["name"], info["declared"], info["paused"]) == ("hourly", "api", False)
    assert len(info["next_fire_times"]) == 5 and info["last_tick"] is None
    assert site.call("POST", "/v1/schedules", json=body).status_code == 409
    names = [s["name"] for s in site.call("GET", "/v1/schedules").json()["data"]]
    assert names == ["hourly", "ops-nightly"]  # its own, and the config's run for it
    assert site.call("GET", "/v1/schedules", tenant="globex").json()["data"] == []
    assert site.call("GET", "/v1/schedules/hourly", tenant="globex").status_code == 404
    changed = site.call("PATCH", "/v1/schedules/hourly", json={"cron": "30 * * * *"})
    assert changed.status_code == 200 and changed.json()["cron"] == "30 * * * *"
    assert site.call("POST", "/v1/schedules/hourly/pause").json()["paused"] is True
    assert site.call("POST", "/v1/schedules/hourly/resume").json()["paused"] is False
    assert site.call("DELETE", "/v1/schedules/hourly").status_code == 204
    assert site.call("GET", "/v1/schedules/hourly").status_code == 404


def test_the_configs_schedules_are_read_only_to_tenants(site: Site) -> None:
    assert site.call("GET", "/v1/schedules/ops-nightly").json()["declared"] == "config"
    for method, path in [
        ("PATCH", "/v1/schedules/ops-nightly"),
        ("DELETE", "/v1/schedules/ops-nightly"),
        ("POST", "/v1/schedules/ops-nightly/pause"),
        ("POST", "/v1/schedules/ops-nightly/trigger"),
    ]:
        kw = {"json": {"cron": "* * * * *"}} if method == "PATCH" else {}
        assert site.call(method, path, **kw).status_code == 409, (method, path)
    body = {"name": "ops-nightly", "cron": "0 * * * *", "job": site.job()}
    assert site.call("POST", "/v1/schedules", json=body).status_code == 409


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"cron": "0 25 * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"name": "a/b"}, "name"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"job": {"model": "nope", "source": {"uri": "/x"}}}, "job.model"),
        ({"job": {"model": "m", "source": {"uri": "/etc/passwd"}}}, "job.source.uri"),
        ({"job": {"model": "m", "source": {"uri": "/tmp/x"}, "priority": "high"}}, "priority"),
        ({"tenant": "globex"}, "tenant"),
        ({"notify": {"on_missed": "http://127.0.0.1:9/hook"}}, "notify.on_missed"),
    ],
)
def test_a_schedule_that_cannot_run_is_422_naming_the_field(
    site: Site, change: dict[str, Any], named: str
) -> None:
    body = {"name": "hourly", "cron": "0 * * * *", "job": site.job(), **change}
    refused = site.call("POST", "/v1/schedules", json=body)
    assert refused.status_code == 422, refused.text
    assert named in refused.text
    assert site.call("GET", "/v1/schedules/hourly").status_code == 404


def test_an_input_that_does_not_exist_yet_is_allowed_with_the_date_filled_in(site: Site) -> None:
    job = site.job(name="scores-{date}")
    job["source"] = {"uri": str(site.shared / "{date}" / "in.jsonl")}
    body = {"name": "daily", "cron": "0 6 * * *", "job": job}
    assert site.call("POST", "/v1/schedules", json=body).status_code == 201
    (site.shared / "2026-12-01").mkdir()
    (site.shared / "2026-12-01" / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n')
    site.tick(datetime(2026, 12, 1, 6, 0, 5, tzinfo=UTC))
    (tick,) = site.call("GET", "/v1/schedules/daily/ticks").json()["data"]
    assert tick["outcome"] == "started", tick
    job_info = site.call("GET", f"/v1/jobs/{tick['job_id']}").json()
    assert job_info["name"] == "scores-2026-12-01"


def test_trigger_makes_a_manual_tick_the_ticker_starts_once(site: Site) -> None:
    # Due once a day, twelve hours from now: an hourly cron made this fail in a run that
    # crossed the hour, whose fire time the paused schedule recorded as skipped.
    hour = (datetime.now(UTC).hour + 12) % 24
    body = {"name": "hourly", "cron": f"0 {hour} * * *", "job": site.job(), "paused": True}
    assert site.call("POST", "/v1/schedules", json=body).status_code == 201
    claimed = site.call("POST", "/v1/schedules/hourly/trigger")
    assert claimed.status_code == 202 and claimed.json()["outcome"] == "claimed"
    for _ in range(2):
        site.tick(datetime.now(UTC))
    (tick,) = site.call("GET", "/v1/schedules/hourly/ticks").json()["data"]
    assert (tick["outcome"], tick["manual"]) == ("started", True)
    assert site.call("GET", f"/v1/jobs/{tick['job_id']}").json()["status"] == "queued"
    assert len(site.state.store.jobs()) == 1
    from test_service_http import metric

    text = site.call("GET", "/metrics").text
    assert metric(text, "thresher_ticks_total", schedule="acme/hourly", outcome="started") == 1
    assert "acme/hourly" not in site.call("GET", "/metrics", tenant="globex").text
