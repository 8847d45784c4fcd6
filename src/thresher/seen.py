"""What a recording saw (`thresher.moments.recording`): the runs of doubles a model's
conversion read, by the address of each run's first value, with their moments; and the
moments of a profiled array found again from them, when recorded runs tile its values.

Most of the time a chunk's columns are converted in batches of rows taken in order, every
batch of the same columns, each batch's runs beginning where the last batch's ended. Such
a call continues the last one (`Seen.extend`): the native pass adds its moments into the
same figures, so a chunk's columns end as one run each, their moments already summed,
and the profiler finds them all at once (`Seen.chain_sums`). Built call by call and put
together by the profiler, as it was, the chain cost that thread more than the
moments saved. Anything else (a model that converts its own way, a batch retried in
halves, threads that each convert a span) is matched run by run against a table of runs
sorted by address (`_Runs`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

__all__ = ["Seen", "Sums", "address", "addresses", "fresh_sums"]

Sums = tuple[float, float, float, float]  # Σx, Σx², min, max

_FRESH = np.array([0.0, 0.0, math.inf, -math.inf])
_FRESH.flags.writeable = False


def fresh_sums(columns: int) -> np.ndarray:
    """Running Σx, Σx², min and max for `columns` columns, before any value: what the
    native passes that add blocks into them (`thresher_reduce_into`) start from."""
    sums = np.empty((columns, 4))
    sums[:] = _FRESH  # a broadcast: cheaper than np.tile, and paid on every batch
    return sums


def address(values: pa.Array) -> int:
    """Where the first value of a fixed-width Arrow array lies in memory."""
    offset: int = values.offset * values.type.bit_width // 8
    return int(values.buffers()[1].address) + offset


def addresses(arrays: Sequence[pa.Array]) -> np.ndarray:
    """`address` of each array, as int64s."""
    return np.fromiter((address(a) for a in arrays), dtype=np.int64, count=len(arrays))


@dataclass
class Seen:
    """The moments of the runs of doubles converted while recording, as `segments`: each
    the addresses where a run per column begins, its rows, and a row of Σx, Σx², min and
    max per column. Recording only keeps figures (the model's thread waits on it); the
    table to find them again in is worked out when first asked, on the profiler's
    thread."""

    segments: list[tuple[list[int], int, np.ndarray]] = field(default_factory=list)
    _next: list[int] | None = None  # where a call continuing the last segment begins
    _runs: _Runs | None = None

    def extend(self, starts: list[int], rows: int) -> np.ndarray:
        """The figures a native pass over `rows` doubles at each address of `starts` adds
        its moments into (`fresh_sums`): the last segment's, when the call
        continues it (every run beginning where that segment's ended), else a new one's.
        One thread at a time: the pass must be done before the next call."""
        if rows <= 0:  # no values: nothing to say (and a run that tiles nothing)
            return fresh_sums(len(starts))
        self._runs = None
        if starts == self._next:
            first, before, sums = self.segments[-1]
            self.segments[-1] = (first, before + rows, sums)
        else:
            sums = fresh_sums(len(starts))
            self.segments.append((starts, rows, sums))
        self._next = [start + 8 * rows for start in starts]
        return sums

    def add(self, starts: list[int], rows: int, sums: np.ndarray) -> None:
        """`rows` doubles at each address of `starts`, their moments a row of `sums`: a
        segment of its own (calls that may come in any order, from threads)."""
        if rows <= 0:
            return
        self.segments.append((starts, rows, sums))
        self._next, self._runs = None, None

    def sums_of(self, values: pa.Array) -> Sums | None:
        """The moments of a float64 array without nulls, when recorded runs tile its
        values exactly (None otherwise: the caller reads the values itself)."""
        return self.sums_of_all([values])[0]

    def sums_of_all(self, arrays: Sequence[pa.Array]) -> list[Sums | None]:
        """`sums_of` of each of `arrays`, found for all of them at once."""
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        return self.sums_at(addresses(arrays), lengths)

    def chain_sums(self, at: np.ndarray, rows: int) -> np.ndarray | None:
        """The moments of the arrays of `rows` doubles at the addresses `at` (a row of
        Σx, Σx², min and max each) when they are exactly the runs of the one segment
        recorded, in its order: a chunk's columns converted batch after batch, the rule.
        None otherwise (`sums_at` finds what there is)."""
        if len(self.segments) != 1:
            return None
        starts, recorded, sums = self.segments[0]
        if recorded != rows or len(starts) != len(at) or at.tolist() != starts:
            return None
        return sums

    def sums_at(self, at: np.ndarray, lengths: np.ndarray | int) -> list[Sums | None]:
        """`sums_of_all` of the arrays of doubles at the addresses `at`, of `lengths`
        values each (one length for all, or one per array)."""
        if not len(at) or not any(starts for starts, _, _ in self.segments):
            return [None] * len(at)  # nothing recorded (or only runs of no columns)
        lengths = np.broadcast_to(np.asarray(lengths, dtype=np.int64), at.shape)
        if self._runs is None:
            self._runs = _Runs.of(self.segments)
        return self._runs.sums_at(at, lengths)


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
    def of(cls, segments: Sequence[tuple[list[int], int, np.ndarray]]) -> _Runs:
        starts = np.concatenate([np.asarray(s, dtype=np.int64) for s, _, _ in segments])
        rows = np.concatenate([np.full(len(s), r, dtype=np.int64) for s, r, _ in segments])
        sums = np.concatenate([figures for _, _, figures in segments])
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
