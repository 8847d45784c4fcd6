"""The profiler's own native passes, each replacing per-column numpy calls per chunk.

Class labels: a classifier's prediction column is profiled by the count of each label,
every chunk, and numpy's `bincount` took two passes (its range, then the counts) and most
of the time profiling a classifier's output took. Labels are as a rule small non-negative
integers; `small_counts` counts those and gives up (None) on any other value.

A sample: `gather` takes the sampled rows of all a chunk's plain double columns in one
call, the GIL let go meanwhile.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.arrays import to_numpy
from thresher.native import declared, kernel

__all__ = ["SMALL_LABELS", "gather", "small_counts"]

SMALL_LABELS = 1024  # labels counted natively are in [0, SMALL_LABELS): SPAN in the C

KERNELS_C = r"""
#include <stdint.h>
#include <string.h>

#define LANES 8
#define SPAN 1024

/* Add the count of each value of x[0..n) into counts[0..SPAN). 0, or -1 as soon as a
   value lies outside [0, SPAN) (nothing added then). Eight tables, a value to each in
   turn: with one, each increment of a label waits on the one before (a run of equal
   labels is the rule), five times slower. */
int32_t thresher_count_labels(const int64_t* x, int64_t n, int64_t* counts) {
    static __thread uint32_t lanes[LANES][SPAN];
    memset(lanes, 0, sizeof lanes);
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        for (int j = 0; j < LANES; j++) {
            uint64_t v = (uint64_t)x[i + j];
            if (v >= SPAN) return -1;
            lanes[j][v]++;
        }
    }
    for (; i < n; i++) {
        uint64_t v = (uint64_t)x[i];
        if (v >= SPAN) return -1;
        lanes[0][v]++;
    }
    for (int j = 0; j < LANES; j++)
        for (int v = 0; v < SPAN; v++) counts[v] += lanes[j][v];
    return 0;
}

/* The values at the rising `positions` (n of them) of each of `columns` arrays of doubles
   (`sources`), into out[c * n .. c * n + n). */
void thresher_gather(int64_t columns, const double* const* sources, const int64_t* positions,
                     int64_t n, double* out) {
    for (int64_t c = 0; c < columns; c++) {
        const double* x = sources[c];
        double* o = out + c * n;
        for (int64_t k = 0; k < n; k++) o[k] = x[positions[k]];
    }
}
"""


@functools.cache
def _kernel() -> Any:
    library = kernel("profiler", KERNELS_C)
    if library is None:
        return None
    library.thresher_count_labels.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    library.thresher_count_labels.restype = ctypes.c_int32
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    declared(library.thresher_gather, count, pointer, pointer, count, pointer)
    return library


def small_counts(parts: Sequence[np.ndarray]) -> np.ndarray | None:
    """How often each label in [0, SMALL_LABELS) occurs over the int64 `parts` (an array
    of SMALL_LABELS counts); None when a value lies outside that range, a part is not
    int64, or there is no native kernel here."""
    library = _kernel()
    if library is None or any(part.dtype != np.int64 for part in parts):
        return None
    counts = np.zeros(SMALL_LABELS, dtype=np.int64)
    for part in parts:
        values = np.ascontiguousarray(part)
        found = library.thresher_count_labels(values.ctypes.data, len(values), counts.ctypes.data)
        if found != 0:
            return None
    return counts


def gather(arrays: Sequence[pa.Array], at: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The values at the rising `positions` of each of `arrays` (float64, no nulls, at the
    addresses `at`, see `moments.addresses`): a matrix, a row per array. One native call
    for all of them, or numpy's take per array."""
    out = np.empty((len(arrays), len(positions)))
    library = _kernel()
    if library is None or not len(arrays):
        for row, values in enumerate(arrays):
            np.take(to_numpy(values), positions, out=out[row])
        return out
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    library.thresher_gather(
        len(arrays), at.ctypes.data, positions.ctypes.data, len(positions), out.ctypes.data
    )
    return out
