"""Delta Lake through the real CLI: a Delta table in, a Delta table out, appended and then
overwritten, each in one commit at the job's end. Every row once, read back by deltalake
itself and, when its delta extension is at hand offline, by DuckDB; the history holds
one commit per job, naming it."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from .support import FAST, ID, KEEP, Workspace, make_table
from .test_sql_tables import check_scores

pytestmark = pytest.mark.e2e

ROWS = 3000


def test_a_delta_table_into_a_delta_table(workspace: Workspace) -> None:
    table = make_table(ROWS, seed=3)
    for start in range(0, ROWS, 1000):  # three files: three shards at least
        write_deltalake(str(workspace.root / "customers"), table.slice(start, 1000), mode="append")
    trained = workspace.sklearn_skops(table)
    source = {"uri": "customers", "format": "delta", "id_column": ID, "shard_bytes": 1024}
    sink = {"uri": "scores", "format": "delta", "mode": "append", "keep_columns": [KEEP]}
    spec = workspace.spec({"source": source, "model": trained.section, "sink": sink})
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 0, result.stderr

    out = DeltaTable(workspace.root / "scores")
    rows = table.sort_by(ID)
    check_scores(pa.table(out.to_pyarrow_table()), rows, trained.expect(rows))
    history = out.history()
    (commit,) = history  # the job's rows, appended in one commit at its end
    job_id = commit["thresher.job_id"]
    assert "table version: 0" in result.stdout
    status = workspace.run("status", job_id)
    assert "at version 0" in status.stdout, status.stdout

    again = workspace.run("run", spec, "--set", 'sink.mode="overwrite"', *FAST)
    assert again.returncode == 0, again.stderr
    out = DeltaTable(workspace.root / "scores")
    check_scores(pa.table(out.to_pyarrow_table()), rows, trained.expect(rows))
    newest = out.history(1)[0]
    assert newest["operation"] == "WRITE" and newest["thresher.job_id"] != job_id
    assert len(out.history()) == len(history) + 1  # the overwrite is one commit
    assert newest["thresher.model_sha256"] and newest["thresher.spec_sha256"]


def test_duckdb_reads_a_table_thresher_wrote(workspace: Workspace) -> None:
    """DuckDB's `delta_scan`, when its extension loads without the network."""
    conn = duckdb.connect()
    try:
        conn.execute("LOAD delta")
    except duckdb.Error:
        pytest.skip("DuckDB's delta extension is not installed (it is not fetched in tests)")
    table = make_table(ROWS, seed=3)
    table.to_pandas().to_parquet(workspace.root / "in.parquet")
    trained = workspace.sklearn_skops(table)
    source = {"uri": "in.parquet", "id_column": ID}
    sink = {"uri": "scores", "format": "delta"}
    spec = workspace.spec({"source": source, "model": trained.section, "sink": sink})
    assert workspace.run("run", spec, *FAST).returncode == 0
    got = conn.sql(f"SELECT {ID} FROM delta_scan('{workspace.root / 'scores'}')").fetchall()
    assert sorted(r[0] for r in got) == sorted(table.column(ID).to_pylist())


def test_merge_upserts_by_id_in_one_commit_a_job(workspace: Workspace) -> None:
    """Two jobs merge into one table: the second's ids replace their rows, the first's
    other rows stay; a third whose input repeats an id fails (exit 1), saying which, and
    leaves the table at the second's version."""
    first, second = make_table(ROWS, seed=3), make_table(ROWS, seed=4)
    half = 10_000 + ROWS // 2  # make_table's ids are 10,000 and up
    ids = pa.array(range(half, half + ROWS), pa.int64())
    second = second.set_column(second.schema.get_field_index(ID), ID, ids)  # half new ids
    trained = workspace.sklearn_skops(first)
    sink = {"uri": "scores", "format": "delta", "mode": "merge", "keep_columns": [KEEP]}
    for name, table in (("one", first), ("two", second)):
        write_deltalake(str(workspace.root / name), table)
        source = {"uri": name, "format": "delta", "id_column": ID, "shard_bytes": 1024}
        spec = workspace.spec({"source": source, "model": trained.section, "sink": sink})
        result = workspace.run("run", spec, *FAST)
        assert result.returncode == 0, result.stderr

    out = DeltaTable(workspace.root / "scores")
    kept = first.filter(pa.compute.less(first.column(ID), half))
    rows = pa.concat_tables([kept, second]).sort_by(ID)
    check_scores(pa.table(out.to_pyarrow_table()), rows, trained.expect(rows))
    history = out.history()
    assert [c["operation"] for c in history] == ["MERGE", "WRITE"]  # one commit a job
    assert len({c["thresher.job_id"] for c in history}) == 2

    twice = pa.concat_tables([second.slice(0, 10), second.slice(5, 10)])
    write_deltalake(str(workspace.root / "three"), twice)
    source = {"uri": "three", "format": "delta", "id_column": ID}
    spec = workspace.spec({"source": source, "model": trained.section, "sink": sink})
    failed = workspace.run("run", spec, *FAST)
    assert failed.returncode == 1, failed.stderr
    assert f"rows have {ID} =" in failed.stderr, failed.stderr
    status = workspace.run("status")
    assert "failed" in status.stdout and "running" not in status.stdout, status.stdout
    assert DeltaTable(workspace.root / "scores").version() == out.version()

    no_id = workspace.spec({"source": {"uri": "one", "format": "delta"},
                            "model": trained.section, "sink": sink}, "no_id.toml")  # fmt: skip
    refused = workspace.run("run", no_id)
    assert refused.returncode == 2 and "source.id_column" in refused.stderr, refused.stderr
