"""The Python API over tables (`thresher.run`), as a notebook user calls it: a DataFrame
scored into a Delta table and merged into it again by id, into a DuckDB table, and a
job spec that reads the Delta table back at a pinned version and a SQLite query."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from sklearn.linear_model import LogisticRegression

import thresher


@pytest.fixture
def scored(tmp_path: Path) -> tuple[pd.DataFrame, LogisticRegression]:
    rng = np.random.default_rng(0)
    data = pd.DataFrame(rng.normal(size=(1_000, 3)), columns=["a", "b", "c"])
    data.insert(0, "id", np.arange(1_000))
    model = LogisticRegression().fit(data[["a", "b", "c"]], (data.a > 0).astype(int))
    return data, model


def test_a_dataframe_into_a_delta_table_then_merged_by_id(
    tmp_path: Path, scored: tuple[pd.DataFrame, LogisticRegression]
) -> None:
    data, model = scored
    table = str(tmp_path / "scores")
    options = {"columns": ["a", "b", "c"], "id_column": "id", "workers": 1, "progress": False}
    first = thresher.run(data=data, model=model, sink={"uri": table, "format": "delta"}, **options)
    assert first.manifest["delta_version"] == 0
    again = data.iloc[900:].assign(a=-5.0)  # the last 100 ids rescored: class 0 now
    merge = {"uri": table, "format": "delta", "mode": "merge"}
    second = thresher.run(data=again, model=model, sink=merge, **options)
    assert second.manifest["delta_version"] == 1
    rows = DeltaTable(table).to_pandas().set_index("id").sort_index()
    assert len(rows) == 1_000  # each id once
    want = model.predict(data[["a", "b", "c"]])
    want[900:] = 0
    assert np.array_equal(rows["prediction"].to_numpy(), want)


def test_a_dataframe_into_a_duckdb_table(
    tmp_path: Path, scored: tuple[pd.DataFrame, LogisticRegression]
) -> None:
    data, model = scored
    database = tmp_path / "shop.duckdb"
    sink = f"duckdb:///{database}?table=scores"
    thresher.run(data=data, model=model, sink=sink, columns=["a", "b", "c"], progress=False)
    with closing(duckdb.connect(str(database), read_only=True)) as conn:
        (count,) = conn.execute("SELECT count(*) FROM scores").fetchone() or (None,)
    assert count == 1_000


def test_specs_reading_a_pinned_delta_version_and_a_sqlite_query(
    tmp_path: Path, scored: tuple[pd.DataFrame, LogisticRegression]
) -> None:
    import skops.io as sio

    data, model = scored
    sio.dump(model, tmp_path / "model.skops")
    table = str(tmp_path / "inputs")
    from deltalake import write_deltalake

    write_deltalake(table, data.iloc[:600])
    write_deltalake(table, data.iloc[600:], mode="append")  # version 1: not read
    with closing(sqlite3.connect(tmp_path / "in.db")) as db:
        data.to_sql("customers", db, index=False)
    model_section = {"kind": "sklearn", "uri": str(tmp_path / "model.skops")}
    sources = {
        "delta": {"uri": table, "format": "delta", "options": {"version": 0}},
        "sqlite": {
            "uri": f"sqlite:///{tmp_path / 'in.db'}",
            "query": "SELECT * FROM customers WHERE id < 600",
            "key_column": "id",
        },
    }
    for name, source in sources.items():
        spec = {
            "source": {**source, "id_column": "id", "columns": ["a", "b", "c"]},
            "model": model_section,
            "sink": {"uri": str(tmp_path / f"out-{name}")},
            "run": {"workers": 1},
        }
        result = thresher.run(spec, progress=False)
        out = pq.read_table(tmp_path / f"out-{name}").to_pandas().sort_values("id")
        assert out["id"].tolist() == list(range(600)), name
        assert np.array_equal(out["prediction"], model.predict(data[["a", "b", "c"]][:600]))
        assert result.manifest["rows_out"] == 600
