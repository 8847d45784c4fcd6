"""Apache Iceberg through the real CLI: an Iceberg table in, an Iceberg table out (a SQLite
catalog beside the spec, named by relative paths), appended and then overwritten, each in
one snapshot at the job's end. Every row once, read back by pyiceberg and by DuckDB reading
the snapshot's data files; each job's snapshot names it."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.types import StringType

from .support import FAST, ID, KEEP, THRESHER, Workspace, latest_job, make_table, store_env
from .test_sql_tables import check_scores

pytestmark = pytest.mark.e2e

ROWS = 3000
# As a spec names it, relative to the spec's folder.
CATALOG = {"type": "sql", "uri": "sqlite:///catalog.db", "warehouse": "lake"}


def catalog(root: Path) -> Any:
    """The workspace's catalog, as pyiceberg opens it (absolute paths)."""
    return load_catalog(
        "default", type="sql", uri=f"sqlite:///{root / 'catalog.db'}", warehouse=str(root / "lake")
    )


def data_files(table: Any) -> list[str]:
    return [str(task.file.file_path) for task in table.scan().plan_files()]


def test_an_iceberg_table_into_an_iceberg_table(workspace: Workspace) -> None:
    table = make_table(ROWS, seed=3)
    lake = catalog(workspace.root)
    lake.create_namespace("shop")
    customers = lake.create_table("shop.customers", schema=table.schema)
    for start in range(0, ROWS, 1000):  # three snapshots, three files: three shards
        customers.append(table.slice(start, 1000))
    trained = workspace.sklearn_skops(table)
    options = {"catalog": CATALOG}
    source = {"uri": "shop.customers", "format": "iceberg", "id_column": ID, "options": options}
    sink = {
        "uri": "shop.scores",
        "format": "iceberg",
        "mode": "append",
        "keep_columns": [KEEP],
        "options": {**options, "partition_by": [KEEP]},
    }
    spec = workspace.spec({"source": source, "model": trained.section, "sink": sink})
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr

    out = catalog(workspace.root).load_table("shop.scores")
    rows = table.sort_by(ID)
    check_scores(out.scan().to_arrow(), rows, trained.expect(rows))
    (snapshot,) = out.snapshots()  # the job's rows, appended in one snapshot at its end
    job_id = snapshot.summary["thresher.job_id"]
    assert snapshot.summary["thresher.commit"] == f"thresher/{job_id}/publish"
    assert [f.name for f in out.spec().fields] == [KEEP]
    assert f"table snapshot: {snapshot.snapshot_id}" in result.stdout
    status = workspace.run("status", job_id)
    assert f"at snapshot {snapshot.snapshot_id}" in status.stdout, status.stdout

    again = workspace.run("run", spec, "--set", 'sink.mode="overwrite"', *FAST)
    assert again.returncode == 0, again.stderr
    out = catalog(workspace.root).load_table("shop.scores")
    got = out.scan().to_arrow()
    check_scores(got, rows, trained.expect(rows))
    assert len(out.snapshots()) == 2  # the overwrite is one snapshot
    newest = out.current_snapshot()
    assert newest.summary.operation.value == "overwrite"
    assert newest.summary["thresher.job_id"] != job_id
    assert newest.summary["thresher.model_sha256"] and newest.summary["thresher.spec_sha256"]
    # The previous snapshot still reads whole: readers of it were never disturbed.
    assert out.scan(snapshot_id=snapshot.snapshot_id).to_arrow().num_rows == ROWS

    files = data_files(out)
    seen = duckdb.sql(f"SELECT {ID}, prediction FROM read_parquet({files!r})").to_arrow_table()
    assert sorted(seen.column(ID).to_pylist()) == sorted(table.column(ID).to_pylist())
    want = pa.table({ID: got.column(ID), "p": got.column("prediction")}).sort_by(ID)
    assert seen.sort_by(ID).column("prediction").to_pylist() == want.column("p").to_pylist()


