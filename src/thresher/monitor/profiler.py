"""Profiling a shard as a worker goes: each chunk's inputs and outputs, no second read.

The cost is kept small on purpose (`[monitor]` promises at most a few per cent of a job):
counts, nulls, min, max, mean and variance see every value in one native pass, which
for the model's input doubles is the model's own conversion of them (`thresher.moments`),
while the KLL sketch, whose updates cost far more per value, sees a uniform
Bernoulli sample of the rows at the job's `sample_rate` (`monitor.sampling`), drawn from a
generator seeded by the shard's index, so a shard run again (retried, resumed) samples
the same rows.

Per chunk, what costs is Python's, per column: so the columns of plain doubles (no
nulls, one part; the model's input, as a rule) are taken together. Their moments merge
into running arrays in a few numpy operations for all of them (`RunningMoments`), and
their sampled values wait in a buffer (`WaitingSamples`) that goes to each sketch, sorted, a
few ten thousand values at a time, instead of a sort and a sketch update per column and
chunk. Both are folded into the profile when it is asked for.
"""

from __future__ import annotations

import itertools
import math
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from thresher.arrays import to_numpy
from thresher.moments import is_plain_double, reductions
from thresher.monitor.kernels import gather, probability_pass, small_counts
from thresher.monitor.layout import Layout, Plain
from thresher.monitor.profile import (
    PROBABILITY_BINS,
    ColumnProfile,
    Moments,
    Profile,
    Role,
)
from thresher.monitor.running import RunningMoments, WaitingSamples, spread_lost
from thresher.monitor.sampling import RowSample
from thresher.seen import Seen, addresses

__all__ = ["ShardProfiler"]

MAX_CATEGORIES = 1024  # more distinct values in one chunk: the column is text, not a category
BINCOUNT_SPAN = 1 << 16  # integer values spread wider than this are counted by hashing
MAX_SEGMENTS = 32  # segment values profiled apart; the rest are one "(other)" segment
OTHER_SEGMENT = "(other)"
MAX_PARTS = 4  # a column in more parts than this is joined before it is profiled


