"""`thresher tune`: measure the model at growing batch sizes on a sample of the job's input.

It reads the first rows of the job (at most `SAMPLE_ROWS`), loads the model as one worker
would (same thread budget), and for each size reports rows/s, the median latency of one
batch and the process's peak memory. The recommended size is the largest within 5% of
the best throughput: in a job every batch also pays the engine's own costs (its outputs
assembled, its rows handed to the model's threads and back, on cores the reader and the
writer share), which timing the model's calls alone does not see: the smallest size near
the best, recommended before, ran the benchmark's tree jobs well behind `auto` (figures in
`benchmarks/results/`). The sweep's memory column says what a bigger batch costs, for a
user who must cap it.
"""

from __future__ import annotations

import itertools
import resource
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from thresher.models import LoadContext, load_model
from thresher.models.base import Model, SortsByLength
from thresher.plan.history import place
from thresher.plan.inputs import check_features, plan_input
from thresher.plan.placement import Placement, plan_placement
from thresher.sources import Plan, open_source
from thresher.spec import JobSpec
from thresher.store import Store

SAMPLE_ROWS = 200_000
MIN_SECONDS = 0.5  # model time spent at each size, at least...
MIN_CALLS = 8  # ...and calls, so that a slow model's few calls still span the sample
KNEE = 0.95
GOLDEN = (5**0.5 - 1) / 2  # steps that spread batches evenly over the sample


@dataclass(frozen=True)
class SweepRow:
    batch_size: int
    rows_per_second: float
    latency_ms: float
    peak_rss_mib: float


def default_sizes(max_size: int) -> list[int]:
    sizes, size = [], 16
    while size <= max_size:
        sizes.append(size)
        size *= 4 if size < 256 else 2
    return sizes


@dataclass(frozen=True)
class Sweep:
    """Each size's figures, and the placement whose threads the model was measured with."""

    rows: list[SweepRow]
    placement: Placement


def sweep(spec: JobSpec, sizes: Sequence[int] | None = None, store: Store | None = None) -> Sweep:
    """Throughput, latency and memory of the job's model at each batch size, with the
    threads one of the job's workers would have: as `thresher run` would place it, with
    the model's earlier jobs on `store` (plan/history.py) when given."""
    plan = plan_input(spec)
    features = check_features(spec, plan)
    sizes = sorted(sizes or default_sizes(spec.batch.max_size))
    sample = _sample(spec, plan, features, max(SAMPLE_ROWS, *sizes))
    if store is None:
        placement = plan_placement(spec.run, len(plan.shards))
    else:
        placement = place(spec, plan.shards, store)
    context = LoadContext(features=tuple(features), threads=placement.threads)
    model = load_model(spec.model, context)
    if isinstance(model, SortsByLength):  # as the workers do: text rows shortest first
        order = np.argsort(np.asarray(model.sort_key(sample)), kind="stable")
        sample = sample.take(pa.array(order))
    found = [_measure(model, sample, size) for size in sizes if size <= max(sample.num_rows, 1)]
    return Sweep(found, placement)


def recommend(rows: Sequence[SweepRow]) -> SweepRow:
    """The largest size within 5% of the best throughput (see the module's docstring)."""
    best = max(r.rows_per_second for r in rows)
    near = [r for r in rows if r.rows_per_second >= KNEE * best]
    return max(near, key=lambda r: r.batch_size)


def _starts(rows: int, size: int) -> Iterator[int]:
    """Where each measured batch starts: all over the sample, not at its first rows. A text
    model's sample is sorted shortest first, and its first rows judged every size on the
    shortest texts alone, where bigger batches win (MiniLM: 128 recommended, 5% slower
    than 64 on the whole job). One low-discrepancy sequence for every size, so each sees
    the same mix of lengths."""
    span = max(rows - size, 0) + 1
    for k in itertools.count():
        yield int((k * GOLDEN) % 1.0 * span)


def _sample(spec: JobSpec, plan: Plan, features: list[str], limit: int) -> pa.Table:
    reader = open_source(spec.source, spec.sink.keep_columns).reader(plan.schema, features)
    tables: list[pa.Table] = []
    rows = 0
    for shard in plan.shards:
        for chunk in reader.read(shard, 65536):
            tables.append(chunk.table.drop_null())
            rows += tables[-1].num_rows
            if rows >= limit:
                return pa.concat_tables(tables).slice(0, limit)
    return pa.concat_tables(tables) if tables else pa.table({f: [] for f in features})


def _measure(model: Model, sample: pa.Table, size: int) -> SweepRow:
    model.predict(sample.slice(0, size))  # warm-up: lazy initialisation is not throughput
    latencies: list[float] = []
    rows = 0
    starts = _starts(sample.num_rows, size)
    while sum(latencies) < MIN_SECONDS or len(latencies) < MIN_CALLS:
        batch = sample.slice(next(starts), size)
        clock = time.perf_counter()
        model.predict(batch)
        latencies.append(time.perf_counter() - clock)
        rows += batch.num_rows
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return SweepRow(
        size, rows / sum(latencies), statistics.median(latencies) * 1000, peak_kib / 1024
    )
