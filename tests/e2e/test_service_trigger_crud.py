"""Tenants' own dataset-arrival triggers over HTTP in a real `thresher serve`: one made
with `POST /v1/triggers` on a local folder takes each new file once; paused, it takes
none; resumed, it takes what came meanwhile; a new pattern counts from the next look;
deleted, it takes no more. Bad bodies answer 422 naming the field, a taken name or a
config trigger's change 409, and another tenant's trigger 404."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from .servers import Server, ServiceSite, wait_for_job
from .test_service_triggers import job_count, lines, query, wait_until

pytestmark = [pytest.mark.e2e]

CONFIG_TRIGGER = """
[triggers.operators]
watch = {watch}
pattern = "*.csv"
poll_seconds = 0.2
settle_seconds = 0.2
tenant = "acme"
job = {{ model = "double" }}
"""

FAST_POLLS = "[tenant_defaults]\ntrigger_min_poll_seconds = 0.1\n"


def put(folder: Path, name: str, data: bytes) -> None:
    (folder / f".{name}.part").write_bytes(data)
    (folder / f".{name}.part").rename(folder / name)  # renamed into place, whole


def job_files(site: ServiceSite) -> Counter[str]:
    specs = query(site, "SELECT spec FROM thresher_jobs")
    return Counter(Path(f).name for (spec,) in specs for f in json.loads(spec)["source"]["files"])


def test_a_tenants_trigger_over_http(tmp_path: Path) -> None:
    # Polls of 0.2 s keep the test short; a tenant's default shortest poll is 1 s.
    site = ServiceSite(tmp_path, settings=FAST_POLLS)
    inbox = site.shared / "inbox"
    inbox.mkdir()
    site.config.write_text(
        site.config.read_text() + CONFIG_TRIGGER.format(watch=json.dumps(str(site.shared / "ops")))
    )
    server = Server(site)
    try:
        acme, other = server.client(site.token("acme")), server.client(site.token("globex"))
        body = {
            "name": "inbox", "watch": str(inbox), "pattern": "*.jsonl", "tenant": "globex",
            "poll_seconds": 0.2, "settle_seconds": 0.3,
            "job": {"model": "double", "id_column": "id"},
        }  # fmt: skip
        made = acme.post("/v1/triggers", json=body)
        assert made.status_code == 201, made.text
        assert made.json()["declared"] == "tenant"
        assert any("pattern" in w for w in made.json()["warnings"])  # nothing there yet
        check_refusals(acme, other, body, tmp_path)

        put(inbox, "a.jsonl", lines(range(0, 10)))
        put(inbox, "b.jsonl", lines(range(10, 20)))
        wait_until(lambda: sum(job_files(site).values()) >= 2, 30, "a and b taken")
        check_results(site, acme, {"a.jsonl", "b.jsonl"}, 20)

        assert acme.post("/v1/triggers/inbox/pause").json()["paused"] is True
        put(inbox, "c.jsonl", lines(range(20, 30)))
        time.sleep(1.5)  # several polls
        assert "c.jsonl" not in job_files(site)
        assert acme.post("/v1/triggers/inbox/resume").json()["paused"] is False
        wait_until(lambda: "c.jsonl" in job_files(site), 30, "c taken after resume")

        changed = acme.patch("/v1/triggers/inbox", json={"pattern": "*.ndjson"})
        assert changed.status_code == 200 and changed.json()["pattern"] == "*.ndjson"
        put(inbox, "d.jsonl", lines(range(30, 40)))  # the old pattern: not taken
        put(inbox, "e.ndjson", lines(range(40, 50)))
        wait_until(lambda: "e.ndjson" in job_files(site), 30, "e taken by the new pattern")
        assert "d.jsonl" not in job_files(site)

        listed = {t["name"]: t["declared"] for t in acme.get("/v1/triggers").json()["data"]}
        assert listed == {"inbox": "tenant", "operators": "config"}
        assert acme.delete("/v1/triggers/inbox").status_code == 204
        jobs = job_count(site)
        put(inbox, "f.ndjson", lines(range(50, 60)))
        time.sleep(1.5)
        assert job_count(site) == jobs
        assert acme.get("/v1/triggers/inbox").status_code == 404
        acme.close()
        other.close()
    finally:
        server.stop()
    assert set(job_files(site).values()) == {1}  # every file in exactly one job


def check_refusals(
    acme: httpx.Client, other: httpx.Client, body: dict[str, object], tmp_path: Path
) -> None:
    outside = acme.post("/v1/triggers", json={**body, "name": "x", "watch": str(tmp_path)})
    assert outside.status_code == 422 and "watch" in outside.text, outside.text
    unknown = acme.post("/v1/triggers", json={**body, "name": "y", "job": {"model": "nope"}})
    assert unknown.status_code == 422 and "job.model" in unknown.text, unknown.text
    assert acme.post("/v1/triggers", json=body).status_code == 409  # the name is taken
    renamed = acme.patch("/v1/triggers/operators", json={"name": "mine"})
    assert renamed.status_code == 409  # the config's: only its operator changes it
    assert acme.post("/v1/triggers/operators/pause").status_code == 409
    assert other.get("/v1/triggers/inbox").status_code == 404  # acme's, whatever it said
    assert other.patch("/v1/triggers/inbox", json={"pattern": "*"}).status_code == 404
    assert other.delete("/v1/triggers/inbox").status_code == 404
    assert other.get("/v1/triggers").json()["data"] == []


def check_results(site: ServiceSite, client: httpx.Client, names: set[str], rows: int) -> None:
    """Every file named is in exactly one job, and every row in its results once."""
    files = job_files(site)
    assert set(files) == names and set(files.values()) == {1}, files
    ids: Counter[int] = Counter()
    for (job_id,) in query(site, "SELECT id FROM thresher_jobs"):
        assert wait_for_job(client, job_id)["status"] == "succeeded"
        for part in (site.data / "outputs" / job_id).glob("part-*.jsonl"):
            ids.update(json.loads(line)["id"] for line in part.read_text().splitlines())
    assert len(ids) == rows and set(ids.values()) == {1}