class ShardProfiler:
    """A shard's profile, built one chunk at a time (`update`), then `profile`."""

    def __init__(self, sample_rate: float, seed: int, segment_by: str | None = None) -> None:
        self._rate = sample_rate
        self._seed = seed
        self._kept = RowSample(sample_rate, seed)  # the rows read
        self._kept_out: RowSample | None = None  # the rows predicted, when fewer
        self._segment_by = segment_by
        self._profile = Profile(sample_rate=sample_rate, segment_by=segment_by)
        self._segments: dict[str, ShardProfiler] = {}
        self._moments = RunningMoments()
        self._waiting = WaitingSamples()
        self._layouts: dict[Role, Layout] = {}  # the last chunk's, by role

    def update(
        self,
        inputs: pa.Table,
        outputs: pa.Table,
        segments: tuple[pa.ChunkedArray, pa.ChunkedArray] | None = None,
        seen: Seen | None = None,
    ) -> None:
        """Profile one chunk: `inputs` the model's input columns of the rows read,
        `outputs` the prediction columns of the rows predicted, and `segments` the
        `segment_by` column's values of each (which split both, per segment value).
        `seen`: the moments the model's conversion took of the inputs, where they cover
        a column's values (see thresher.moments); the rest are read here."""
        sample = self._kept.take(inputs.num_rows)
        self._add(inputs, "input", sample, seen)
        if outputs.num_rows != inputs.num_rows:  # bad rows: the rows predicted are others
            if self._kept_out is None:
                self._kept_out = RowSample(self._rate, self._seed * 1_000_003 + 1)
            sample = self._kept_out.take(outputs.num_rows)
        self._add(outputs, "output", sample)
        self._profile.rows += inputs.num_rows
        if segments is not None and self._segment_by:
            self._by_segment(inputs, outputs, segments)

    def profile(self) -> Profile:
        """The shard's profile: the running moments and the waiting samples folded in."""
        for name, moments in self._moments.folded():  # plain doubles: every row a value
            column = self._profile.columns[name]
            column.rows += moments.count
            column.moments.merge(moments)
        self._moments = RunningMoments()  # folded in: a second call adds nothing twice
        self._waiting.flush_all()
        self._profile.segments = {k: s.profile() for k, s in sorted(self._segments.items())}
        return self._profile

    def _add(
        self, table: pa.Table, role: Role, sample: np.ndarray | None, seen: Seen | None = None
    ) -> None:
        """A table's columns, `sample` the positions of its rows the sketches see."""
        if not table.num_rows:
            return
        bounds = _shared_parts(table) if role == "input" else None
        if bounds is not None:  # read across a row group's end: each side is plain again
            for start, stop in itertools.pairwise(bounds):
                part = table.slice(start, stop - start)
                self._add(part, role, _within(sample, start, stop), seen)
            return
        layout = self._layouts.get(role)
        if layout is None or not layout.schema.equals(table.schema):
            layout = self._layouts[role] = Layout.of(table.schema, role, self._profile.columns)
        plain, rest = layout.split(table)
        for column, values in rest:  # a column that keeps no sketch of its values: no sample
            add_values(column, values, sample if _sampled(column, values.type) else None, seen)
        if plain is not None:
            self._add_plain(plain, sample, seen)

    def _add_plain(self, plain: Plain, sample: np.ndarray | None, seen: Seen | None) -> None:
        """Columns of plain doubles, together: their moments (recorded by the model's
        conversion, or one native pass each) merged into the running figures at once,
        and their sampled values gathered in one native call; a column with nan or inf
        goes the way of any other."""
        columns, arrays, names = plain.columns, plain.arrays, plain.names
        rows = len(arrays[0])
        at = addresses(arrays)
        sums = seen.chain_sums(at, rows) if seen is not None else None
        if sums is None:  # not the columns of one chain of batches: column by column
            found = seen.sums_at(at, rows) if seen is not None else [None] * len(arrays)
            pairs = zip(found, arrays, strict=True)
            sums = np.array([f or reductions(_numbers(a)) for f, a in pairs])
        left = self._moments.fold(names, rows, sums)
        if left:  # nan or inf (the sum says so), or cancellation
            for i in left:
                self._add_left(columns[i], arrays[i], sums[i], sample, seen)
            kept = [i for i in range(len(arrays)) if i not in left or math.isfinite(sums[i, 0])]
            if not kept:
                return
            if len(kept) < len(arrays):
                columns, arrays = [columns[i] for i in kept], [arrays[i] for i in kept]
                names, at = tuple(c.name for c in columns), at[kept]
        if sample is None:  # every row: the values themselves wait
            for column, values in zip(columns, arrays, strict=True):
                self._waiting.add(column, _numbers(values))
        elif len(sample):
            self._waiting.add_rows(columns, gather(arrays, at, sample), names)

    def _add_left(
        self,
        column: ColumnProfile,
        values: pa.Array,
        sums: np.ndarray,
        sample: np.ndarray | None,
        seen: Seen | None,
    ) -> None:
        """A plain column `RunningMoments.fold` left: with nan or inf, the way of any
        column (its sample too); else its spread, found exactly from the values."""
        total, squares, low, high = sums.tolist()
        if not math.isfinite(total):
            column.rows += len(values)
            _add_number_part(column, values, sample, seen)
            return
        exact = _moments(_numbers(values), total, squares, low, high)
        self._moments.merge(
            (column.name,),
            exact.count,
            mean=np.array([exact.mean]),
            m2=np.array([exact.m2]),
            low=np.array([low]),
            high=np.array([high]),
        )

    def _by_segment(
        self,
        inputs: pa.Table,
        outputs: pa.Table,
        segments: tuple[pa.ChunkedArray, pa.ChunkedArray],
    ) -> None:
        of_inputs, of_outputs = (pc.cast(s, pa.string()).fill_null("(null)") for s in segments)
        for value in pc.unique(of_inputs).to_pylist():
            known = value in self._segments or len(self._segments) < MAX_SEGMENTS
            key = value if known else OTHER_SEGMENT
            profiler = self._segments.get(key)
            if profiler is None:
                seed = self._seed * 1_000_003 + zlib.crc32(key.encode())
                profiler = self._segments[key] = ShardProfiler(self._rate, seed)
            profiler.update(
                inputs.filter(pc.equal(of_inputs, value)),
                outputs.filter(pc.equal(of_outputs, value)) if outputs.num_columns else outputs,
            )


