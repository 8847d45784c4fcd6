"""NumPy <-> Arrow without pandas: the same values as pyarrow's own conversions."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from thresher.arrays import from_numpy, to_numpy

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint64", "float16", "float32", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_numbers_round_trip_with_their_dtype(dtype: str) -> None:
    values = np.arange(-5, 20).astype(dtype)[3:]  # a slice: offsets must be honoured
    array = from_numpy(values)
    assert array.type == pa.from_numpy_dtype(np.dtype(dtype))
    assert array.to_pylist() == values.tolist()
    sliced = array.slice(4, 7)
    back = to_numpy(sliced)
    assert back.dtype == np.dtype(dtype)
    assert back.tolist() == values[4:11].tolist()


def test_strided_input_is_copied_into_a_contiguous_array() -> None:
    values = np.arange(20.0)[::3]
    assert from_numpy(values).to_pylist() == values.tolist()


def test_everything_else_goes_through_pyarrow() -> None:
    assert to_numpy(pa.array([1.0, None, 3.0])).tolist()[::2] == [1.0, 3.0]
    assert np.isnan(to_numpy(pa.array([1.0, None]))[1])
    assert to_numpy(pa.array([True, False])).tolist() == [True, False]
    assert from_numpy(np.array([True, False])).type == pa.bool_()
    assert from_numpy(np.array(["a", "b"], dtype=object)).type == pa.string()
    assert from_numpy(np.arange(3, dtype=">i4")).to_pylist() == [0, 1, 2]  # byte-swapped
    assert len(to_numpy(pa.array([], pa.float64()))) == 0


def test_numbers_never_import_pandas() -> None:
    code = (
        "import sys, numpy as np, pyarrow.parquet as pq, io, pyarrow as pa\n"
        "from thresher.arrays import from_numpy, to_numpy\n"
        "sink = io.BytesIO()\n"
        "assert 'pandas' not in sys.modules\n"
        "a = from_numpy(np.arange(10.0)); to_numpy(a)\n"
        "pq.write_table(pa.table({'x': a}), sink)\n"
        "read = pq.ParquetFile(pa.BufferReader(sink.getvalue())).read()\n"
        "to_numpy(read.column('x').chunks[0])\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
