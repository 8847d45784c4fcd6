"""Numbers pass between Arrow and numpy without pandas: a `python` model's `numpy` batch
(pyarrow's values, as its own `to_numpy` gives them) and a job's profile.

pyarrow's `ChunkedArray.to_numpy` and `Array.to_numpy` import pandas when it is installed:
a third of a second, and more on a busy machine, in every worker of every job, for a model
and a profiler that never see a DataFrame."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa

from thresher.models.features import to_batch_format


def test_numpy_batch_holds_each_column_as_pyarrow_converts_it() -> None:
    chunked = pa.chunked_array([pa.array([1.5, 2.5]), pa.array([3.5])])
    table = pa.table(
        {
            "one_chunk": pa.array([1, 2, 3], pa.int32()),
            "chunks": chunked,
            "nulls": pa.array([1, None, 3]),
            "flags": pa.array([True, False, True]),
            "text": pa.array(["a", "b", None]),
        }
    )
    batch = to_batch_format(table, "numpy")
    assert list(batch) == table.column_names
    for name, column in zip(table.column_names, table.columns, strict=True):
        expected = column.to_numpy()
        assert batch[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(batch[name], expected)


def test_numpy_batch_of_no_rows() -> None:
    table = pa.table({"x": pa.array([], pa.float64())})
    batch = to_batch_format(table.slice(0, 0), "numpy")
    assert batch["x"].dtype == np.float64 and len(batch["x"]) == 0


def test_numpy_batch_of_numbers_does_not_import_pandas() -> None:
    code = (
        "import sys\n"
        "import numpy as np, pyarrow as pa\n"
        "from thresher.arrays import from_numpy\n"
        "from thresher.models.features import to_batch_format\n"
        "b = pa.chunked_array([from_numpy(np.array([1])), from_numpy(np.array([2]))])\n"
        "table = pa.table({'a': from_numpy(np.array([1.0, 2.0])), 'b': b})\n"
        "assert 'pandas' not in sys.modules\n"
        "batch = to_batch_format(table, 'numpy')\n"
        "assert batch['b'].tolist() == [1, 2]\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_profiling_numbers_and_class_labels_does_not_import_pandas() -> None:
    code = (
        "import sys\n"
        "import numpy as np, pyarrow as pa\n"
        "from thresher.arrays import from_numpy\n"
        "from thresher.profiles.profiler import ShardProfiler\n"
        "rng = np.random.default_rng(0)\n"
        "first, second = from_numpy(np.zeros(300, int)), from_numpy(np.ones(700, int))\n"
        "labels = pa.chunked_array([first, second])\n"
        "inputs = pa.table({'x': from_numpy(rng.random(1000))})\n"
        "profiler = ShardProfiler(0.5, 0)  # a sample of the rows, taken by position\n"
        "profiler.update(inputs, pa.table({'prediction': labels}), None)\n"
        "profile = profiler.profile()\n"
        "assert dict(profile.columns['prediction'].top()) == {'0': 300, '1': 700}\n"
        "assert 0 < profile.columns['x'].moments.count < 1000\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