def _shared_parts(table: pa.Table) -> list[int] | None:
    """Where the parts of `table`'s columns begin and end, when every column is in the
    same few parts: a chunk read across a row group's end. Each side is then profiled
    apart, its columns of plain doubles together (`_add_plain`); as it came, each
    column's parts went one by one (`_add_numbers`), a good part of a job's chunks.
    None for one part, columns split apart, or more parts than `MAX_PARTS`. (Asked of
    the model's inputs only: its outputs are in its batches, each column counted over
    all of them at once.)"""
    first = table.column(0)
    if not 1 < first.num_chunks <= MAX_PARTS:
        return None
    lengths = [len(part) for part in first.chunks]
    for column in table.columns[1:]:
        if column.num_chunks != len(lengths) or [len(p) for p in column.chunks] != lengths:
            return None
    return [0, *itertools.accumulate(lengths)]


def _within(sample: np.ndarray | None, start: int, stop: int) -> np.ndarray | None:
    """The positions of `sample` in rows `start`..`stop`, counted from `start`."""
    if sample is None:
        return None
    low, high = np.searchsorted(sample, (start, stop))
    return sample[low:high] - start


def _sampled(column: ColumnProfile, type_: pa.DataType) -> bool:
    """Whether `add_values` gives the column's values (or, for text, their lengths) to
    its quantile sketch: not a class label's, which is counted, not sketched."""
    if column.quantiles is None:
        return False
    return column.kind == "numeric" or pa.types.is_string(type_)


def _numbers(values: pa.Array) -> np.ndarray:
    return np.asarray(to_numpy(values), dtype=np.float64)


def add_values(
    column: ColumnProfile,
    values: pa.ChunkedArray,
    sample: np.ndarray | None,
    seen: Seen | None = None,
) -> None:
    """One chunk's values of a column into its profile. An output column comes in as many
    parts as the model had batches (hundreds while the tuner tries small sizes): past
    `MAX_PARTS` a number's parts are joined first, a copy that costs less than a pass per
    part. Not when the model's read recorded moments (`seen`): those are of the parts as
    they are; nor for class labels, which are counted over all the parts in one native
    call, so the copy would buy nothing."""
    if values.num_chunks > MAX_PARTS and seen is None and column.kind == "numeric":
        values = pa.chunked_array([values.combine_chunks()], type=values.type)
    column.rows += len(values)
    column.nulls += values.null_count
    if column.kind == "categorical":
        _add_categories(column, values)
    if column.kind in ("categorical", "text") and pa.types.is_string(values.type):
        _add_numbers(column, pc.utf8_length(values), sample)  # lengths, should it turn text
    elif column.kind == "numeric":
        _add_numbers(column, values, sample, seen)


def _add_categories(column: ColumnProfile, values: pa.ChunkedArray) -> None:
    items, counts = _value_counts(values)
    if len(items) > MAX_CATEGORIES and pa.types.is_string(values.type):
        column.become_text()
        return
    assert column.frequent is not None and column.distinct is not None
    for item, count in zip(items, counts, strict=True):
        text = str(item).lower() if isinstance(item, bool) else str(item)
        column.frequent.update(text, count)
        column.distinct.update(text)


def _value_counts(values: pa.ChunkedArray) -> tuple[list[Any], list[int]]:
    """The distinct non-null values and how often each occurs. Integers of a narrow range
    (class labels) are counted with `np.bincount`: a tenth of Arrow's hash-based
    `value_counts`, which was the largest single cost of profiling a classifier's output."""
    if pa.types.is_integer(values.type) and len(values) > values.null_count:
        small = small_counts(values)  # class labels, as a rule: one native pass
        if small is not None:
            present = np.flatnonzero(small)
            return present.tolist(), small[present].tolist()
        parts = [to_numpy(p.drop_null() if p.null_count else p) for p in values.chunks]
        parts = [part for part in parts if len(part)]  # one at a time: see _add_numbers
        low, high = min(int(p.min()) for p in parts), max(int(p.max()) for p in parts)
        if high - low < BINCOUNT_SPAN and low > -(1 << 62) and high < 1 << 62:
            counts = np.zeros(high - low + 1, dtype=np.int64)
            for numbers in parts:
                shifted = numbers.astype(np.int64, copy=False)
                counts += np.bincount(shifted - low if low else shifted, minlength=len(counts))
            present = np.flatnonzero(counts)
            return (present + low).tolist(), counts[present].tolist()
    found = pc.value_counts(values)
    pairs = zip(found.field("values").to_pylist(), found.field("counts").to_pylist(), strict=True)
    kept = [(item, count) for item, count in pairs if item is not None]
    return [item for item, _ in kept], [count for _, count in kept]


