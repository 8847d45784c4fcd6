"""Every built-in source, sink and model adapter passes `thresher.testing`'s contract
checks, the same ones a third party runs against its own plug-in."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import skops.io
from sklearn.linear_model import LogisticRegression

from iceberg_lake import lake
from thresher.models import LoadContext, load_model
from thresher.sinks import open_sink
from thresher.sources import open_source
from thresher.spec import ModelSection, SinkSection, SourceSection
from thresher.testing import (
    ContractError,
    MemorySink,
    check_model,
    check_sink,
    check_source,
)

FEATURES = ("f0", "f1", "f2")


def table(rows: int = 3_000) -> pa.Table:
    rng = np.random.default_rng(7)
    columns = {"id": np.arange(rows, dtype=np.int64)}
    columns |= {f: rng.standard_normal(rows) for f in FEATURES}
    return pa.table(columns)


def write(data: pa.Table, path: Path) -> None:
    if path.suffix == ".parquet":
        pq.write_table(data, path, row_group_size=500)
    elif path.suffix == ".csv":
        pacsv.write_csv(data, path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in data.to_pylist()))


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_builtin_sources_keep_the_source_contract(tmp_path: Path, suffix: str) -> None:
    data = table()
    write(data, tmp_path / f"in{suffix}")
    section = SourceSection(uri=str(tmp_path / f"in{suffix}"), id_column="id", shard_bytes=8_192)
    plan = check_source(open_source(section, min_shards=2))
    assert len(plan.shards) > 1


@pytest.mark.parametrize("fmt", ["sqlite", "duckdb"])
def test_query_sources_keep_the_source_contract(tmp_path: Path, fmt: str) -> None:
    data = table()
    db = tmp_path / f"in.{fmt}"
    if fmt == "sqlite":
        with closing(sqlite3.connect(db)) as conn:
            conn.execute("CREATE TABLE t (id INTEGER, f0 REAL, f1 REAL, f2 REAL)")
            conn.executemany(
                "INSERT INTO t VALUES (?, ?, ?, ?)",
                zip(*(c.to_pylist() for c in data.columns), strict=True),
            )
            conn.commit()
    else:
        with closing(duckdb.connect(str(db))) as conn:
            conn.execute("CREATE TABLE t AS SELECT * FROM data")
    query = "SELECT id, f0, f1, f2 FROM t WHERE id % 7 <> 3"
    section = SourceSection(uri=f"{fmt}:///{db}", query=query, id_column="id", shard_rows=500)
    plan = check_source(open_source(section, min_shards=2))
    assert len(plan.shards) > 1
    assert plan.schema == pa.schema({"id": pa.int64(), **dict.fromkeys(FEATURES, pa.float64())})


def test_the_features_source_keeps_the_source_contract(tmp_path: Path) -> None:
    data = table()
    days = pa.array(np.arange(data.num_rows) % 30, pa.int32()).cast(pa.date32())
    write(data.append_column("as_of", days).select(["id", "as_of"]), tmp_path / "e.parquet")
    write(data.append_column("t", days), tmp_path / "f.parquet")
    options = {
        "timestamp": "as_of",
        "tables": [{"uri": str(tmp_path / "f.parquet"), "key": "id", "timestamp": "t"}],
    }
    section = SourceSection(
        uri=str(tmp_path / "e.parquet"),
        format="features",
        id_column="id",
        shard_bytes=8_192,
        options=options,
    )
    plan = check_source(open_source(section, min_shards=2))
    assert len(plan.shards) > 1
    assert plan.schema.names == ["id", "as_of", *FEATURES]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl", "sqlite", "duckdb"])
def test_builtin_sinks_keep_the_sink_contract(tmp_path: Path, fmt: str) -> None:
    tables = {"sqlite": "out.db", "duckdb": "out.duckdb"}
    uri = f"{fmt}:///{tmp_path / tables[fmt]}?table=scores" if fmt in tables else str(tmp_path)
    section = SinkSection(uri=uri, format=fmt)
    check_sink(lambda: open_sink(section))


def test_the_memory_sink_keeps_the_sink_contract() -> None:
    check_sink(lambda: MemorySink("memory://contract"))


def test_a_sink_that_publishes_at_start_fails_the_check(tmp_path: Path) -> None:
    """The check can fail: a sink whose commits are visible before finish is caught."""

    class Eager(MemorySink):
        def commit(self, output: object, errors: object) -> None:
            super().commit(output, errors)  # type: ignore[arg-type]
            parts = self.pending[(self.uri, self.job_id)]
            self.published[self.uri] = [parts[i] for i in sorted(parts)]

    with pytest.raises(ContractError, match="did not finish changed the published output"):
        check_sink(lambda: Eager("memory://eager"))


def test_builtin_tabular_models_keep_the_model_contract(tmp_path: Path) -> None:
    data = table(400)
    x = np.column_stack([data.column(f).to_numpy() for f in FEATURES])
    fitted = LogisticRegression().fit(x, x[:, 0] > 0)
    skops.io.dump(fitted, tmp_path / "model.skops")
    from skl2onnx import to_onnx

    onnx_model = to_onnx(fitted, x[:1].astype(np.float32), options={"zipmap": False})
    (tmp_path / "model.onnx").write_bytes(onnx_model.SerializeToString())
    (tmp_path / "scorer.py").write_text(
        "class Scorer:\n    def predict(self, batch):\n"
        "        return {'score': batch['f0'] * 2.0 + batch['f1']}\n"
    )
    context = LoadContext(features=FEATURES)
    features = data.select(list(FEATURES))
    sections = [
        ModelSection(
            kind="sklearn", uri=str(tmp_path / "model.skops"), outputs=["prediction", "proba"]
        ),
        ModelSection(
            kind="onnx", uri=str(tmp_path / "model.onnx"), outputs=["prediction", "proba"]
        ),
        ModelSection(kind="python", uri=f"{tmp_path / 'scorer.py'}:Scorer", batch_format="numpy"),
    ]
    for section in sections:
        check_model(load_model(section, context), features)


def test_a_model_that_depends_on_its_batch_fails_the_check() -> None:
    class BatchMean:
        def predict(self, batch: pa.Table) -> dict[str, np.ndarray]:
            values = batch.column("f0").to_numpy()
            return {"centred": values - values.mean()}

    with pytest.raises(ContractError, match="row 0 alone predicts"):
        check_model(BatchMean(), table(10).select(["f0"]))


def test_the_delta_sink_keeps_the_sink_contract(tmp_path: Path) -> None:
    """(The contract's jobs overwrite; test_delta_sink.py has append's own.)"""
    from deltalake import DeltaTable

    section = SinkSection(uri=str(tmp_path / "scores"), format="delta")
    check_sink(lambda: open_sink(section))
    # one commit per job that finished
    assert [c["operation"] for c in DeltaTable(tmp_path / "scores").history()] == ["WRITE"] * 2


def test_the_delta_source_keeps_the_source_contract(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    data = table().append_column("region", pa.array(["eu", "us", "ap"] * 1_000))
    write_deltalake(str(tmp_path / "t"), data, partition_by=["region"])
    section = SourceSection(uri=str(tmp_path / "t"), format="delta", id_column="id")
    plan = check_source(open_source(section, min_shards=2))
    assert len(plan.shards) > 1
    assert plan.schema.names == [*data.schema.names]


def test_the_iceberg_sink_keeps_the_sink_contract(tmp_path: Path) -> None:
    """(The contract's jobs overwrite; test_iceberg_sink.py has append's own.)"""
    properties, catalog = lake(tmp_path)
    section = SinkSection(uri="db.scores", format="iceberg", options={"catalog": properties})
    check_sink(lambda: open_sink(section))
    # one snapshot per job that finished
    snapshots = catalog.load_table("db.scores").snapshots()
    assert [s.summary.operation.value for s in snapshots] == ["append", "overwrite"]


def test_the_iceberg_source_keeps_the_source_contract(tmp_path: Path) -> None:
    properties, catalog = lake(tmp_path)
    data = table().append_column("region", pa.array(["eu", "us", "ap"] * 1_000))
    made = catalog.create_table("db.t", schema=data.schema)
    with made.update_spec() as spec:
        spec.add_identity("region")
    made.append(data)
    options = {"catalog": properties}
    section = SourceSection(uri="db.t", format="iceberg", id_column="id", options=options)
    plan = check_source(open_source(section, min_shards=2))
    assert len(plan.shards) == 3  # a shard a data file: one a region
    assert plan.schema.names == [*data.schema.names]
