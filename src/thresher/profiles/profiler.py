"""Profiling a shard as a worker goes: per chunk, what Arrow knows without reading the
values, and the sampled rows; per shard, the sample's sketches, once.

Each chunk's inputs and outputs give their rows and nulls (Arrow's metadata), and an
output's class labels are counted (one `bincount` or `value_counts`: one column, so
their shares are exact). Nothing reads every input value: everything else — the nan and
inf among floats, means, spreads, quantiles, histograms, the top values and distinct
counts of inputs — comes from a uniform Bernoulli sample of the rows at the job's
`sample_rate` (`profiles.sampling`), drawn from a stream seeded by the shard's index, so a
shard run again (retried, resumed) samples the same rows. The sampled rows are taken out
(`Table.take`) and sketched at the shard's end (`profiles.sketching`), or whenever `FLUSH`
rows wait, so what waits stays small where the sample is every row.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from thresher.arrays import from_numpy
from thresher.profiles.profile import ColumnProfile, Kind, Profile, Role
from thresher.profiles.sampling import RowSample
from thresher.profiles.sketching import MAX_CATEGORIES, add_categories, sketch_sample

__all__ = ["MAX_CATEGORIES", "ShardProfiler", "column_kind"]

MAX_SEGMENTS = 32  # segment values profiled apart; the rest are one "(other)" segment
OTHER_SEGMENT = "(other)"
FLUSH = 1 << 16  # sampled rows waiting before they go to the sketches


def column_kind(type_: pa.DataType, role: Role) -> Kind:
    """How a column of this type is profiled. Integer outputs are class labels."""
    if pa.types.is_boolean(type_) or pa.types.is_dictionary(type_):
        return "categorical"
    if pa.types.is_integer(type_):
        return "categorical" if role == "output" else "numeric"
    if pa.types.is_floating(type_) or pa.types.is_decimal(type_):
        return "numeric"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "categorical"
    return "other"


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
        self._waiting: list[tuple[list[ColumnProfile], pa.Table]] = []
        self._waiting_rows = 0

    def update(
        self,
        inputs: pa.Table,
        outputs: pa.Table,
        segments: tuple[pa.ChunkedArray, pa.ChunkedArray] | None = None,
    ) -> None:
        """Profile one chunk: `inputs` the model's input columns of the rows read,
        `outputs` the prediction columns of the rows predicted, and `segments` the
        `segment_by` column's values of each (which split both, per segment value)."""
        sample = self._kept.take(inputs.num_rows)
        self._add(inputs, "input", sample)
        if outputs.num_rows != inputs.num_rows:  # bad rows: the rows predicted are others
            if self._kept_out is None:
                self._kept_out = RowSample(self._rate, self._seed * 1_000_003 + 1)
            sample = self._kept_out.take(outputs.num_rows)
        self._add(outputs, "output", sample)
        self._profile.rows += inputs.num_rows
        if segments is not None and self._segment_by:
            self._by_segment(inputs, outputs, segments)

    def profile(self) -> Profile:
        """The shard's profile: the waiting sample sketched."""
        self._flush()
        self._profile.segments = {k: s.profile() for k, s in sorted(self._segments.items())}
        return self._profile

    def _add(self, table: pa.Table, role: Role, sample: np.ndarray | None) -> None:
        """A table's columns counted, and its rows at `sample` (every row: None) kept."""
        if not table.num_rows:
            return
        columns = [self._column(field, role) for field in table.schema]
        for column, values in zip(columns, table.columns, strict=True):
            count_exactly(column, values)
        if sample is not None and not len(sample):
            return
        # from_numpy, not pa.array: pyarrow's imports pandas, in every worker
        kept = table if sample is None else table.take(from_numpy(sample))
        self._waiting.append((columns, kept))
        self._waiting_rows += kept.num_rows
        if self._waiting_rows >= FLUSH:
            self._flush()

    def _column(self, field: pa.Field, role: Role) -> ColumnProfile:
        column = self._profile.columns.get(field.name)
        if column is None:
            kind = column_kind(field.type, role)
            column = self._profile.columns[field.name] = ColumnProfile.empty(field.name, role, kind)
        return column

    def _flush(self) -> None:
        """The waiting sample into the sketches, the tables of one schema joined first."""
        groups: dict[tuple[tuple[int, ...], pa.Schema], list[pa.Table]] = {}
        profiles: dict[tuple[tuple[int, ...], pa.Schema], list[ColumnProfile]] = {}
        for columns, table in self._waiting:  # by role and schema: tables that join
            key = (tuple(id(column) for column in columns), table.schema)
            groups.setdefault(key, []).append(table)
            profiles[key] = columns
        for key, tables in groups.items():
            # one chunk a column: each sketch's numbers are then a view, not a join
            sample = pa.concat_tables(tables).combine_chunks() if len(tables) > 1 else tables[0]
            sketch_sample(profiles[key], sample)
        self._waiting, self._waiting_rows = [], 0

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


def count_exactly(column: ColumnProfile, values: pa.ChunkedArray) -> None:
    """What Arrow knows of a chunk's column without reading its values: its rows and
    nulls (and, for a type that holds no nan or inf, that every value is neither); and an
    output's class labels, every value (so their counts are exact). Nothing else reads
    every value: a float column's nan and inf come from the sample (`add_numbers`)."""
    column.rows += len(values)
    column.nulls += values.null_count
    if not pa.types.is_floating(values.type):
        column.scanned += len(values) - values.null_count
    if column.kind == "categorical" and column.role == "output":
        add_categories(column, values)
