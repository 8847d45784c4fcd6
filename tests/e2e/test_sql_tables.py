"""SQLite and DuckDB through the real CLI: a DuckDB query into a DuckDB table, a SQLite
query into Parquet parts. Every row once, the predictions a direct model call gives, and
the DuckDB table read back by duckdb itself."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from .support import FAST, FEATURES, ID, KEEP, Workspace, make_table

pytestmark = pytest.mark.e2e

ROWS = 3000
COLUMNS = ", ".join([ID, *FEATURES, KEEP])


def check_scores(got: pa.Table, rows: pa.Table, expect: dict[str, np.ndarray]) -> None:
    got = got.sort_by(ID)
    assert got.column(ID).to_pylist() == sorted(rows.column(ID).to_pylist())  # each once
    assert got.column(KEEP).to_pylist() == rows.column(KEEP).to_pylist()
    for name, want in expect.items():
        np.testing.assert_allclose(got.column(name).to_numpy(), want, rtol=1e-9, err_msg=name)


def run_job(workspace: Workspace, source: dict[str, Any], sink: dict[str, Any]) -> dict[str, Any]:
    table = make_table(ROWS, seed=3)
    trained = workspace.sklearn_skops(table)
    base = {"id_column": ID, "shard_rows": 700}
    spec = workspace.spec({"source": {**base, **source}, "model": trained.section, "sink": sink})
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    rows = table.sort_by(ID)
    return trained.expect(rows) | {"rows": rows}


def test_a_duckdb_query_into_a_duckdb_table(workspace: Workspace) -> None:
    customers = make_table(ROWS, seed=3)  # noqa: F841 (DuckDB reads the local by its name)
    with closing(duckdb.connect(str(workspace.root / "shop.duckdb"))) as conn:
        conn.execute("CREATE TABLE customers AS SELECT * FROM customers")
    source = {"uri": "duckdb:///shop.duckdb", "query": f"SELECT {COLUMNS} FROM customers"}
    sink = {"uri": "duckdb:///scores.duckdb?table=scores", "keep_columns": [KEEP]}

    expected = run_job(workspace, source, sink)

    rows = expected.pop("rows")
    with closing(duckdb.connect(str(workspace.root / "scores.duckdb"), read_only=True)) as conn:
        got = conn.sql(f'SELECT * FROM scores ORDER BY "{ID}"').to_arrow_table()
        ledger = conn.execute("SELECT count(*), sum(rows) FROM _thresher_parts").fetchone()
    check_scores(got, rows, expected)
    assert ledger is not None and ledger[0] > 1 and ledger[1] == ROWS  # several shards
    assert not list((workspace.root / "scores.duckdb.scores").rglob("*.parquet"))


def test_a_sqlite_query_into_parquet_parts(workspace: Workspace) -> None:
    table = make_table(ROWS, seed=3)
    with closing(sqlite3.connect(workspace.root / "shop.db")) as conn:
        conn.execute(f"CREATE TABLE customers ({ID} INTEGER, {', '.join(FEATURES)}, {KEEP} TEXT)")
        marks = ", ".join("?" * table.num_columns)
        rows = zip(*(c.to_pylist() for c in table.columns), strict=True)
        conn.executemany(f"INSERT INTO customers VALUES ({marks})", rows)
        conn.commit()
    source = {"uri": "sqlite:///shop.db", "query": f"SELECT {COLUMNS} FROM customers"}
    sink = {"uri": "out/", "format": "parquet", "keep_columns": [KEEP]}

    expected = run_job(workspace, source, sink)

    output = workspace.read_dir(workspace.root / "out", "parquet")
    assert len(list((workspace.root / "out").glob("part-*"))) > 1
    assert output.errors == [] and output.manifest is not None
    assert output.manifest["rows_out"] == ROWS
    check_scores(output.table, expected.pop("rows"), expected)
