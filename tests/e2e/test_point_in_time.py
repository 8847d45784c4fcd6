"""The `features` source through the real CLI: customers scored on features joined
point-in-time from a Parquet folder and a CSV file, every customer once, the features
and predictions those of a brute-force join (latest row at or before the as-of time, the
last of a tie, never a later one)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from .support import FAST, FEATURES, ID, KEEP, Workspace, make_table

pytestmark = pytest.mark.e2e

ROWS = 3000
T0 = dt.datetime(2024, 1, 1)


def feature_rows(ids: np.ndarray, names: list[str], seed: int) -> pa.Table:
    """Five rows a customer: one on day 0 (so each has a value by its as-of day), four on
    days 0..59, some of them ties and some later than the customer's as-of."""
    rng = np.random.default_rng(seed)
    keys = np.repeat(ids, 5)
    days = rng.integers(0, 60, keys.size)
    days[::5] = 0
    data: dict[str, Any] = {ID: keys, "event_time": [T0 + dt.timedelta(days=int(d)) for d in days]}
    data |= {name: np.round(rng.normal(size=keys.size), 6) for name in names}
    return pa.table(data)


def brute_force(entities: pa.Table, rows: pa.Table, names: list[str]) -> dict[str, list[Any]]:
    latest: dict[tuple[int, dt.datetime], dict[str, Any]] = {}
    for row in rows.to_pylist():  # file order: a later row of a tie replaces an earlier
        latest[(row[ID], row["event_time"])] = row
    by_key: dict[int, list[dict[str, Any]]] = {}
    for (key, _), row in sorted(latest.items(), key=lambda item: item[0]):
        by_key.setdefault(key, []).append(row)
    got: dict[str, list[Any]] = {name: [] for name in names}
    for entity in entities.to_pylist():
        seen = [r for r in by_key[entity[ID]] if r["event_time"] <= entity["as_of"]]
        for name in names:
            got[name].append(seen[-1][name])
    return got


def test_customers_scored_on_point_in_time_features(workspace: Workspace) -> None:
    customers = make_table(ROWS, seed=3)
    trained = workspace.sklearn_skops(customers)
    rng = np.random.default_rng(5)
    as_of = [T0 + dt.timedelta(days=int(d)) for d in rng.integers(10, 40, ROWS)]
    entities = customers.select([ID, KEEP]).append_column("as_of", pa.array(as_of))
    (workspace.root / "data" / "spend").mkdir(parents=True)
    pq.write_table(entities, workspace.root / "data" / "entities.parquet", row_group_size=500)
    ids = customers.column(ID).to_numpy()
    spend = feature_rows(ids, FEATURES[:3], seed=6)
    half = spend.num_rows // 2
    pq.write_table(spend.slice(0, half), workspace.root / "data" / "spend" / "a.parquet")
    pq.write_table(spend.slice(half), workspace.root / "data" / "spend" / "b.parquet")
    visits = feature_rows(ids, FEATURES[3:], seed=7)
    visits = visits.take(np.argsort(visits.column(FEATURES[3]).to_numpy(), kind="stable"))
    pacsv.write_csv(visits, workspace.root / "data" / "visits.csv")

    def table(uri: str, names: list[str]) -> dict[str, Any]:
        return {"uri": uri, "key": ID, "timestamp": "event_time", "columns": names, "ttl": "90d"}

    options = {
        "timestamp": "as_of",
        "tables": [table("data/spend", FEATURES[:3]), table("data/visits.csv", FEATURES[3:])],
    }
    source = {"format": "features", "uri": "data/entities.parquet", "id_column": ID}
    spec = workspace.spec(
        {
            "source": {**source, "shard_bytes": 8192, "options": options},
            "model": trained.section,
            "sink": {"uri": "out/", "keep_columns": [KEEP, "f0", "f5"]},
        }
    )
    result = workspace.run("run", spec, *FAST)
    assert result.returncode == 0, result.stderr

    got = pa.concat_tables(
        pq.read_table(p) for p in sorted((workspace.root / "out").glob("part-*.parquet"))
    )
    assert got.column(ID).to_pylist() == entities.column(ID).to_pylist()  # each once, in order
    assert got.column(KEEP).equals(entities.column(KEEP))
    want = brute_force(entities, spend, FEATURES[:3])
    # CSV ties go to the greatest value: the rows are written in that order
    want |= brute_force(entities, visits, FEATURES[3:])
    assert got.column("f0").to_pylist() == want["f0"]
    assert got.column("f5").to_pylist() == want["f5"]
    joined = pa.table({name: want[name] for name in FEATURES})
    for name, expect in trained.expect(joined).items():
        np.testing.assert_allclose(got.column(name).to_numpy(), expect, rtol=1e-9, err_msg=name)


def test_a_missing_feature_column_exits_2(workspace: Workspace) -> None:
    entities = pa.table({ID: [1, 2], "as_of": [T0, T0]})
    pq.write_table(entities, workspace.root / "e.parquet")
    pq.write_table(feature_rows(np.array([1, 2]), ["x"], seed=1), workspace.root / "f.parquet")
    bad = {"uri": "f.parquet", "key": ID, "timestamp": "event_time", "columns": ["y"]}
    options = {"timestamp": "as_of", "tables": [bad]}
    spec = workspace.spec(
        {
            "source": {
                "format": "features",
                "uri": "e.parquet",
                "id_column": ID,
                "options": options,
            },
            "model": workspace.sklearn_skops(make_table(100)).section,
            "sink": {"uri": "out/"},
        }
    )
    result = workspace.run("run", spec)
    assert result.returncode == 2, result.stderr
    assert "source.options.tables[0].columns" in result.stderr and "f.parquet" in result.stderr
