"""A shard's sample of rows into its columns' sketches: moments, quantiles, the top values
and distinct count of a category, the lengths of text, and a probability's histogram.

The sample is small (`[monitor] sample_rows` per job, shared among its shards), so it is
sketched at the shard's end in a few numpy and Arrow calls per column; the per-chunk work
of profiling is Arrow's metadata, an output's class labels (`profiles.profiler`) and
taking the sampled rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from thresher.arrays import column_to_numpy
from thresher.profiles.profile import PROBABILITY_BINS, ColumnProfile, Moments

__all__ = ["MAX_CATEGORIES", "add_categories", "sketch_sample"]

MAX_CATEGORIES = 1024  # more distinct values at once: the column is text, not a category
BINCOUNT_SPAN = 1 << 16  # integers spread wider than this are counted by Arrow's hashing


def sketch_sample(columns: list[ColumnProfile], sample: pa.Table) -> None:
    """The sampled rows `sample` into `columns`, its columns' profiles in order. An
    output's categories are not here: they are counted whole, chunk by chunk."""
    for column, values in zip(columns, sample.columns, strict=True):
        if column.kind == "categorical" and column.role == "input":
            add_categories(column, values)
        if column.kind in ("categorical", "text") and pa.types.is_string(values.type):
            add_numbers(column, pc.utf8_length(values))  # lengths, should it turn text
        elif column.kind == "numeric":
            add_numbers(column, values)


def add_categories(column: ColumnProfile, values: pa.ChunkedArray) -> None:
    """Each distinct value's count into the column's frequent-items and distinct-count
    sketches; text of more than `MAX_CATEGORIES` values becomes "text" instead."""
    kept = _value_counts(values)
    if len(kept) > MAX_CATEGORIES and pa.types.is_string(values.type):
        column.become_text()
        return
    assert column.frequent is not None and column.distinct is not None
    for item, count in kept:
        text = str(item).lower() if isinstance(item, bool) else str(item)
        column.frequent.update(text, count)
        column.distinct.update(text)
    column.counted += len(values) - values.null_count


def _value_counts(values: pa.ChunkedArray) -> list[tuple[Any, int]]:
    """The distinct non-null values and how often each occurs. Integers of a narrow range
    (class labels, chunk after chunk) by one `np.bincount` over the chunk's batches
    joined: a fifth of the time of Arrow's hash-based `value_counts`, which counts the
    rest."""
    if pa.types.is_integer(values.type) and len(values) > values.null_count:
        numbers = column_to_numpy(values.drop_null() if values.null_count else values)
        low, high = int(numbers.min()), int(numbers.max())
        if high - low < BINCOUNT_SPAN and low > -(1 << 62) and high < 1 << 62:
            counts = np.bincount(numbers.astype(np.int64, copy=False) - low)
            present = np.flatnonzero(counts)
            return list(zip((present + low).tolist(), counts[present].tolist(), strict=True))
    found = pc.value_counts(values)
    pairs = zip(found.field("values").to_pylist(), found.field("counts").to_pylist(), strict=True)
    return [(item, count) for item, count in pairs if item is not None]


def add_numbers(column: ColumnProfile, values: pa.ChunkedArray | pa.Array) -> None:
    """Sampled numbers (or lengths) into the column's figures: a float column's nan and
    inf counted; the finite values' moments, found in two passes (no digits lost far from
    zero); sorted into its quantile sketch (KLL's compactions, which sort, then take a
    third less of the time); and counted into its probability histogram while every
    value lies in [0, 1]."""
    numbers = np.asarray(column_to_numpy(values.drop_null()), dtype=np.float64)
    finite_at = np.isfinite(numbers)
    if pa.types.is_floating(values.type):  # the nan and inf, counted in the sample
        column.scanned += len(numbers)
        nan = int(np.isnan(numbers).sum())
        column.sampled_nan += nan
        column.sampled_inf += len(numbers) - int(finite_at.sum()) - nan
    finite = np.sort(numbers[finite_at])  # a copy of its own: the sketch writes
    if not len(finite):
        return
    mean = float(finite.mean())
    m2 = float(np.square(finite - mean).sum())
    column.moments.merge(Moments(len(finite), float(finite[0]), float(finite[-1]), mean, m2))
    if column.quantiles is not None:
        column.quantiles.update(finite)
    if column.probability is not None:
        _add_probabilities(column, finite)


def _add_probabilities(column: ColumnProfile, finite: np.ndarray) -> None:
    """The calibration histogram: bin k holds [k/B, (k+1)/B), and 1 the last bin."""
    if finite[0] < 0.0 or finite[-1] > 1.0:
        column.probability = None  # not a probability
        return
    bins = np.minimum((finite * PROBABILITY_BINS).astype(np.intp), PROBABILITY_BINS - 1)
    counts = np.bincount(bins, minlength=PROBABILITY_BINS)
    assert column.probability is not None
    column.probability = [a + int(b) for a, b in zip(column.probability, counts, strict=True)]
