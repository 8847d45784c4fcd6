"""The Delta source: a table at its latest or a pinned version, its partitions added back
to the rows, filters on them, and the version frozen in the plan."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from thresher.errors import SourceError
from thresher.sources import open_source
from thresher.sources.base import Plan
from thresher.sources.delta import VERSION_KEY
from thresher.spec import SourceSection


def rows(root: Path, plan: Plan, **options: object) -> list[dict[str, object]]:
    source = open_source(SourceSection(uri=str(root), format="delta", options=options))
    reader = source.reader(plan.schema, plan.schema.names)
    got = [row for s in plan.shards for c in reader.read(s, 100) for row in c.table.to_pylist()]
    return sorted(got, key=lambda row: row["id"])  # type: ignore[arg-type, return-value]


def make(root: Path) -> pa.Table:
    data = pa.table({"id": list(range(6)), "day": [1, 1, 2, 2, 3, 3], "x": [0.5] * 6})
    write_deltalake(str(root), data, partition_by=["day"])
    write_deltalake(str(root), pa.table({"id": [6], "day": [4], "x": [1.5]}), mode="append")
    return data


def plan_of(root: Path, **options: object) -> Plan:
    return open_source(SourceSection(uri=str(root), format="delta", options=options)).plan()


def test_latest_version_with_partition_values_typed(tmp_path: Path) -> None:
    make(tmp_path / "t")
    plan = plan_of(tmp_path / "t")
    assert plan.schema.metadata[VERSION_KEY] == b"1"
    got = rows(tmp_path / "t", plan)
    assert [r["id"] for r in got] == list(range(7))
    assert [r["day"] for r in got] == [1, 1, 2, 2, 3, 3, 4]


def test_pinned_version_and_partition_filter(tmp_path: Path) -> None:
    make(tmp_path / "t")
    assert [r["id"] for r in rows(tmp_path / "t", plan_of(tmp_path / "t", version=0))] == [
        *range(6)
    ]
    plan = plan_of(tmp_path / "t", partitions=[["day", "in", [2, 4]]])
    assert [r["id"] for r in rows(tmp_path / "t", plan)] == [2, 3, 6]
    with pytest.raises(SourceError, match="not a partition column"):
        plan_of(tmp_path / "t", partitions=[["x", "=", 1]])


def test_the_plan_reads_its_version_after_writers_moved_on(tmp_path: Path) -> None:
    make(tmp_path / "t")
    plan = Plan.from_json(plan_of(tmp_path / "t").to_json())  # as stored with the job
    write_deltalake(
        str(tmp_path / "t"), pa.table({"id": [9], "day": [1], "x": [0.0]}), mode="append"
    )
    DeltaTable(tmp_path / "t").delete("id = 0")
    assert [r["id"] for r in rows(tmp_path / "t", plan)] == list(range(7))


def test_a_timestamp_reads_the_version_current_then(tmp_path: Path) -> None:
    """Time travel: the version the table was at that moment, frozen in the plan; a moment
    before the table was made is an error (deltalake would read its first version)."""
    root = tmp_path / "t"
    write_deltalake(str(root), pa.table({"id": [0, 1], "day": [1, 1], "x": [0.5, 0.5]}))
    time.sleep(0.05)
    between = datetime.now(UTC)
    time.sleep(0.05)
    write_deltalake(str(root), pa.table({"id": [2], "day": [2], "x": [1.5]}), mode="append")
    plan = plan_of(root, timestamp=between.isoformat())
    assert plan.schema.metadata[VERSION_KEY] == b"0"
    assert [r["id"] for r in rows(root, plan)] == [0, 1]
    assert (
        plan_of(root, timestamp=datetime.now(UTC).isoformat()).schema.metadata[VERSION_KEY] == b"1"
    )
    with pytest.raises(
        SourceError, match=r"source\.options\.timestamp: .* no version as early as 2001"
    ):
        plan_of(root, timestamp="2001-01-01T00:00:00Z")


def test_no_table_and_both_pins_are_errors(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="cannot open the Delta table"):
        plan_of(tmp_path / "none")
    with pytest.raises(ValueError, match="one of version, timestamp"):
        SourceSection(
            uri="t", format="delta", options={"version": 1, "timestamp": "2026-01-01T00:00:00Z"}
        )


def test_versions_read_only_the_rows_they_appended(tmp_path: Path) -> None:
    root = tmp_path / "t"
    make(root)  # version 0: ids 0..5, version 1: id 6
    write_deltalake(str(root), pa.table({"id": [7, 8], "day": [4, 5], "x": [2.0, 2.0]}),
                    mode="append")  # fmt: skip
    plan = plan_of(root, versions=[1, 2])
    assert [r["id"] for r in rows(root, plan)] == [6, 7, 8]
    assert [r["day"] for r in rows(root, plan)] == [4, 4, 5]  # partitions from the log
    assert plan.read_note() == {"versions": [1, 2], "rows": "added", "files": 3}
    assert [r["id"] for r in rows(root, plan_of(root, versions=[0, 0]))] == [*range(6)]


def test_a_version_that_rewrote_files_reads_the_whole_table_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "t"
    make(root)
    DeltaTable(root).delete("id = 0")  # version 2 removes a file
    write_deltalake(str(root), pa.table({"id": [9], "day": [5], "x": [2.0]}), mode="append")
    with caplog.at_level("WARNING", logger="thresher.sources.delta"):
        plan = plan_of(root, versions=[2, 3])
    assert [r["id"] for r in rows(root, plan)] == [1, 2, 3, 4, 5, 6, 9]
    note = plan.read_note()
    assert note is not None and note["rows"] == "whole table" and note["version"] == 3
    assert "version 2 (DELETE) removed or rewrote" in note["why"]
    assert "reading the whole table at version 3" in caplog.text
    assert [r["id"] for r in rows(root, plan_of(root, versions=[3, 3]))] == [9]


def test_versions_are_checked() -> None:
    for bad in ([3, 2], [-1, 0]):
        with pytest.raises(ValueError, match="versions"):
            SourceSection(uri="t", format="delta", options={"versions": bad})
    with pytest.raises(ValueError, match="one of version, timestamp and versions"):
        SourceSection(uri="t", format="delta", options={"versions": [0, 1], "version": 1})


def test_versions_beyond_the_table_are_a_source_error(tmp_path: Path) -> None:
    make(tmp_path / "t")
    with pytest.raises(SourceError, match=r"source\.uri"):
        plan_of(tmp_path / "t", versions=[1, 5])
