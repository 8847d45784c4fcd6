"""Which rows a profile's quantile sketches see: a uniform Bernoulli sample, each row kept
with probability `sample_rate` independently of the others, so a sketch's cost does not
grow with the data (`[monitor] sample_rows` per job).

The gaps between kept rows of a Bernoulli sample are geometric, so drawing them costs the
sample, not the rows. A shard's rows are one stream of trials, chunk after chunk
(`RowSample`), the gaps drawn a block at a time: drawn afresh for each chunk, as they
were, the draw cost more than profiling a small column.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["RowSample", "sample_rate_for"]


def sample_rate_for(rows: int | None, sample_rows: int) -> float:
    """The share of rows a job's quantile sketches see: `sample_rows` of `rows` expected
    (every row when the count is unknown, small, or `sample_rows` is 0)."""
    if not sample_rows or not rows or rows <= sample_rows:
        return 1.0
    return sample_rows / rows


class RowSample:
    """The rows kept, `take(rows)` after `take(rows)`: the positions within each next run
    of `rows` rows (None at a rate of 1: every row). Seeded, so a shard run again (retried,
    resumed) in the same chunks keeps the same rows."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self._rng = np.random.default_rng([seed, 0])
        self._ahead = np.empty(0, dtype=np.int64)  # kept rows drawn, counted from the next

    def take(self, rows: int) -> np.ndarray | None:
        if self.rate >= 1.0:
            return None
        while not len(self._ahead) or self._ahead[-1] < rows:
            self._draw(rows)
        cut = int(np.searchsorted(self._ahead, rows))
        taken = self._ahead[:cut]
        self._ahead = self._ahead[cut:] - rows
        return taken

    def _draw(self, rows: int) -> None:
        """Gaps enough, as a rule, to pass `rows` (a few standard deviations over)."""
        after = int(self._ahead[-1]) + 1 if len(self._ahead) else 0
        expected = max(rows - after, 1) * self.rate
        size = int(expected + 6 * math.sqrt(expected) + 16)
        gaps = self._rng.geometric(self.rate, size=size)
        self._ahead = np.concatenate([self._ahead, np.cumsum(gaps) + (after - 1)])