def test_a_pinned_snapshot_with_a_row_filter(workspace: Workspace) -> None:
    """Time travel by snapshot id, the filter pushed down to files and rows; the Python
    API runs the same spec (relative paths resolved against `base`)."""
    import thresher

    table = make_table(ROWS, seed=4)
    lake = catalog(workspace.root)
    lake.create_namespace("shop")
    customers = lake.create_table("shop.customers", schema=table.schema)
    customers.append(table.slice(0, 2000))
    pinned = customers.current_snapshot().snapshot_id
    customers.append(table.slice(2000))  # after the pin: never read
    trained = workspace.sklearn_skops(table)
    options = {"catalog": CATALOG, "snapshot_id": pinned, "row_filter": f"{KEEP} = 'premium'"}
    spec = workspace.spec(
        {
            "source": {
                "uri": "shop.customers",
                "format": "iceberg",
                "id_column": ID,
                "options": options,
            },
            "model": trained.section,
            "sink": {
                "uri": "shop.premium",
                "format": "iceberg",
                "keep_columns": [KEEP],
                "options": {"catalog": CATALOG},
            },
        }
    )
    store = f"sqlite:///{workspace.root / 'store.db'}"
    result = thresher.run(thresher.load_spec(spec), store=store, progress=False)
    first = table.slice(0, 2000)
    wanted = sorted(r[ID] for r in first.to_pylist() if r[KEEP] == "premium")
    assert sorted(result.to_arrow().column(ID).to_pylist()) == wanted  # read back by the sink
    out = catalog(workspace.root).load_table("shop.premium").scan().to_arrow()
    assert sorted(out.column(ID).to_pylist()) == wanted


def test_bad_input_is_a_spec_error_naming_the_field(workspace: Workspace) -> None:
    table = make_table(200, seed=5)
    lake = catalog(workspace.root)
    lake.create_namespace("shop")
    lake.create_table("shop.customers", schema=table.schema).append(table)
    trained = workspace.sklearn_skops(table)
    base = {"uri": "shop.customers", "format": "iceberg", "id_column": ID}
    sink = {"uri": "shop.scores", "format": "iceberg", "options": {"catalog": CATALOG}}

    def run(source_options: dict[str, Any], **sink_changes: Any) -> Any:
        source = {**base, "options": {"catalog": CATALOG, **source_options}}
        spec = workspace.spec(
            {"source": source, "model": trained.section, "sink": {**sink, **sink_changes}}
        )
        return workspace.run("run", spec, *FAST)

    cases = [
        (run({}, uri="nowhere.scores"), "sink.uri: no namespace nowhere"),
        (run({"row_filter": "colour = 'red'"}), "source.options.row_filter"),
        (run({"snapshot_id": 42}), "source.options.snapshot_id"),
        (run({"catalog": {**CATALOG, "uri": "sqlite:///missing.db"}}), "source.options.catalog"),
    ]
    missing = workspace.spec(
        {
            "source": {**base, "uri": "shop.nothing", "options": {"catalog": CATALOG}},
            "model": trained.section,
            "sink": sink,
        }
    )
    cases.append((workspace.run("run", missing, *FAST), "source.uri: no table shop.nothing"))
    for result, said in cases:
        assert result.returncode == 2, result.stderr
        assert said in result.stderr, result.stderr
    assert not catalog(workspace.root).table_exists("shop.scores")  # nothing was written


def test_a_resume_reads_the_planned_snapshot_after_the_table_changed(
    workspace: Workspace,
) -> None:
    """Killed mid-job; meanwhile rows are appended to the source table, a column renamed
    and one added: `thresher resume` reads exactly the snapshot the plan froze."""
    root = workspace.root
    table = make_table(ROWS, seed=6)
    lake = catalog(root)
    lake.create_namespace("shop")
    customers = lake.create_table("shop.customers", schema=table.schema)
    for start in range(0, ROWS, 1000):
        customers.append(table.slice(start, 1000))
    trained = workspace.sklearn_skops(table)
    options = {"catalog": CATALOG}
    source = {"uri": "shop.customers", "format": "iceberg", "id_column": ID, "options": options}
    sink = {"uri": "shop.scores", "format": "iceberg", "keep_columns": [KEEP], "options": options}
    spec = workspace.spec({"source": source, "model": trained.section, "sink": sink})
    killed = subprocess.run(
        [str(THRESHER), "run", str(spec), *FAST],
        cwd=root,
        env=store_env(root, "after_commit:1"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not catalog(root).table_exists("shop.scores")  # nothing published
    customers.append(make_table(500, seed=7))
    with customers.update_schema() as update:
        update.rename_column("f0", "first_feature")
        update.add_column("note", StringType())
    job_id = latest_job(root)
    assert job_id is not None
    resumed = subprocess.run(
        [str(THRESHER), "resume", job_id],
        cwd=root,
        env=store_env(root),
        capture_output=True,
        text=True,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    out = catalog(root).load_table("shop.scores")
    rows = table.sort_by(ID)
    check_scores(out.scan().to_arrow(), rows, trained.expect(rows))
    (snapshot,) = out.snapshots()
    assert snapshot.summary["thresher.job_id"] == job_id
