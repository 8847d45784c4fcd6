"""Σx, Σx², min and max of float64 columns in one native pass: alone (the profiler's
pass over a column), on the way into a model's input matrix (`into_matrix`), or as a
model that reads the columns in place reads them (`reducing`, for compiled trees).

A profiled job reads each feature value twice: the model's conversion copies it into
its input matrix, and the profiler streams it again for its moments. On a tabular job
that second read from memory was most of what profiling cost, so `to_matrix` can take
the moments as it copies, while the values are in the core's cache. A worker that
profiles wraps its model calls in `recording()`; every run of doubles converted then is
kept by the address of its first value (`Seen`), and the profiler takes a column's
moments from there when the recorded runs tile its values exactly, and reads the values
itself when they do not (rows the model never saw, a model that converts its own way).
Addresses are safe keys: the runs are the bytes of Arrow buffers that the profiled chunk
holds alive, so no other data can lie there meanwhile.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.native import declared, kernel
from thresher.seen import Seen, Sums, address, fresh_sums

__all__ = [
    "Reducer",
    "fresh_sums",
    "into_matrix",
    "is_plain_double",
    "recording",
    "reducing",
    "reductions",
]

BLAS_ONE_THREAD = 8192  # OpenBLAS computes a dot of up to 10,000 values on one thread

# Sixteen lanes of accumulators, not one vector's four: each lane's additions wait for the
# one before (four cycles), so one vector of accumulators ran at a quarter of what the core
# can add. The sum is not numpy's pairwise one: each lane adds in order, so the error grows
# with a lane's share of the values, ~1e-12 relative at most for a chunk's column.
# `thresher_matrix` copies blocks of rows into the matrix, one column at a time, and takes
# each block's moments from the values it just copied (in L1): the copy's writes stay in a
# block of the matrix small enough for the cache, where numpy's column-at-a-time strided
# copy walked the whole matrix once per column.
KERNELS_C = r"""
#include <math.h>
#include <stdint.h>

#define LANES 16
#define BLOCK 512

__attribute__((target_clones("avx2", "default")))
void thresher_reductions(const double* x, int64_t n, double* out) {
    double sum[LANES], squares[LANES], low[LANES], high[LANES];
    for (int j = 0; j < LANES; j++) {
        sum[j] = 0.0; squares[j] = 0.0; low[j] = INFINITY; high[j] = -INFINITY;
    }
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        #pragma omp simd
        for (int j = 0; j < LANES; j++) {
            double v = x[i + j];
            sum[j] += v;
            squares[j] += v * v;
            low[j] = v < low[j] ? v : low[j];
            high[j] = v > high[j] ? v : high[j];
        }
    }
    double s = 0.0, q = 0.0, lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < LANES; j++) {
        s += sum[j]; q += squares[j];
        lo = low[j] < lo ? low[j] : lo;
        hi = high[j] > hi ? high[j] : hi;
    }
    for (; i < n; i++) {
        double v = x[i];
        s += v; q += v * v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    out[0] = s; out[1] = q; out[2] = lo; out[3] = hi;
}

/* The moments of x[0..n) added into `totals` (Σx, Σx², min, max; started by the caller
   at 0, 0, inf, -inf): a column's blocks, one at a time, into its running figures. */
void thresher_reduce_into(const double* x, int64_t n, double* totals) {
    double part[4];
    thresher_reductions(x, n, part);
    totals[0] += part[0]; totals[1] += part[1];
    totals[2] = part[2] < totals[2] ? part[2] : totals[2];
    totals[3] = part[3] > totals[3] ? part[3] : totals[3];
}

/* Columns `sources` (each `rows` doubles) into the matrix columns `targets` of a C-ordered
   matrix of `width` columns starting at `matrix` (floats when `single`, else doubles);
   with `sums` (`fresh_sums`), each column's Σx, Σx², min and max (four doubles a column)
   too. */
