"""Table triggers in a real `thresher serve`: a Delta table gets new versions over time
(an Iceberg table new snapshots: appends, then one overwrite), and the server is
SIGKILLed in the middle and started again. Each version is taken once (by one set: one
run of versions), each appended row is scored by exactly one job, and the job after the
overwrite reads the whole table at its version, saying so in its manifest."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from iceberg_lake import lake

from .servers import Server, ServiceSite
from .test_service_triggers import query, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def rows(ids: range) -> pa.Table:
    x = pa.array([float(i) for i in ids], pa.float64())  # typed even when empty
    return pa.table({"id": pa.array(ids, pa.int64()), "x": x})


def site_for(root: Path, table_format: str = "delta", source: str = "") -> ServiceSite:
    """A server whose trigger `events` watches `watch` (a Delta table's folder, an
    Iceberg table's name), its jobs' source options `source` (TOML)."""
    site = ServiceSite(root)
    watch = str(site.shared / "lake" / "events") if table_format == "delta" else "db.events"
    job = '{ model = "double", id_column = "id"' + (f", source = {source}" if source else "")
    site.config.write_text(
        site.config.read_text()
        + f"""
[triggers.events]
watch = {json.dumps(watch)}
table = "{table_format}"
poll_seconds = 0.25
tenant = "acme"
job = {job} }}
"""
    )
    return site


def jobs(site: ServiceSite) -> list[tuple[str, str, dict[str, object]]]:
    found = query(site, "SELECT id, state, spec FROM thresher_jobs ORDER BY created_at")
    return [(str(i), str(s), json.loads(spec)) for i, s, spec in found]


def taken_versions(site: ServiceSite) -> list[int]:
    found = query(site, "SELECT size FROM thresher_trigger_files WHERE role = 'version'")
    return sorted(int(n) for (n,) in found)


def taken_ids(site: ServiceSite) -> list[str]:
    found = query(site, "SELECT version FROM thresher_trigger_files WHERE role = 'version'")
    return sorted(str(v) for (v,) in found)


def scored(site: ServiceSite, job_id: str) -> Counter[int]:
    ids: Counter[int] = Counter()
    for part in (site.data / "outputs" / job_id).glob("part-*.jsonl"):
        ids.update(json.loads(line)["id"] for line in part.read_text().splitlines())
    return ids


def ended(site: ServiceSite, versions: int) -> bool:
    """Whether `versions` versions are taken, every set has its job and every job ended.

    Read in the order the server writes them (a version with its set, then the set's
    job, then the set settled), so the jobs read last include every settled set's."""
    taken = len(taken_versions(site))
    sets = query(site, "SELECT outcome FROM thresher_trigger_sets")
    started = all(outcome != "claimed" for (outcome,) in sets)
    found = jobs(site)
    done = all(state in ("succeeded", "failed", "cancelled") for _, state, _ in found)
    return taken >= versions and bool(found) and done and started


def test_a_delta_table_watch_takes_each_version_once_through_a_restart(tmp_path: Path) -> None:
    site = site_for(tmp_path)
    table = site.shared / "lake" / "events"
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


def test_an_iceberg_table_watch_takes_each_snapshot_once_through_a_restart(
    tmp_path: Path,
) -> None:
    (tmp_path / "site" / "shared").mkdir(parents=True)
    props, catalog = lake(tmp_path / "site" / "shared")
    source = "{ options = { catalog = " + _toml_table(props) + " } }"
    site = site_for(tmp_path / "site", "iceberg", source)
    events = catalog.create_table("db.events", schema=rows(range(0)).schema)

    def write(ids: range, overwrite: bool = False) -> int:
        table = catalog.load_table("db.events")
        (table.overwrite if overwrite else table.append)(rows(ids))
        return int(catalog.load_table("db.events").current_snapshot().snapshot_id)

    snapshots = [write(range(0, 10))]  # before the server starts
    server = Server(site, {})
    try:
        wait_until(lambda: ended(site, 1), 60, "the first snapshot's job")
        snapshots += [write(range(10, 20)), write(range(20, 30))]
        wait_until(lambda: ended(site, 3), 60, "the next two snapshots' jobs")
        snapshots.append(write(range(30, 40)))  # while it dies
        server.kill()
    finally:
        server.stop()
    snapshots.append(write(range(40, 50)))  # while it is down
    server = Server(site, {})
    try:
        wait_until(lambda: ended(site, 5), 60, "the snapshots written while it was down")
        before = len(catalog.load_table("db.events").snapshots())
        last = write(range(100, 105), overwrite=True)  # a delete and an append
        snapshots += [s.snapshot_id for s in catalog.load_table("db.events").snapshots()[before:]]
        wait_until(lambda: ended(site, len(snapshots)), 60, "the overwrite's job")
    finally:
        server.stop()

    assert taken_ids(site) == sorted(str(s) for s in snapshots)  # each snapshot once
    found = jobs(site)
    assert {state for _, state, _ in found} == {"succeeded"}, found
    order = {snapshot: n for n, snapshot in enumerate(snapshots)}
    spans = sorted(
        (order[first], order[last_of])
        for _, _, spec in found
        for first, last_of in [spec["source"]["options"]["snapshots"]]
    )
    covered = [n for first, last_of in spans for n in range(first, last_of + 1)]
    assert covered == list(range(len(snapshots))), spans  # every snapshot in one job
    appended = Counter[int]()
    for job_id, _, spec in found:
        if spec["source"]["options"]["snapshots"][1] != last:
            appended += scored(site, job_id)
    assert appended == Counter(range(50)), appended  # every appended row scored once
    last_id = next(j for j, _, spec in found if spec["source"]["options"]["snapshots"][1] == last)
    assert scored(site, last_id) == Counter(range(100, 105))  # the whole table at the last
    manifest = query(site, f"SELECT manifest FROM thresher_jobs WHERE id = '{last_id}'")
    read = json.loads(manifest[0][0])["source_read"]
    assert read["rows"] == "whole table" and read["snapshot"] == last, read
    assert "did more than append" in read["why"], read
    assert events.name() == ("db", "events")


def _toml_table(values: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in values.items()) + " }"
