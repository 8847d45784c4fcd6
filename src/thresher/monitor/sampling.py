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

    AHEAD = 4096

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self._rng = np.random.default_rng([seed, 0])
        self._base = 0  # the rows taken so far
        self._ahead = np.empty(0, dtype=np.int64)  # kept rows drawn, not yet taken
        self._last = -1  # the last of them

    def take(self, rows: int) -> np.ndarray | None:
        if self.rate >= 1.0:
            return None
        stop = self._base + rows
        while self._last < stop:
            self._draw(stop)
        cut = int(self._ahead.searchsorted(stop))
        taken = self._ahead[:cut] - self._base
        self._ahead, self._base = self._ahead[cut:], stop
        return taken

    def _draw(self, stop: int) -> None:
        """Gaps enough, as a rule, to pass row `stop` (a few standard deviations over),
        and at least `AHEAD`: a draw costs per call more than per gap."""
        expected = max(stop - self._last, 1) * self.rate
        size = max(int(expected + 6 * math.sqrt(expected) + 16), self.AHEAD)
        drawn = np.cumsum(self._rng.geometric(self.rate, size=size)) + self._last
        self._ahead = np.concatenate([self._ahead, drawn])
        self._last = int(drawn[-1])
