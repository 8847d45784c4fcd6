"""The Iceberg source: a table at its current or a pinned snapshot, one shard a data file,
a row filter pushed down, and the snapshot frozen in the plan (writers, deletes and
schema changes after planning change nothing a resume reads)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.types import StringType

from iceberg_lake import lake
from thresher.errors import SourceError, SpecError
from thresher.sources import iceberg as iceberg_source
from thresher.sources import open_source
from thresher.sources.base import Plan
from thresher.sources.iceberg import SNAPSHOT_KEY
from thresher.spec import SourceSection, load_spec
from thresher.testing import check_source


def make(catalog: Catalog) -> Any:
    """Six rows partitioned by day (three files), then a seventh (a fourth file)."""
    data = pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "day": pa.array([1, 1, 2, 2, 3, 3], pa.int32()),
            "x": [0.5] * 6,
        }
    )
    table = catalog.create_table("db.c", schema=data.schema)
    with table.update_spec() as spec:
        spec.add_identity("day")
    table.append(data)
    table.append(
        pa.table({"id": pa.array([6], pa.int64()), "day": pa.array([4], pa.int32()), "x": [1.5]})
    )
    return table


def source(props: dict[str, Any], **options: Any) -> Any:
    section = SourceSection(uri="db.c", format="iceberg", options={"catalog": props, **options})
    return open_source(section)


def rows(props: dict[str, Any], plan: Plan, **options: Any) -> list[dict[str, Any]]:
    reader = source(props, **options).reader(plan.schema, plan.schema.names)
    got = [row for s in plan.shards for c in reader.read(s, 100) for row in c.table.to_pylist()]
    return sorted(got, key=lambda row: row["id"])


def test_current_snapshot_one_shard_a_file(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    table = make(catalog)
    plan = check_source(source(props))  # planned twice alike, read whole, picklable
    assert len(plan.shards) == 4 and all(s.rows for s in plan.shards)
    assert plan.schema.metadata[SNAPSHOT_KEY] == str(table.current_snapshot().snapshot_id).encode()
    got = rows(props, plan)
    assert [r["id"] for r in got] == list(range(7))
    assert [r["day"] for r in got] == [1, 1, 2, 2, 3, 3, 4]


def test_pinned_snapshot_by_id_and_by_time(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    table = make(catalog)
    first = table.snapshots()[0]
    plan = source(props, snapshot_id=first.snapshot_id).plan()
    assert [r["id"] for r in rows(props, plan)] == list(range(6))
    when = datetime.fromtimestamp(first.timestamp_ms / 1000, UTC)
    plan = source(props, timestamp=when).plan()
    assert [r["id"] for r in rows(props, plan)] == list(range(6))
    with pytest.raises(
        SpecError, match=re.escape("source.options.timestamp: db.c has no snapshot")
    ):
        source(props, timestamp=when - timedelta(days=1)).plan()
    with pytest.raises(
        SpecError, match=re.escape("source.options.snapshot_id: db.c has no snapshot 42")
    ):
        source(props, snapshot_id=42).plan()
    with pytest.raises(ValueError, match=re.escape("one of snapshot_id, timestamp and snapshots")):
        source(props, snapshot_id=1, timestamp=when)


def test_row_filter_prunes_files_and_rows(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    make(catalog)
    plan = check_source(source(props, row_filter="day >= 2 and id != 3"))
    assert len(plan.shards) == 3  # day 1's file is never read
    assert [r["id"] for r in rows(props, plan, row_filter="day >= 2 and id != 3")] == [2, 4, 5, 6]
    with pytest.raises(SpecError, match=re.escape("source.options.row_filter: 'colour = 1'")):
        source(props, row_filter="colour = 1").plan()
    with pytest.raises(SpecError, match=re.escape("source.options.row_filter: cannot parse")):
        source(props, row_filter="id = = 1").plan()
    with pytest.raises(
        SourceError, match=re.escape("no data files that source.options.row_filter keeps")
    ):
        source(props, row_filter="day > 10").plan()


def test_the_plan_reads_its_snapshot_after_writers_moved_on(tmp_path: Path) -> None:
    """Rows appended and deleted, a column renamed and one added, after planning: the
    stored plan still reads exactly what it planned."""
    props, catalog = lake(tmp_path)
    table = make(catalog)
    plan = Plan.from_json(source(props).plan().to_json())  # as stored with the job
    table.append(
        pa.table({"id": pa.array([9], pa.int64()), "day": pa.array([1], pa.int32()), "x": [0.0]})
    )
    table.delete("id = 0")
    with table.update_schema() as update:
        update.rename_column("x", "feature")
        update.add_column("extra", StringType())
    assert [r["id"] for r in rows(props, plan)] == list(range(7))
    assert {tuple(r) for r in rows(props, plan)} == {("id", "day", "x")}


def test_a_planned_snapshot_whose_files_are_gone_fails_naming_table_and_file(
    tmp_path: Path,
) -> None:
    props, catalog = lake(tmp_path)
    make(catalog)
    plan = source(props).plan()
    Path(plan.shards[0].path.removeprefix("file://")).unlink()
    reader = source(props).reader(plan.schema, plan.schema.names)
    with pytest.raises(
        SourceError, match=re.escape(f"db.c: cannot read data file {plan.shards[0].path}")
    ):
        list(reader.read(plan.shards[0], 100))


def test_a_dropped_table_reads_while_its_files_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropped (not purged) after planning: the planned metadata file still reads; once
    it is gone too, the shard fails naming the table and the file."""
    props, catalog = lake(tmp_path)
    make(catalog)
    plan = source(props).plan()
    catalog.drop_table("db.c")
    assert [r["id"] for r in rows(props, plan)] == list(range(7))
    monkeypatch.setattr(iceberg_source, "_OPENED", {})  # a new worker process, as it were
    for metadata in (tmp_path / "lake").rglob("*.metadata.json"):
        metadata.unlink()
    reader = source(props).reader(plan.schema, plan.schema.names)
    with pytest.raises(SourceError, match=re.escape("db.c: cannot open the planned snapshot")):
        list(reader.read(plan.shards[1], 100))