__attribute__((target_clones("avx2", "default")))
void thresher_matrix(int64_t columns, const double* const* sources, const int64_t* targets,
                     int64_t rows, void* matrix, int64_t width, int32_t single, double* sums) {
    for (int64_t start = 0; start < rows; start += BLOCK) {
        int64_t stop = start + BLOCK < rows ? start + BLOCK : rows;
        for (int64_t c = 0; c < columns; c++) {
            const double* x = sources[c];
            if (single) {
                float* out = (float*)matrix + targets[c];
                for (int64_t r = start; r < stop; r++) out[r * width] = (float)x[r];
            } else {
                double* out = (double*)matrix + targets[c];
                for (int64_t r = start; r < stop; r++) out[r * width] = x[r];
            }
            if (sums) thresher_reduce_into(x + start, stop - start, sums + 4 * c);
        }
    }
}
"""


@functools.cache
def _kernels() -> Any:
    """The native library (`thresher_reductions`, `thresher_reduce_into`,
    `thresher_matrix`), or None where it cannot be built."""
    library = kernel("moments", KERNELS_C)
    if library is None:
        return None
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    declared(library.thresher_reductions, pointer, count, pointer)
    declared(
        library.thresher_matrix,
        *(count, pointer, pointer, count, pointer, count, ctypes.c_int32, pointer),
    )
    return library


def reductions(values: np.ndarray) -> Sums:
    """Σx, Σx², min and max of float64 `values`: one native pass, or numpy's four."""
    if not len(values):
        return 0.0, 0.0, math.inf, -math.inf
    library = _kernels()
    if library is not None:
        values = np.ascontiguousarray(values)
        out = np.empty(4)
        library.thresher_reductions(values.ctypes.data, len(values), out.ctypes.data)
        return float(out[0]), float(out[1]), float(out[2]), float(out[3])
    total = float(np.add.reduce(values))  # pairwise: SIMD, and no error grows with rows
    return total, _sum_of_squares(values), float(values.min()), float(values.max())


def _sum_of_squares(values: np.ndarray) -> float:
    """Σx² through BLAS's dot, a slice of at most `BLAS_ONE_THREAD` values at a time:
    OpenBLAS runs a longer dot on several threads, whose wake-ups on busy cores cost up
    to a millisecond a call where the dot itself takes ten microseconds."""
    total = 0.0
    for start in range(0, len(values), BLAS_ONE_THREAD):
        part = values[start : start + BLAS_ONE_THREAD]
        total += float(np.dot(part, part))
    return total


_recording: ContextVar[Seen | None] = ContextVar("thresher_moments_recording", default=None)


@contextlib.contextmanager
def recording(enabled: bool = True) -> Iterator[Seen | None]:
    """While inside, `into_matrix` keeps the moments of what it converts in the `Seen`
    yielded (None, and nothing kept, when not `enabled`). A context variable rather than
    an argument because the model calls `to_matrix` inside its own `predict`."""
    if not enabled:
        yield None
        return
    seen = Seen()
    token = _recording.set(seen)
    try:
        yield seen
    finally:
        _recording.reset(token)


def is_plain_double(values: pa.Array | pa.ChunkedArray) -> bool:
    """Whether `into_matrix` takes the array (or each part of the column): float64
    values and no nulls."""
    return pa.types.is_float64(values.type) and values.null_count == 0 and len(values) > 0


@dataclass(frozen=True)
class Reducer:
    """For a model that reads doubles in place (compiled trees): the native pass to call
    on each block of values as it reads them (`function`, the address of
    `thresher_reduce_into`, which adds into sums started by `fresh_sums`), and the `Seen`
    that keeps what it found."""

    function: int
    seen: Seen


def reducing() -> Reducer | None:
    """The `Reducer` while recording (and the kernel exists), else None."""
    seen = _recording.get()
    library = _kernels()
    if seen is None or library is None:
        return None
    function = ctypes.cast(library.thresher_reduce_into, ctypes.c_void_p).value
    return Reducer(int(function or 0), seen)


def into_matrix(matrix: np.ndarray, parts: Sequence[tuple[int, int, pa.Array]]) -> bool:
    """Copy each `(column, first row, array)` of plain doubles into the C-ordered float32
    or float64 `matrix`, natively, moments recorded on the way when `recording`; False
    (nothing copied) where the kernel cannot be had, and the caller copies them itself."""
    library = _kernels()
    if library is None or not parts or matrix.dtype not in (np.float32, np.float64):
        return False
    seen = _recording.get()
    groups: dict[tuple[int, int], list[tuple[int, pa.Array]]] = {}
    for column, row, values in parts:  # parts alike in rows go in one call
        groups.setdefault((row, len(values)), []).append((column, values))
    width, itemsize = matrix.shape[1], matrix.itemsize
    for (row, rows), group in groups.items():
        starts = [address(v) for _, v in group]
        pointers = np.array(starts, dtype=np.uintp)
        targets = np.fromiter((c for c, _ in group), dtype=np.int64, count=len(group))
        # while recording, the moments go into the figures of the run the call continues
        sums = seen.extend(starts, rows) if seen is not None else None
        library.thresher_matrix(
            len(group),
            pointers.ctypes.data,
            targets.ctypes.data,
            rows,
            matrix.ctypes.data + row * width * itemsize,
            width,
            int(matrix.dtype == np.float32),
            None if sums is None else sums.ctypes.data,
        )
    return True
