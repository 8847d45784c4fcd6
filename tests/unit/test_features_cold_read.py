"""The features source's read in a fresh process, as a job's worker makes it: it leaves
pandas unimported (pyarrow 26 imports pandas at a process's first `to_numpy` or `pa.array`
of an ndarray, 0.2 s of the first shard), and what it reads from Arrow's buffers instead
equals what `to_numpy` gives."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thresher.sources.asof import _integers


@pytest.mark.parametrize(
    "column",
    [
        pa.chunked_array([pa.array([3, None, -7], pa.int64()), pa.array([None, 9], pa.int64())]),
        pa.chunked_array([pa.array(range(10), pa.int32()).slice(4, 3)]),  # an offset
        pa.chunked_array([pa.array([1, 65_535, None, 2], pa.uint16())]),
        pa.chunked_array([pa.array([-128, 127], pa.int8()), pa.array([], pa.int8())]),
    ],
)
def test_integers_read_from_the_buffer_equal_to_numpy(column: pa.ChunkedArray) -> None:
    got = _integers(column)
    assert got.tolist() == column.drop_null().to_pylist()
    assert got.dtype.itemsize * 8 == column.type.bit_width


def test_reading_a_shard_in_a_fresh_process_leaves_pandas_unimported(tmp_path: Path) -> None:
    as_of = [dt.datetime(2024, 1, day) for day in (2, 5, 9)]
    pq.write_table(pa.table({"cid": [1, 2, 1], "as_of": as_of}), tmp_path / "e.parquet")
    times = [dt.datetime(2024, 1, day) for day in (1, 4, 3)]
    features = pa.table({"cid": [1, 1, 2], "t": times, "x": [0.5, 1.5, 2.5]})
    pq.write_table(features, tmp_path / "f.parquet")
    script = textwrap.dedent(
        f"""
        import sys
        from thresher.sources import open_source
        from thresher.spec import SourceSection

        table = {{"uri": "{tmp_path}/f.parquet", "key": "cid", "timestamp": "t"}}
        options = {{"timestamp": "as_of", "tables": [table]}}
        source = open_source(SourceSection.model_validate(
            {{"uri": "{tmp_path}/e.parquet", "format": "features", "options": options}}
        ))
        plan = source.plan()
        reader = source.reader(plan.schema, plan.schema.names)
        rows = [r for s in plan.shards for c in reader.read(s, 10) for r in c.table["x"]]
        print([r.as_py() for r in rows], "pandas" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["[0.5,", "2.5,", "1.5]", "False"]
