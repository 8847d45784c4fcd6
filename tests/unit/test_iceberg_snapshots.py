"""An Iceberg table's snapshots as a trigger sees them (its main branch, in commit order)
and the source's `snapshots = [first, last]`: exactly the rows those snapshots appended,
or the whole table at `last`, with the reason, when one of them did more than append."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog

from iceberg_lake import lake
from thresher.errors import SpecError
from thresher.sources import open_source
from thresher.sources.base import READ_KEY, Plan
from thresher.sources.iceberg import SNAPSHOT_KEY
from thresher.spec import SourceSection
from thresher.testing import check_source
from thresher.triggers.tables import IcebergWatch, TableVersion, VersionRun


def batch(ids: range) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "x": pa.array([float(i) for i in ids], pa.float64())}
    )


def appended(catalog: Catalog, *runs: range) -> tuple[Any, list[int]]:
    """The table `db.t` with one append a range; its snapshot ids, oldest first."""
    table = catalog.create_table("db.t", schema=batch(range(0)).schema)
    for ids in runs:
        table.append(batch(ids))
    table = catalog.load_table("db.t")
    return table, [s.snapshot_id for s in table.snapshots()]


def source(props: dict[str, Any], **options: Any) -> Any:
    section = SourceSection(uri="db.t", format="iceberg", options={"catalog": props, **options})
    return open_source(section)


def ids(props: dict[str, Any], plan: Plan, **options: Any) -> list[int]:
    reader = source(props, **options).reader(plan.schema, plan.schema.names)
    return sorted(
        r["id"] for s in plan.shards for c in reader.read(s, 100) for r in c.table.to_pylist()
    )


def read_note(plan: Plan) -> dict[str, Any]:
    return dict(json.loads((plan.schema.metadata or {})[READ_KEY]))


def test_the_watch_sees_main_branch_snapshots_in_commit_order(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    watch, options = IcebergWatch(), {"catalog": props}
    assert watch.versions_after("db.t", None, options) == []  # no table yet
    assert watch.versions_after("nowhere.t", None, options) == []  # no namespace yet
    _, snaps = appended(catalog, range(0, 3), range(3, 5), range(5, 9))
    found = watch.versions_after("db.t", None, options)
    assert [v.id for v in found] == [str(s) for s in snaps]
    assert [v.number for v in found] == [1, 2, 3]  # sequence numbers
    assert watch.versions_after("db.t", TableVersion(2, str(snaps[1])), options) == [
        TableVersion(3, str(snaps[2]))
    ]
    assert watch.versions_after("db.t", TableVersion(3, str(snaps[2])), options) == []
    run = VersionRun("db.t", tuple(found[1:]))
    assert watch.source_options(run) == {"snapshots": [snaps[1], snaps[2]]}


def test_snapshots_read_only_the_rows_they_appended(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    table, snaps = appended(catalog, range(0, 3), range(3, 5), range(5, 9))
    plan = check_source(source(props, snapshots=[snaps[1], snaps[2]]))
    assert ids(props, plan, snapshots=[snaps[1], snaps[2]]) == list(range(3, 9))
    assert read_note(plan) == {"snapshots": [snaps[1], snaps[2]], "rows": "added", "files": 2}
    assert plan.schema.metadata[SNAPSHOT_KEY] == str(snaps[2]).encode()
    first = source(props, snapshots=[snaps[0], snaps[0]]).plan()
    assert ids(props, first) == list(range(0, 3))
    table.append(batch(range(100, 102)))  # after planning: the plan reads what it planned
    assert ids(props, plan, snapshots=[snaps[1], snaps[2]]) == list(range(3, 9))


def test_a_run_with_an_overwrite_reads_the_whole_table_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    props, catalog = lake(tmp_path)
    table, snaps = appended(catalog, range(0, 3))
    table.overwrite(batch(range(50, 52)))
    table.append(batch(range(60, 61)))
    last = catalog.load_table("db.t").current_snapshot().snapshot_id
    with caplog.at_level(logging.WARNING, "thresher.sources.iceberg"):
        plan = source(props, snapshots=[snaps[0], last]).plan()
    assert ids(props, plan) == [50, 51, 60]  # the whole table at `last`
    note = read_note(plan)
    assert note["rows"] == "whole table" and note["snapshot"] == last, note
    assert "did more than append" in note["why"] and "append)" not in note["why"], note
    assert "reading the whole table at snapshot" in caplog.text and note["why"] in caplog.text
    # an append-only run after it reads its own rows again
    assert ids(props, source(props, snapshots=[last, last]).plan()) == [60]


def test_a_first_outside_lasts_history_reads_the_whole_table(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    _, snaps = appended(catalog, range(0, 3), range(3, 5))
    plan = source(props, snapshots=[snaps[1], snaps[0]]).plan()  # reversed: not an ancestor
    assert ids(props, plan) == [0, 1, 2]
    assert "is not in snapshot" in read_note(plan)["why"]
    with pytest.raises(SpecError, match=r"source\.options\.snapshots: db\.t has no snapshot 7"):
        source(props, snapshots=[snaps[0], 7]).plan()
    with pytest.raises(ValueError, match="set one of snapshot_id, timestamp and snapshots"):
        source(props, snapshots=[snaps[0], snaps[1]], snapshot_id=snaps[0])
