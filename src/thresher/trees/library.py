"""A tree ensemble as a native library: tl2cgen's C code for the trees, QuickScorer
tables beside it, a driver of ours that feeds them rows, a C compiler to build it, ctypes
to run it.

tl2cgen writes each tree as nested if/else code behind one function,
`predict(union Entry* row, int pred_margin, <leaf type>* result)`. tl2cgen's own runtime
calls it from a `DMatrix`, which copies every batch once more, and only from a dense
row-major matrix, which from Arrow's columns is a copy too. The driver below reads the
batch's column buffers in place. It scores them with the QuickScorer kernels
(`quickscorer.py`: several rows at a time in vector registers, 2-5x faster than the
if/else code) when the model and the CPU allow, else row by row with tl2cgen's `predict`.
A worker that runs the library imports neither tl2cgen nor treelite (0.4 s and ~50 MiB).

Threads: ctypes releases the GIL while the driver runs, so a batch is split between a
few Python threads, each running the driver on its own rows.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import itertools
import os
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from thresher.arrays import to_numpy
from thresher.models.features import to_matrix
from thresher.native import declared
from thresher.trees import quickscorer

Frontend = Literal["lightgbm", "xgboost"]
# Rows below this many per thread are not worth a thread's hand-off.
MIN_ROWS_PER_THREAD = 1_024

# Element (row i, feature j) is columns[j][i * stride]: stride 1 for Arrow's column
# buffers, the width for a row-major matrix. NaN is a missing value, as tl2cgen's
# runtime reads it; outputs are written as doubles, N_TARGET * MAX_N_CLASS per row.
DRIVER = r"""
#include "header.h"

int32_t thresher_outputs(void) { return N_TARGET * MAX_N_CLASS; }

/* quickscorer.c: scores all rows and returns 1, or 0 if it has no kernel for this model
 * or CPU; thresher_lanes() says how many rows its kernel scores at a time (0: none). */
int thresher_quickscore(const double* const* columns, int64_t stride, int64_t rows,
                        double* out);
int32_t thresher_lanes(void);

void thresher_predict(const double* const* columns, int64_t stride, int64_t rows,
                      double* out) {
  if (thresher_quickscore(columns, stride, rows, out)) return;
  const int32_t width = get_num_feature();
  const int32_t outputs = N_TARGET * MAX_N_CLASS;
  union Entry* row = malloc(sizeof(union Entry) * (width > 0 ? width : 1));
  THRESHER_LEAF result[N_TARGET * MAX_N_CLASS];
  for (int64_t i = 0; i < rows; ++i) {
    for (int32_t j = 0; j < width; ++j) {
      const double value = columns[j][i * stride];
      if (isnan(value)) {
        row[j].missing = -1;
      } else {
        row[j].fvalue = (THRESHER_VALUE)value;
      }
    }
    for (int32_t k = 0; k < outputs; ++k) result[k] = 0;
    predict(row, 0, result);
    for (int32_t k = 0; k < outputs; ++k) out[i * outputs + k] = (double)result[k];
  }
  free(row);
}

/* thresher_predict over columns (stride 1) a block of rows at a time, each block's values
 * read through in order just before it is scored: by `reduce` (thresher.moments' pass,
 * each column's Σx, Σx², min and max added into `sums`, four doubles a column) for a
 * worker that profiles, else by a load of each cache line (`reduce` NULL). QuickScorer
 * reads 16 rows of every feature at a time, 30 streams at once that the hardware
 * prefetcher follows badly; a block read column by column first is in the core's cache
 * when scored, which made the scoring itself faster by more than the read costs. */
#define THRESHER_BLOCK 1024
static double thresher_touch(const double* values, int64_t count) {
  double a = 0.0, b = 0.0;  /* two chains: each load's add need not wait on the last */
  int64_t k = 0;
  for (; k + 16 <= count; k += 16) a += values[k], b += values[k + 8];
  for (; k < count; k += 8) a += values[k];
  return a + b;
}

