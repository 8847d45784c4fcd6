"""The profiler's own native passes, each replacing per-column numpy calls per chunk.

Class labels: a classifier's prediction column is profiled by the count of each label,
every chunk, and numpy's `bincount` took two passes (its range, then the counts) and most
of the time profiling a classifier's output took. Labels are as a rule small non-negative
integers; `small_counts` counts those and gives up (None) on any other value.

A sample: `gather` takes the sampled rows of all a chunk's plain double columns in one
call, the GIL let go meanwhile.

A probability column (a classifier's score): `probability_pass` takes its Σx, Σx², min,
max and calibration histogram in one pass, where numpy took five (the four reductions,
then a scaled copy, a cast and `bincount` for the histogram).
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
from thresher.seen import Sums, addresses

__all__ = ["SMALL_LABELS", "fold_moments", "gather", "probability_pass", "small_counts"]

SMALL_LABELS = 1024  # labels counted natively are in [0, SMALL_LABELS): SPAN in the C
MAX_BINS = 256  # histograms of at most this many bins natively: MAX_BINS in the C

KERNELS_C = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LANES 8
#define SPAN 1024

/* Add the count of each value of x[0..n) into counts[0..SPAN). 0, or -1 when a value
   lies outside [0, SPAN) (nothing added then). A first pass finds the largest label, as
   an unsigned number (a negative one is past SPAN); two labels, the most usual, are then
   counted by their sum. Otherwise eight tables, a value to each in turn: with one, each
   increment of a label waits on the one before (a run of equal labels is the rule), five
   times slower. The tables are left zeroed, and only as far as the largest label is
   summed and cleared: clearing and summing all of them (32 KiB) cost more than counting
   a chunk of two labels. */
__attribute__((target_clones("avx2", "default")))
int32_t thresher_count_labels(const int64_t* x, int64_t n, int64_t* counts) {
    static __thread uint32_t lanes[LANES][SPAN];
    uint64_t top = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = (uint64_t)x[i];
        top = v > top ? v : top;
    }
    if (top >= SPAN) return -1;
    if (top <= 1) {
        int64_t ones = 0;
        for (int64_t i = 0; i < n; i++) ones += x[i];
        counts[0] += n - ones;
        counts[1] += ones;
        return 0;
    }
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) lanes[j][x[i + j]]++;
    for (; i < n; i++) lanes[0][x[i]]++;
    for (int j = 0; j < LANES; j++) {
        for (uint64_t v = 0; v <= top; v++) {
            counts[v] += lanes[j][v];
            lanes[j][v] = 0;
        }
    }
    return 0;
}

/* thresher_count_labels over `parts` arrays (`sources`, `lengths` values each): 0, or
   -1 as soon as one gives up (the counts are then the caller's to drop). */
int32_t thresher_count_label_parts(int64_t parts, const int64_t* const* sources,
                                   const int64_t* lengths, int64_t* counts) {
    for (int64_t p = 0; p < parts; p++)
        if (thresher_count_labels(sources[p], lengths[p], counts) != 0) return -1;
    return 0;
}

/* x[0..n) doubles: Σx, Σx², min and max into sums[0..4), and how many lie in each of
   `bins` (at most MAX_BINS) equal bins of [0, 1] into counts[0..bins) (1 in the last;
   NaN and values outside [0, 1] in none: the caller drops the histogram when min or max
   says so). A block of values at a time, in two loops the compiler turns into vector
   code (the reductions in sixteen lanes, as `thresher_reductions` takes them, and each
   value's bin), then the bins counted into eight tables, a value to each in turn, as
   labels are: all in one loop, the branches and each table's wait on itself took twice
   the time. */
#define MAX_BINS 256
#define REDUCE_LANES 16
#define BIN_BLOCK 256
__attribute__((target_clones("avx2", "default")))
void thresher_probabilities(const double* x, int64_t n, int64_t bins, int64_t* counts,
                            double* sums) {
    uint32_t tables[LANES][MAX_BINS + 2];  /* [bins]: exactly 1; [MAX_BINS + 1]: the rest */
    memset(tables, 0, sizeof tables);
    double s[REDUCE_LANES], q[REDUCE_LANES], lo[REDUCE_LANES], hi[REDUCE_LANES];
    for (int j = 0; j < REDUCE_LANES; j++) {
        s[j] = 0.0; q[j] = 0.0; lo[j] = INFINITY; hi[j] = -INFINITY;
    }
    double scale = (double)bins;
    int32_t at[BIN_BLOCK];
    for (int64_t start = 0; start < n; start += BIN_BLOCK) {
        int64_t m = n - start < BIN_BLOCK ? n - start : BIN_BLOCK;
        const double* block = x + start;
        int64_t i = 0;
        for (; i + REDUCE_LANES <= m; i += REDUCE_LANES) {
            #pragma omp simd
            for (int j = 0; j < REDUCE_LANES; j++) {
                double v = block[i + j];
                s[j] += v; q[j] += v * v;
                lo[j] = v < lo[j] ? v : lo[j];
                hi[j] = v > hi[j] ? v : hi[j];
            }
        }
        for (; i < m; i++) {
            double v = block[i];
            s[0] += v; q[0] += v * v;
            lo[0] = v < lo[0] ? v : lo[0];
            hi[0] = v > hi[0] ? v : hi[0];
        }
        #pragma omp simd
        for (int64_t k = 0; k < m; k++) {  /* NaN and anything outside [0, 1]: the spare bin */
            double v = block[k];
            at[k] = v >= 0.0 && v <= 1.0 ? (int32_t)(v * scale) : MAX_BINS + 1;
        }
        int64_t k = 0;
        for (; k + LANES <= m; k += LANES)
            for (int j = 0; j < LANES; j++) tables[j][at[k + j]]++;
        for (; k < m; k++) tables[0][at[k]]++;
    }
    for (int j = 0; j < LANES; j++) {
        for (int64_t k = 0; k < bins; k++) counts[k] += tables[j][k];
        counts[bins - 1] += tables[j][bins];  /* exactly 1 */
    }
    double total = 0.0, squares = 0.0, low = INFINITY, high = -INFINITY;
    for (int j = 0; j < REDUCE_LANES; j++) {
        total += s[j]; squares += q[j];
        low = lo[j] < low ? lo[j] : low;
        high = hi[j] > high ? hi[j] : high;
    }
    sums[0] = total; sums[1] = squares; sums[2] = low; sums[3] = high;
}

/* A chunk's columns of `rows` values each, their Σx, Σx², min and max in `sums` (four
   doubles a column), merged into running moments by Chan et al.'s pairwise update, as
   `RunningMoments.merge` does: `table` the first column's count, its mean `stride`
   doubles on, then m2, low and high as far again each (a row per figure, as
   `RunningMoments` keeps them). The columns it leaves go into `left` (their number is
   returned): a sum that is not finite (nan or inf among the values), or a spread that
   cancellation ate (Σx² - Σx·mean small against Σx·mean, as `running.spread_lost`
   asks), which the caller finds exactly from the values. */
int64_t thresher_fold_moments(int64_t columns, const double* sums, int64_t rows,
                              double* table, int64_t stride, int64_t* left) {
    double *count = table, *mean = table + stride, *m2 = table + 2 * stride;
    double *low = table + 3 * stride, *high = table + 4 * stride;
    int64_t n = 0;
    double r = (double)rows;
    for (int64_t c = 0; c < columns; c++) {
        double total = sums[4 * c], squares = sums[4 * c + 1];
        double mu = total / r, spread = squares - total * mu;
        if (!isfinite(total) || spread < 1e-9 * fabs(total * mu)) {
            left[n++] = c;
            continue;
        }
        double before = count[c], all = before + r, delta = mu - mean[c];
        mean[c] = before == 0.0 ? mu : mean[c] + delta * r / all;
        m2[c] += spread + delta * delta * before * r / all;
        count[c] = all;
        low[c] = sums[4 * c + 2] < low[c] ? sums[4 * c + 2] : low[c];
        high[c] = sums[4 * c + 3] > high[c] ? sums[4 * c + 3] : high[c];
    }
    return n;
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
    library.thresher_count_label_parts.argtypes = [ctypes.c_int64, *[ctypes.c_void_p] * 3]
    library.thresher_count_label_parts.restype = ctypes.c_int32
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    declared(library.thresher_gather, count, pointer, pointer, count, pointer)
    declared(library.thresher_probabilities, pointer, count, count, pointer, pointer)
    library.thresher_fold_moments.argtypes = [count, pointer, count, pointer, count, pointer]
    library.thresher_fold_moments.restype = count
    return library


def small_counts(values: pa.ChunkedArray) -> np.ndarray | None:
    """How often each label in [0, SMALL_LABELS) occurs among the non-null values of
    `values` (an array of SMALL_LABELS counts); None when a value lies outside that
    range, the values are not int64, or there is no native kernel here. A model's output
    comes in as many parts as it had batches: each part is found where it lies in
    memory, without a numpy view of each, which cost more than counting it."""
    library = _kernel()
    if library is None or values.type != pa.int64():
        return None
    kept = [part.drop_null() if part.null_count else part for part in values.chunks]
    kept = [part for part in kept if len(part)]  # alive through the call
    sources = addresses(kept)
    lengths = np.array([len(part) for part in kept], dtype=np.int64)
    counts = np.zeros(SMALL_LABELS, dtype=np.int64)
    found = library.thresher_count_label_parts(
        len(kept), sources.ctypes.data, lengths.ctypes.data, counts.ctypes.data
    )
    return counts if found == 0 else None


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


def probability_pass(values: np.ndarray, bins: int) -> tuple[Sums, np.ndarray] | None:
    """Σx, Σx², min and max of the contiguous float64 `values`, and how many lie in each
    of `bins` equal bins of [0, 1] (1 in the last; NaN and values outside [0, 1] in
    none); None where there is no native kernel here."""
    library = _kernel()
    if library is None or bins > MAX_BINS:
        return None
    counts = np.zeros(bins, dtype=np.int64)
    sums = np.empty(4)
    library.thresher_probabilities(
        values.ctypes.data, len(values), bins, counts.ctypes.data, sums.ctypes.data
    )
    return (float(sums[0]), float(sums[1]), float(sums[2]), float(sums[3])), counts


def fold_moments(sums: np.ndarray, rows: int, table: int, stride: int) -> list[int] | None:
    """Merge columns of `rows` values, `sums` their Σx, Σx², min and max (a C-ordered
    row of four a column), into the running moments at the address `table` (see the C);
    the columns left to the caller, or None where there is no native kernel here
    (nothing merged)."""
    library = _kernel()
    if library is None:
        return None
    sums = np.ascontiguousarray(sums, dtype=np.float64)
    left = np.empty(len(sums), dtype=np.int64)
    found = library.thresher_fold_moments(
        len(sums), sums.ctypes.data, rows, table, stride, left.ctypes.data
    )
    columns: list[int] = left[:found].tolist()
    return columns