def test_missing_tables_namespaces_and_catalogs_are_spec_errors(tmp_path: Path) -> None:
    props, catalog = lake(tmp_path)
    catalog.create_table("db.empty", schema=pa.schema([("id", pa.int64())]))
    with pytest.raises(
        SpecError, match=re.escape("source.uri: no table db.c in the Iceberg sql catalog")
    ):
        source(props).plan()
    missing = {**props, "uri": f"sqlite:///{tmp_path / 'nothing.db'}"}
    with pytest.raises(SpecError, match=re.escape("source.options.catalog.uri: no SQLite catalog")):
        source(missing).plan()
    with pytest.raises(SpecError, match=re.escape("source.options.catalog: cannot open")):
        source({"type": "no-such-type"}).plan()
    empty = SourceSection(uri="db.empty", format="iceberg", options={"catalog": props})
    with pytest.raises(SourceError, match=re.escape("no snapshot yet")):
        open_source(empty).plan()


def test_a_catalog_that_does_not_answer_is_a_spec_error_of_source_and_sink() -> None:
    """A REST catalog on a port nothing listens on: the plan (source) and the job's start
    (sink) each stop with a spec error naming the field and the catalog, before any work."""
    import socket

    from thresher.sinks import open_sink
    from thresher.spec import SinkSection

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    down = {"type": "rest", "uri": f"http://127.0.0.1:{port}"}
    said = f"catalog: cannot open the Iceberg rest catalog http://127.0.0.1:{port}"
    with pytest.raises(SpecError, match=re.escape(f"source.options.{said}")):
        source(down).plan()
    sink = open_sink(SinkSection(uri="db.c", format="iceberg", options={"catalog": down}))
    with pytest.raises(SpecError, match=re.escape(f"sink.options.{said}")):
        sink.start("20260101-000000-000001", 1, resume=False)


def test_the_docs_spec_resolves_the_catalog_not_the_table_names(tmp_path: Path) -> None:
    page = Path(__file__).parents[2] / "docs" / "sources" / "iceberg.md"
    section = page.read_text(encoding="utf-8").split("# Apache Iceberg", 1)[1]
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "job.toml").write_text(toml + '[model]\nkind = "python"\nuri = "m.py:M"\n')
    spec = load_spec(tmp_path / "job.toml")
    assert (spec.source.uri, spec.sink.uri) == ("shop.customers", "shop.scores")
    for options in (spec.source.options, spec.sink.options):
        assert options["catalog"]["uri"] == f"sqlite:///{tmp_path / 'catalog.db'}"
        assert options["catalog"]["warehouse"] == str(tmp_path / "lake")
    assert spec.source.options["row_filter"] == "segment = 'retail' and age >= 18"
    assert spec.sink.options["partition_by"] == ["segment"]


def test_the_example_spec_is_valid() -> None:
    folder = Path(__file__).parents[2] / "examples" / "iceberg"
    spec = load_spec(folder / "job.toml")
    assert (spec.source.format, spec.sink.format) == ("iceberg", "iceberg")
    assert spec.source.options["catalog"]["uri"] == f"sqlite:///{folder / 'catalog.db'}"
    assert spec.sink.options["catalog"] == spec.source.options["catalog"]
