"""What a recording saw (`thresher.moments.recording`): the runs of doubles a model's
conversion read, by the address of each run's first value, with their moments; and the
moments of a profiled array found again from them, when recorded runs tile its values.

Most of the time a chunk's columns were converted in batches of rows taken in order, every
batch of the same columns, each batch's runs beginning where the last batch's ended: a
chain, whose columns' moments are the batches' added up (`_Chain`). Anything else (a model
that converts its own way, a batch retried in halves, threads that each convert a span)
is matched run by run against a table of runs sorted by address (`_Runs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

__all__ = ["Seen", "Sums", "address", "addresses"]

Sums = tuple[float, float, float, float]  # Σx, Σx², min, max


def address(values: pa.Array) -> int:
    """Where the first value of a fixed-width Arrow array lies in memory."""
    offset: int = values.offset * values.type.bit_width // 8
    return int(values.buffers()[1].address) + offset


def addresses(arrays: Sequence[pa.Array]) -> np.ndarray:
    """`address` of each array, as int64s."""
    return np.fromiter((address(a) for a in arrays), dtype=np.int64, count=len(arrays))


@dataclass
class Seen:
    """The moments of the runs of doubles converted while recording. `add` only keeps
    each call's figures (the model's thread waits on it); how they are found again (a
    chain, or the table of runs) is worked out when first asked, on the profiler's
    thread."""

    calls: list[tuple[list[int], int, np.ndarray]] = field(default_factory=list)
    _chain: _Chain | None = None
    _chain_known: bool = False  # whether `_chain` was worked out for these calls
    _runs: _Runs | None = None

    def add(self, starts: list[int], rows: int, sums: np.ndarray) -> None:
        """`rows` doubles at each address of `starts`, their moments a row of `sums`."""
        if rows <= 0:  # no values: nothing to say (and a run that tiles nothing)
            return
        self.calls.append((starts, rows, sums))
        self._chain, self._chain_known, self._runs = None, False, None

    def sums_of(self, values: pa.Array) -> Sums | None:
        """The moments of a float64 array without nulls, when recorded runs tile its
        values exactly (None otherwise: the caller reads the values itself)."""
        return self.sums_of_all([values])[0]

    def sums_of_all(self, arrays: Sequence[pa.Array]) -> list[Sums | None]:
        """`sums_of` of each of `arrays`, found for all of them at once."""
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        return self.sums_at(addresses(arrays), lengths)

    def sums_at(self, at: np.ndarray, lengths: np.ndarray | int) -> list[Sums | None]:
        """`sums_of_all` of the arrays of doubles at the addresses `at`, of `lengths`
        values each (one length for all, or one per array)."""
        if not len(at) or not any(starts for starts, _, _ in self.calls):
            return [None] * len(at)  # nothing recorded (or only runs of no columns)
        lengths = np.broadcast_to(np.asarray(lengths, dtype=np.int64), at.shape)
        if not self._chain_known:
            self._chain, self._chain_known = _Chain.of(self.calls), True
        found: list[Sums | None] = [None] * len(at)
        if self._chain is not None:
            found = self._chain.sums_at(at, lengths)
        missing = [i for i, sums in enumerate(found) if sums is None]
        if missing:  # not a whole column of the chain: run by run
            if self._runs is None:
                self._runs = _Runs.of(self.calls)
            again = self._runs.sums_at(at[missing], lengths[missing])
            for i, sums in zip(missing, again, strict=True):
                found[i] = sums
        return found


@dataclass(frozen=True)
class _Chain:
    """Calls of the same number of runs, each run beginning where the same run of the
    call before ended: each column one run from the first call's address, of all the
    calls' rows, its moments theirs added up."""

    first: dict[int, int]  # the first call's addresses: the column each begins
    size: int  # bytes in each column's run
    sums: list[Sums]

    @classmethod
    def of(cls, calls: Sequence[tuple[list[int], int, np.ndarray]]) -> _Chain | None:
        width = len(calls[0][0])
        if any(len(starts) != width for starts, _, _ in calls):
            return None
        starts = np.array([s for s, _, _ in calls], dtype=np.int64)  # a row per call
        rows = np.array([r for _, r, _ in calls], dtype=np.int64)
        if not np.array_equal(starts[1:], starts[:-1] + 8 * rows[:-1, np.newaxis]):
            return None
        first = {int(a): i for i, a in enumerate(starts[0].tolist())}
        if len(first) != width:  # two runs at one address: leave it to the table
            return None
        figures = np.stack([f for _, _, f in calls])  # (calls, columns, 4)
        total = figures[:, :, :2].sum(axis=0)
        low, high = figures[:, :, 2].min(axis=0), figures[:, :, 3].max(axis=0)
        sums = np.column_stack([total, low, high]).tolist()
        return cls(first, 8 * int(rows.sum()), [(a, b, c, d) for a, b, c, d in sums])

    def sums_at(self, at: np.ndarray, lengths: np.ndarray) -> list[Sums | None]:
        found: list[Sums | None] = []
        for address, size in zip(at.tolist(), (8 * lengths).tolist(), strict=True):
            column = self.first.get(address)
            found.append(self.sums[column] if column is not None and size == self.size else None)
        return found


