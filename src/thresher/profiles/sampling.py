"""Which rows a profile's quantile sketches see: a uniform Bernoulli sample, each row kept
with probability `sample_rate` independently of the others, so a sketch's cost does not
grow with the data (`[monitor] sample_rows` per job).

The gaps between kept rows of a Bernoulli sample are geometric, so drawing them costs the
sample, not the rows. A shard's rows are one stream of trials, chunk after chunk
(`RowSample`), the gaps drawn a block at a time: drawn afresh for each chunk, as they
were, the draw cost more than profiling a small column.

The uniforms behind the gaps are SplitMix64's outputs (Steele, Lea and Flood, 2014), the
counter's values mixed, in a few numpy operations: numpy's own generators live in
`numpy.random`, whose import cost each worker 16 ms of its first shard, more than the
sampling of a whole job.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["RowSample", "sample_rate_for", "uniforms"]

_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's step: the golden ratio, odd
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


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
        self._key = _mix(np.array([seed % (1 << 64)], dtype=np.uint64))[0]  # a stream per seed
        self._drawn = 0  # uniforms used so far
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
        u = uniforms(self._key, self._drawn, size)
        self._drawn += size
        gaps = np.floor(np.log(u) / math.log1p(-self.rate)).astype(np.int64) + 1  # geometric
        drawn = np.cumsum(gaps) + self._last
        self._ahead = np.concatenate([self._ahead, drawn])
        self._last = int(drawn[-1])


def uniforms(key: np.uint64, start: int, size: int) -> np.ndarray:
    """Uniforms in (0, 1): the stream `key`'s values `start` to `start + size`, each
    SplitMix64's mix of `key + (i + 1) * gamma` (integers modulo 2**64), so any stretch
    of the stream can be drawn alone."""
    counter = np.arange(start + 1, start + size + 1, dtype=np.uint64)
    bits = _mix(counter * _GAMMA + key)
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _MIX[0]
    z = (z ^ (z >> np.uint64(27))) * _MIX[1]
    mixed: np.ndarray = z ^ (z >> np.uint64(31))
    return mixed