void thresher_predict_blocked(const double* const* columns, int64_t rows, double* out,
                              void (*reduce)(const double*, int64_t, double*),
                              double* sums) {
  const int32_t width = get_num_feature();
  const int32_t outputs = N_TARGET * MAX_N_CLASS;
  const double** block = malloc(sizeof(double*) * (width > 0 ? width : 1));
  double touched = 0.0;
  for (int64_t start = 0; start < rows; start += THRESHER_BLOCK) {
    const int64_t count = rows - start < THRESHER_BLOCK ? rows - start : THRESHER_BLOCK;
    for (int32_t j = 0; j < width; ++j) {
      block[j] = columns[j] + start;
      if (reduce != NULL) {
        reduce(block[j], count, sums + 4 * j);
      } else {
        touched += thresher_touch(block[j], count);
      }
    }
    thresher_predict(block, 1, count, out + start * outputs);
  }
  volatile double kept = touched;  /* so the loads are not optimised away */
  (void)kept;
  free((void*)block);
}
"""
# The code that writes and drives the library, for its cache key: a thresher that writes
# it differently builds it anew.
WRITERS = b"".join(Path(module).read_bytes() for module in (__file__, quickscorer.__file__))
# How tl2cgen's header names the types the driver needs.
_VALUE_TYPE = re.compile(r"^\s*(float|double) fvalue;", re.MULTILINE)
_LEAF_TYPE = re.compile(r"void predict\(union Entry\* \w+, int \w+, (float|double)\* \w+\);")


class BuildError(Exception):
    """Why the library could not be built: one line, for a warning or an error."""


def build(path: Path, frontend: Frontend, library: Path, toolchain: str) -> None:
    """Compile the booster file at `path` into the shared library `library`."""
    try:
        import tl2cgen
        import treelite
    except ImportError:
        raise BuildError("tl2cgen is not installed (pip install 'thresher[boosters]')") from None
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="build-", dir=library.parent) as folder:
        source = Path(folder)
        try:
            with _quiet():
                model = _load(treelite, path, frontend)
                tl2cgen.generate_c_code(model, str(source), params={"parallel_comp": cores})
                trees = quickscorer.from_treelite(model)
        except Exception as exc:  # treelite cannot read the file, say
            raise BuildError(first_line(exc)) from None
        (source / "quickscorer.c").write_text(quickscorer.source(trees))
        header = (source / "header.h").read_text()
        value, leaf = _VALUE_TYPE.search(header), _LEAF_TYPE.search(header)
        if value is None or leaf is None:
            raise BuildError("tl2cgen wrote code this thresher does not know (header.h)")
        (source / "thresher_driver.c").write_text(DRIVER)
        types = [f"-DTHRESHER_VALUE={value.group(1)}", f"-DTHRESHER_LEAF={leaf.group(1)}"]
        _compile(toolchain, sorted(source.glob("*.c")), library, types, cores)


def _load(treelite: Any, path: Path, frontend: Frontend) -> Any:
    if frontend == "lightgbm":
        return treelite.frontend.load_lightgbm_model(str(path))
    # Newer XGBoost files carry fields (categories, say) this treelite does not know; the
    # probe at load still catches a model they would change.
    return treelite.frontend.load_xgboost_model(str(path), allow_unknown_field=True)


def _compile(
    toolchain: str, sources: list[Path], library: Path, types: list[str], cores: int
) -> None:
    """Each translation unit in its own compiler process (a few at a time), then link."""
    objects = [source.with_suffix(".o") for source in sources]
    commands = [
        [toolchain, "-c", "-O3", "-std=gnu11", "-fPIC", *types, "-o", str(obj), str(source)]
        for source, obj in zip(sources, objects, strict=True)
    ]
    for start in range(0, len(commands), cores):
        running = [_start(command) for command in commands[start : start + cores]]
        for process in running:
            _finish(process)
    link = [toolchain, "-shared", "-o", str(library), *map(str, objects), "-lm"]
    _finish(_start(link))


def _start(command: list[str]) -> tuple[str, subprocess.Popen[str]]:
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except OSError as exc:  # the compiler went missing, or cannot be run
        raise BuildError(f"{command[0]} cannot run: {exc.strerror or exc}") from None
    return command[0], process


def _finish(started: tuple[str, subprocess.Popen[str]]) -> None:
    compiler, process = started
    output, _ = process.communicate()
    if process.returncode != 0:
        lines = [line for line in output.splitlines() if line.strip()]
        reason = next((line for line in lines if "error" in line), lines[0] if lines else "")
        raise BuildError(f"{compiler} failed: {reason.strip()}")


class TreeLibrary:
    """A built library, loaded: `predict(table)` gives one value per row, or one column
    per output (class) when the model has several."""

    def __init__(self, library: Path, threads: int) -> None:
        columns, rows, address = ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.c_void_p
        try:
            handle = ctypes.CDLL(str(library))
            # (columns, stride, rows, out), and (columns, rows, out, reduce, sums)
            self._predict = declared(handle.thresher_predict, columns, rows, rows, address)
            self._blocked = declared(
                handle.thresher_predict_blocked, columns, rows, address, address, address
            )
            self.width = int(handle.get_num_feature())
            self.outputs = int(handle.thresher_outputs())
            # Rows the QuickScorer kernel scores at a time on this CPU; 0: the if/else code.
            self.lanes = int(handle.thresher_lanes())
        except (OSError, AttributeError) as exc:  # not ours, or not loadable here
            raise BuildError(f"cannot load {library.name}: {exc}") from None
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None

    def predict(self, table: pa.Table) -> np.ndarray:
        """The model's outputs for the rows of `table` (its features, in model order)."""
        if table.num_columns != self.width:
            raise ValueError(
                f"the model takes {self.width} features, the batch has {table.num_columns}"
            )
        keep, pointers, stride = _column_pointers(table)
        out = self._score(pointers, stride, table.num_rows)
        del keep  # the buffers the pointers point into lived until here
        return out

    def predict_matrix(self, matrix: np.ndarray) -> np.ndarray:
        """The same for the rows of a float64 matrix (row i, feature j at [i, j]), read in
        place when its columns or its rows are contiguous; columns are faster to read."""
        if matrix.ndim != 2 or matrix.shape[1] != self.width:
            raise ValueError(f"the model takes {self.width} features, the matrix is {matrix.shape}")
        if matrix.dtype != np.float64 or 8 not in matrix.strides:
            matrix = np.ascontiguousarray(matrix, dtype=np.float64)
        by_row, by_column = (step // 8 for step in matrix.strides)
        if by_row == 1:  # each column contiguous (Fortran order, or rows of it)
            starts = [matrix.ctypes.data + 8 * by_column * j for j in range(self.width)]
            return self._score(starts, 1, len(matrix))
        return self._score(_row_pointers(matrix), by_row, len(matrix))

    def _score(self, pointers: list[int], stride: int, rows: int) -> np.ndarray:
        out = np.empty((rows, self.outputs), dtype=np.float64)
        parts = min(self._threads, rows // MIN_ROWS_PER_THREAD) or 1
        if parts == 1:
            self._run(pointers, stride, (0, rows), out)
        else:
            bounds = np.linspace(0, rows, parts + 1).astype(np.int64)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="trees")
            runs = [
                self._pool.submit(self._run, pointers, stride, (int(a), int(b)), out)
                for a, b in itertools.pairwise(bounds)
            ]
            for run in runs:
                run.result()
        return out[:, 0] if self.outputs == 1 else out

    def _run(
        self, pointers: list[int], stride: int, span: tuple[int, int], out: np.ndarray
    ) -> None:
        """Score rows `span` (start, stop) into `out`."""
        start, stop = span
        offset = start * stride * 8  # bytes: the columns hold doubles
        starts = [p + offset for p in pointers]
        shifted = (ctypes.c_void_p * len(pointers))(*starts)
        target = out[start:stop].ctypes.data
        if stride != 1:  # a row-major matrix: each row is one stream already
            self._predict(shifted, ctypes.c_int64(stride), ctypes.c_int64(stop - start), target)
            return
        self._blocked(shifted, stop - start, target, None, None)


def _column_pointers(table: pa.Table) -> tuple[list[Any], list[int], int]:
    """Pointers to each feature's doubles, their stride, and what keeps them alive.

    Float64 columns without nulls are read in place from Arrow's buffers; anything else
    (integers, nulls, several chunks) goes through one float64 matrix (nulls become NaN;
    text raises ValueError, which the engine reports row by row)."""
    columns: list[np.ndarray] = []
    for column in table.columns:
        if column.type != pa.float64() or column.null_count or column.num_chunks != 1:
            break
        columns.append(to_numpy(column.chunk(0)))
    else:
        return columns, [values.ctypes.data for values in columns], 1
    matrix = to_matrix(table)
    return [matrix], _row_pointers(matrix), table.num_columns


def _row_pointers(matrix: np.ndarray) -> list[int]:
    """Where each feature of a float64 matrix's first row is, its rows contiguous."""
    return [matrix.ctypes.data + 8 * j for j in range(matrix.shape[1])]


def first_line(error: Exception) -> str:
    """The message of a C++ error, without its stack trace and source excerpt."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return next((line for line in lines if "rror" in line), lines[0] if lines else repr(error))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence treelite and tl2cgen while they write code: their C++ code logs to file
    descriptor 2, their Python callbacks print to stdout and warn (versions, translation
    units, fields they skip). Failures still raise. Only while a model loads, before the
    worker starts any thread that could want the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            os.dup2(devnull.fileno(), 2)
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)
