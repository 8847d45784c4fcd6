"""`thresher tune`'s measurement: every size judged on the same mix of rows."""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from thresher.plan import tune


class LengthRecorder:
    """A slow text model stand-in (0.1 s a call, so a size gets a handful of calls, as a
    real one does): remembers the lengths of the rows each call saw."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def predict(self, batch: pa.Table) -> Mapping[str, np.ndarray]:
        time.sleep(0.1)
        self.seen.append(batch.column("length").to_numpy())
        return {"prediction": np.zeros(batch.num_rows)}


def test_each_size_is_measured_across_the_sorted_sample_not_on_its_shortest_rows() -> None:
    """Sorted shortest first (as `sweep` sorts a text model's sample), the first rows are
    the shortest texts: measuring there favoured big batches. Every size must see rows
    from all over the sample, in about the same mix."""
    sample = pa.table({"length": np.arange(20_000)})  # row i has length i
    means = {}
    for size in (16, 128):
        model = LengthRecorder()
        tune._measure(model, sample, size)  # type: ignore[arg-type]
        measured = np.concatenate(model.seen[1:])  # the first call is the warm-up
        assert measured.max() > 15_000  # long rows are measured too...
        assert measured.min() < 5_000  # ...and short ones
        means[size] = measured.mean()
    assert abs(means[16] - means[128]) < 2_500  # both near the middle, 10,000


def test_batches_never_run_past_the_sample() -> None:
    starts = tune._starts(rows=100, size=64)
    firsts = [next(starts) for _ in range(1_000)]
    assert min(firsts) == 0 and max(firsts) <= 36
    assert len(set(firsts)) == 37  # every start is used


def test_recommend_takes_the_largest_size_within_five_percent() -> None:
    """Of the sizes the model runs at nearly its best, the one whose batches a job pays
    its per-batch costs for least often; not one past the knee where it slows down."""
    rows = [
        tune.SweepRow(16, 1_000.0, 1.0, 10.0),
        tune.SweepRow(64, 1_960.0, 1.0, 10.0),
        tune.SweepRow(256, 2_000.0, 1.0, 10.0),
        tune.SweepRow(1024, 1_930.0, 1.0, 10.0),
        tune.SweepRow(4096, 1_500.0, 1.0, 10.0),
    ]
    assert tune.recommend(rows).batch_size == 1024
