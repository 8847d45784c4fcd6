"""The `arrow` source and sink: Arrow IPC / Feather files planned into shards of whole
record batches from the footer, read memory-mapped, rows marked bad on the way in handed
on as bad records; and a job from a `.feather` file to `.arrow` parts, end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyarrow import feather

import thresher
from thresher.sources.arrow_ipc import BAD_ROW_COLUMN, ArrowSource


def write(path: Path, table: pa.Table, rows_per_batch: int) -> Path:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=rows_per_batch):
            writer.write_batch(batch)
    return path


def table(rows: int) -> pa.Table:
    return pa.table({"id": np.arange(rows), "x": np.arange(rows, dtype=np.float64) / 10})


def test_shards_are_runs_of_whole_batches_covering_every_row(tmp_path: Path) -> None:
    path = write(tmp_path / "in.arrow", table(10_000), 1_000)
    plan = ArrowSource(str(path), shard_bytes=1, min_shards=4).plan()
    assert [(s.start, s.stop) for s in plan.shards] == [(i, i + 1) for i in range(10)]
    reader = ArrowSource(str(path), shard_bytes=1 << 30).reader(plan.schema, ["id", "x"])
    [one] = ArrowSource(str(path), shard_bytes=1 << 30).plan().shards
    ids = [
        i
        for chunk in reader.read(one, rows_per_chunk=333)
        for i in chunk.table.column("id").to_pylist()
    ]
    assert ids == list(range(10_000))
    two = ArrowSource(str(path), shard_bytes=1, min_shards=2).plan().shards
    assert sum(s.stop - s.start for s in two) == 10


def test_rows_marked_bad_are_bad_records_at_their_row(tmp_path: Path) -> None:
    marked = table(5).append_column(
        BAD_ROW_COLUMN, pa.array([None, "column 'x': 'n/a' is not a number", None, None, None])
    )
    path = write(tmp_path / "in.arrow", marked, 5)
    source = ArrowSource(str(path), shard_bytes=1 << 30)
    plan = source.plan()
    assert BAD_ROW_COLUMN not in plan.schema.names
    [chunk] = source.reader(plan.schema, ["id", "x"]).read(plan.shards[0], 100)
    assert chunk.table.column("id").to_pylist() == [0, 2, 3, 4]
    assert chunk.positions.tolist() == [0, 2, 3, 4]
    [bad] = chunk.bad
    assert bad.row == 1 and bad.stage == "read" and "'n/a'" in bad.message


def test_a_feather_file_in_arrow_parts_out(tmp_path: Path) -> None:
    feather.write_feather(table(3_000), tmp_path / "in.feather")
    (tmp_path / "model.py").write_text(TWICE)
    result = thresher.run(
        {
            "source": {"uri": str(tmp_path / "in.feather"), "id_column": "id"},
            "model": {"kind": "python", "uri": f"{tmp_path / 'model.py'}:Twice"},
            "sink": {"uri": str(tmp_path / "out"), "format": "arrow"},
        }
    )
    parts = sorted((tmp_path / "out").glob("part-*.arrow"))
    assert parts
    out = result.to_arrow().sort_by("id")
    assert out.column("y").to_pylist() == pytest.approx([i / 5 for i in range(3_000)])

    # A path in: the predictions come back as Arrow, with the id
    scored = thresher.predict(tmp_path / "in.feather", lambda b: {"y": b["x"]}, id_column="id")
    assert scored.num_rows == 3_000 and "id" in scored.column_names


TWICE = """
class Twice:
    def predict(self, batch):
        return {"y": batch["x"].to_numpy() * 2}
"""