def _add_numbers(
    column: ColumnProfile,
    values: pa.ChunkedArray,
    sample: np.ndarray | None,
    seen: Seen | None = None,
) -> None:
    """A column's values, one Arrow chunk at a time: a chunk read across a row group's end
    comes in two, and joining them copied every column into fresh memory (the passes
    below need none: each part's reductions merge)."""
    if values.num_chunks == 1:  # the common case, without the sample's slicing
        _add_number_part(column, values.chunk(0), sample, seen)
        return
    start = 0
    for part in values.chunks:
        stop = start + len(part)
        if start == stop:
            continue
        picked = None
        if sample is not None:  # the sample's positions within this part
            lo, hi = np.searchsorted(sample, (start, stop))
            picked = sample[lo:hi] - start
        _add_number_part(column, part, picked, seen)
        start = stop


def _add_number_part(
    column: ColumnProfile, values: pa.Array, sample: np.ndarray | None, seen: Seen | None
) -> None:
    if values.null_count:
        valid = to_numpy(pc.cast(pc.is_valid(values), pa.uint8())).astype(bool)
        numbers = np.asarray(to_numpy(values.drop_null()), dtype=np.float64)
        if sample is not None:  # positions among the valid values
            sample = np.cumsum(valid)[sample[valid[sample]]] - 1
    else:
        numbers = np.asarray(to_numpy(values), dtype=np.float64)
    sums = seen.sums_of(values) if seen is not None and is_plain_double(values) else None
    histogram = None  # a probability column's, found with its moments in one pass
    if sums is None and column.probability is not None and numbers.flags.c_contiguous:
        sums, histogram = probability_pass(numbers, PROBABILITY_BINS) or (None, None)
    total, squares, low, high = sums or reductions(numbers)
    if math.isfinite(total):  # no nan, no inf: either would have made the sum so
        finite = numbers
    else:
        keep = np.isfinite(numbers)
        nan = int(np.isnan(numbers).sum())
        column.nan += nan
        column.inf += len(numbers) - int(keep.sum()) - nan
        finite = numbers[keep]
        total, squares, low, high = reductions(finite)
    moments = _moments(finite, total, squares, low, high)
    column.moments.merge(moments)
    if column.quantiles is not None and (sample is None or len(sample)):
        if sample is None:  # the sketch takes writable arrays only (Arrow's are not)
            picked = numbers if numbers.flags.writeable else numbers.copy()
        else:  # a copy, sorted: KLL's bound holds in any order, and its compactions,
            # which sort, then take a third less of the time
            picked = numbers[sample]
            picked.sort()
        column.quantiles.update(picked if finite is numbers else picked[np.isfinite(picked)])
    if column.probability is not None and moments.count:
        _add_probabilities(column, finite, moments, histogram)


def _moments(finite: np.ndarray, total: float, squares: float, low: float, high: float) -> Moments:
    """One column's moments from its finite values' Σx, Σx², min and max. Where
    cancellation ate the digits (a mean far from zero against a small spread), the exact
    two-pass way, from the values (as `RunningMoments.fold` leaves such a column)."""
    count = len(finite)
    if not count:
        return Moments()
    mean = total / count
    m2 = squares - total * mean
    if spread_lost(total, mean, m2):
        m2 = float(np.var(finite)) * count
    return Moments(count, low, high, mean, max(m2, 0.0))


def _add_probabilities(
    column: ColumnProfile, finite: np.ndarray, moments: Moments, counts: np.ndarray | None
) -> None:
    """The calibration histogram: `counts`, when the native pass found it, else counted
    here from the `finite` values."""
    if moments.min < 0.0 or moments.max > 1.0:
        column.probability = None  # not a probability
        return
    if counts is None:
        # Bin k holds [k/B, (k+1)/B); a probability of exactly 1 lands in bin B, folded
        # into the last one after counting (cheaper than clipping every value first).
        counts = np.bincount(
            (finite * PROBABILITY_BINS).astype(np.intp), minlength=PROBABILITY_BINS + 1
        )
        counts[PROBABILITY_BINS - 1] += counts[PROBABILITY_BINS]
    assert column.probability is not None
    column.probability = [
        a + int(b) for a, b in zip(column.probability, counts[:PROBABILITY_BINS], strict=True)
    ]
