"""Table triggers in a real `thresher serve`: a Delta table gets new versions over time
(appends, then one overwrite), and the server is SIGKILLed in the middle and started
again. Each version is taken once (by one set: one run of versions), each appended row
is scored by exactly one job, and the job after the overwrite reads the whole table at
its version, saying so in its manifest."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from .servers import Server, ServiceSite
from .test_service_triggers import query, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def rows(ids: range) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "x": [float(i) for i in ids]})


def site_for(root: Path) -> tuple[ServiceSite, Path]:
    site = ServiceSite(root)
    table = site.shared / "lake" / "events"
    site.config.write_text(
        site.config.read_text()
        + f"""
[triggers.events]
watch = {json.dumps(str(table))}
table = "delta"
poll_seconds = 0.25
tenant = "acme"
job = {{ model = "double", id_column = "id" }}
"""
    )
    return site, table


def jobs(site: ServiceSite) -> list[tuple[str, str, dict[str, object]]]:
    found = query(site, "SELECT id, state, spec FROM thresher_jobs ORDER BY created_at")
    return [(str(i), str(s), json.loads(spec)) for i, s, spec in found]


def taken_versions(site: ServiceSite) -> list[int]:
    found = query(site, "SELECT size FROM thresher_trigger_files WHERE role = 'version'")
    return sorted(int(n) for (n,) in found)


def scored(site: ServiceSite, job_id: str) -> Counter[int]:
    ids: Counter[int] = Counter()
    for part in (site.data / "outputs" / job_id).glob("part-*.jsonl"):
        ids.update(json.loads(line)["id"] for line in part.read_text().splitlines())
    return ids


def ended(site: ServiceSite, versions: int) -> bool:
    """Whether `versions` versions are taken, every set has its job and every job ended."""
    found = jobs(site)
    done = all(state in ("succeeded", "failed", "cancelled") for _, state, _ in found)
    sets = query(site, "SELECT outcome FROM thresher_trigger_sets")
    started = all(outcome != "claimed" for (outcome,) in sets)
    return len(taken_versions(site)) >= versions and bool(found) and done and started


def test_a_delta_table_watch_takes_each_version_once_through_a_restart(tmp_path: Path) -> None:
    site, table = site_for(tmp_path)
    write_deltalake(str(table), rows(range(0, 10)))  # version 0, before the server starts
    server = Server(site, {})
    try:
        wait_until(lambda: ended(site, 1), 60, "version 0's job")
        write_deltalake(str(table), rows(range(10, 20)), mode="append")  # 1
        write_deltalake(str(table), rows(range(20, 30)), mode="append")  # 2
        wait_until(lambda: ended(site, 3), 60, "versions 1 and 2's jobs")
        write_deltalake(str(table), rows(range(30, 40)), mode="append")  # 3, while down
        server.kill()
    finally:
        server.stop()
    write_deltalake(str(table), rows(range(40, 50)), mode="append")  # 4, while down
    server = Server(site, {})
    try:
        wait_until(lambda: ended(site, 5), 60, "the versions written while it was down")
        write_deltalake(str(table), rows(range(100, 105)), mode="overwrite")  # 5
        wait_until(lambda: ended(site, 6), 60, "the overwrite's job")
    finally:
        server.stop()

    assert taken_versions(site) == [0, 1, 2, 3, 4, 5]  # each version once
    found = jobs(site)
    assert {state for _, state, _ in found} == {"succeeded"}, found
    spans = sorted(tuple(spec["source"]["options"]["versions"]) for _, _, spec in found)
    covered = [v for first, last in spans for v in range(first, last + 1)]
    assert covered == [0, 1, 2, 3, 4, 5], spans  # every version in exactly one job
    appended = Counter[int]()
    for job_id, _, spec in found:
        if spec["source"]["options"]["versions"][1] < 5:
            appended += scored(site, job_id)
    assert appended == Counter(range(50)), appended  # every appended row scored once
    last_id = next(j for j, _, spec in found if spec["source"]["options"]["versions"][1] == 5)
    assert scored(site, last_id) == Counter(range(100, 105))  # the whole table at 5
    manifest = query(site, f"SELECT manifest FROM thresher_jobs WHERE id = '{last_id}'")
    read = json.loads(manifest[0][0])["source_read"]
    assert read["rows"] == "whole table" and read["version"] == 5, read
    assert "WRITE Overwrite" in read["why"], read
    assert DeltaTable(table).version() == 5