@dataclass(frozen=True)
class _Runs:
    """The recorded runs sorted by where they begin. Where two runs began at one address,
    the same run twice is kept once, and two of different lengths (a batch the model
    retried in halves) are `unclear`: which tiles the values is not guessed. `breaks[i]`
    counts the places before run i where a run does not end where the next begins, so
    runs head..tail follow each other exactly when `breaks[tail] == breaks[head]`. `sums`
    has one row more than there are runs, so a range may end past the last."""

    starts: np.ndarray
    ends: np.ndarray
    sums: np.ndarray
    unclear: np.ndarray
    breaks: np.ndarray

    @classmethod
    def of(cls, calls: Sequence[tuple[list[int], int, np.ndarray]]) -> _Runs:
        starts = np.concatenate([np.asarray(s, dtype=np.int64) for s, _, _ in calls])
        rows = np.concatenate([np.full(len(s), r, dtype=np.int64) for s, r, _ in calls])
        sums = np.concatenate([figures for _, _, figures in calls])
        order = np.lexsort((rows, starts))
        starts, rows, sums = starts[order], rows[order], sums[order]
        twice = (starts[1:] == starts[:-1]) & (rows[1:] == rows[:-1])
        kept = np.concatenate([[True], ~twice])
        starts, rows, sums = starts[kept], rows[kept], sums[kept]
        clash = starts[1:] == starts[:-1]
        unclear = np.concatenate([clash, [False]]) | np.concatenate([[False], clash])
        ends = starts + 8 * rows
        linked = (ends[:-1] == starts[1:]) & ~unclear[:-1] & ~unclear[1:]
        breaks = np.concatenate([[0], np.cumsum(~linked)])
        padded = np.concatenate([sums, sums[-1:]])  # a last range's end, in bounds
        return cls(starts, ends, padded, unclear, breaks)

    def sums_at(self, at: np.ndarray, lengths: np.ndarray) -> list[Sums | None]:
        end = at + 8 * lengths
        first = np.searchsorted(self.starts, at)
        last = np.searchsorted(self.starts, end) - 1  # the last run that begins inside
        head, tail = np.minimum(first, len(self.starts) - 1), np.maximum(last, 0)
        tiled = (
            (last >= first)
            & (end > at)
            & (self.starts[head] == at)
            & (self.ends[tail] == end)
            & (self.breaks[tail] == self.breaks[head])  # each run ends where the next begins
            & ~self.unclear[head]
        )
        found: list[Sums | None] = [None] * len(at)
        if tiled.any():
            # each array's runs summed in one pass for all: a run range [head, tail + 1) per
            # array, the stretches between them computed and dropped (reduceat's way)
            bounds = np.column_stack([head[tiled], tail[tiled] + 1]).ravel()
            sums = self.sums
            total = np.add.reduceat(sums[:, 0], bounds)[::2]
            squares = np.add.reduceat(sums[:, 1], bounds)[::2]
            low = np.minimum.reduceat(sums[:, 2], bounds)[::2]
            high = np.maximum.reduceat(sums[:, 3], bounds)[::2]
            figures = np.column_stack([total, squares, low, high]).tolist()
            for i, row in zip(np.flatnonzero(tiled).tolist(), figures, strict=True):
                found[i] = (row[0], row[1], row[2], row[3])
        return found
