"""A shard profiler's running state for its columns of plain doubles, folded into the
profile when it is asked for: their moments, merged chunk after chunk for all of them at
once (`RunningMoments`), and their sampled values on the way to the quantile sketches
(`WaitingSamples`). What costs per chunk is Python's, per column; these keep it to a few
numpy operations for all the columns, and a sketch update per column every few ten
thousand values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from thresher.monitor.kernels import fold_moments
from thresher.monitor.profile import ColumnProfile, Moments

__all__ = ["RunningMoments", "WaitingSamples", "spread_lost"]


def spread_lost(total: Any, mean: Any, m2: Any) -> Any:
    """Whether a spread found from Σx and Σx² (`m2` = Σx² - Σx·mean) lost its digits to
    cancellation, a mean far from zero against a small spread: then only the exact
    two-pass way will do. Numbers or arrays alike; `thresher_fold_moments` asks the same
    in C."""
    return m2 < 1e-9 * abs(total * mean)


class RunningMoments:
    """The moments of many columns at once, merged chunk after chunk by Chan et al.'s
    pairwise update (as `Moments.merge` merges one), for all the columns of a chunk in one
    native call (`fold`) or a few numpy operations (`merge`). They are kept as one table,
    a column per profiled column and a row per figure (`COUNT`, `MEAN`, `M2`, `LOW`,
    `HIGH`; the count a double, exact to 2**53 rows), so the native call is told where
    they are in one pointer."""

    COUNT, MEAN, M2, LOW, HIGH = range(5)

    def __init__(self) -> None:
        self._names: dict[str, int] = {}
        self._places: dict[tuple[str, ...], np.ndarray | slice] = {}  # a chunk's columns, in place
        self._table = np.zeros((5, 0))
        self._address = self._table.ctypes.data  # where it lies, as it changes

    def merge(
        self,
        names: tuple[str, ...],
        rows: int,
        *,
        mean: np.ndarray,
        m2: np.ndarray,
        low: np.ndarray,
        high: np.ndarray,
    ) -> None:
        """Merge `rows` values of each column of `names` (their means, sums of squared
        deviations, minima and maxima)."""
        at = self._place(names)
        figures = self._table
        before = figures[self.COUNT, at]
        total = before + rows
        delta = mean - figures[self.MEAN, at]
        step = figures[self.MEAN, at] + delta * rows / total
        figures[self.MEAN, at] = np.where(before == 0, mean, step)
        figures[self.M2, at] += m2 + delta * delta * before * rows / total
        figures[self.COUNT, at] = total
        figures[self.LOW, at] = np.minimum(figures[self.LOW, at], low)
        figures[self.HIGH, at] = np.maximum(figures[self.HIGH, at], high)

    def fold(self, names: tuple[str, ...], rows: int, sums: np.ndarray) -> list[int]:
        """Merge columns `names` of `rows` values each, `sums` a row of Σx, Σx², min and
        max per column, in one native call where the columns lie in place (the rule, a
        chunk after the first). What it leaves (see `kernels.fold_moments`: nan or inf
        among the values, or a spread cancellation ate) is the caller's: the positions
        in `names` are returned."""
        at = self._place(names)
        if isinstance(at, slice):
            start = self._address + 8 * at.start
            left = fold_moments(sums, rows, start, self._table.shape[1])
            if left is not None:
                return left
        total, squares = sums[:, 0], sums[:, 1]
        mean = total / rows
        m2 = squares - total * mean
        kept = np.isfinite(total) & ~spread_lost(total, mean, m2)
        if kept.all():
            self.merge(names, rows, mean=mean, m2=m2, low=sums[:, 2], high=sums[:, 3])
            return []
        chosen = np.flatnonzero(kept)
        merged = tuple(names[i] for i in chosen)
        low, high = sums[chosen, 2], sums[chosen, 3]
        self.merge(merged, rows, mean=mean[chosen], m2=m2[chosen], low=low, high=high)
        return np.flatnonzero(~kept).tolist()

    def folded(self) -> list[tuple[str, Moments]]:
        """Each column's moments so far."""
        count, mean, m2, low, high = self._table.tolist()
        return [
            (name, Moments(int(count[i]), low[i], high[i], mean[i], m2[i]))
            for name, i in self._names.items()
        ]

    def _place(self, names: tuple[str, ...]) -> np.ndarray | slice:
        at = self._places.get(names)
        if at is None:
            new = [name for name in dict.fromkeys(names) if name not in self._names]
            for name in new:
                self._names[name] = len(self._names)
            fresh = np.zeros((5, len(new)))
            fresh[self.LOW], fresh[self.HIGH] = math.inf, -math.inf
            self._table = np.ascontiguousarray(np.concatenate([self._table, fresh], axis=1))
            self._address = self._table.ctypes.data
            at = np.array([self._names[n] for n in names], dtype=np.intp)
            if len(at) and np.array_equal(at, np.arange(at[0], at[0] + len(at))):
                at = slice(int(at[0]), int(at[0]) + len(at))  # a view: no copies in `merge`
            self._places[names] = at
        return at


class WaitingSamples:
    """Sampled values on their way to their columns' KLL sketches. A sketch update costs
    per call, and so does a sort: the values wait here and go to a sketch `FLUSH` or more
    at a time, sorted (KLL's bound holds in any order, and its compactions, which sort,
    then take a third less of the time). A chunk's sample of its plain columns waits as
    the one matrix it was gathered into, and the matrices of a run of chunks go to the
    sketches sorted row by row in one call: kept column by column, the bookkeeping alone
    cost more than the sort."""

    FLUSH = 1 << 15

    def __init__(self) -> None:
        self._blocks: dict[tuple[str, ...], list[np.ndarray]] = {}
        self._columns: dict[tuple[str, ...], list[ColumnProfile]] = {}
        self._sizes: dict[tuple[str, ...], int] = {}

    def add(self, column: ColumnProfile, values: np.ndarray) -> None:
        """Keep `values` (a copy is taken if they are Arrow's memory)."""
        values = values if values.flags.owndata else values.copy()
        self.add_rows([column], values[np.newaxis])

    def add_rows(
        self, columns: list[ColumnProfile], block: np.ndarray, names: tuple[str, ...] | None = None
    ) -> None:
        """Keep row i of `block` (a matrix of this profiler's own) for `columns[i]`
        (whose `names` the caller may know already)."""
        key = names or tuple(column.name for column in columns)
        blocks = self._blocks.get(key)
        if blocks is None:
            blocks = self._blocks[key] = []
            self._columns[key] = columns
        blocks.append(block)
        size = self._sizes[key] = self._sizes.get(key, 0) + block.shape[1]
        if size >= self.FLUSH:
            self._flush(key)

    def flush_all(self) -> None:
        for key in list(self._blocks):
            self._flush(key)

    def _flush(self, key: tuple[str, ...]) -> None:
        blocks, columns = self._blocks.pop(key), self._columns.pop(key)
        self._sizes.pop(key)
        values = np.concatenate(blocks, axis=1) if len(blocks) > 1 else blocks[0]
        values.sort(axis=1)
        for column, row in zip(columns, values, strict=True):
            if column.quantiles is not None:
                column.quantiles.update(row)
