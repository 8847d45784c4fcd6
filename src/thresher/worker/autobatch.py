"""`batch.size = "auto"`: find the batch size where throughput stops growing, per worker.

The tuner starts at its start size, the best so far, and doubles: each bigger size (the
challenger) is measured against the best so far, their batches taking turns, and wins if
its throughput beats the best's by more than `GAIN`. `FLAT_STEPS` losses in a row (or the
ceiling) settle it at the best. Taking turns is what makes the comparison fair to a shared
machine whose load changes under the duel. Each duel measures both sizes over at least
`SAMPLES` calls and `MIN_SECONDS` of model time each; a challenger that beats the best by
`DECISIVE` over `SAMPLES` calls each wins at once. Far below the knee a call is mostly
fixed cost and each doubling wins by that much; measured for `MIN_SECONDS` of model time
each, the small sizes' thousands of calls, each with the pipeline's own cost per batch,
took a 5-second LightGBM job a fifth of its time.

Rows of equal cost make throughput rows per second. A text model's rows are not equal: a
chunk's rows come sorted shortest first, each batch padded to its longest row, and a call
costs a fixed part plus a part per padded token. So each size's calls are fitted to that
line (`_Tally.seconds`), and its throughput is the chunk's tokens over the seconds the
line predicts for the chunk cut in batches of that size: the padding a bigger batch adds
is counted where it falls, not where the duel happened to measure it. Judged on the tokens
per second of the batches it ran, MiniLM settled at 512 rows on 1,000-row shards, where
512 ran 2.5 times slower than 64: a batch of half a sorted chunk pads to its longest row, and
the shorter rows the small size was measured on cost more per token. A challenger's turn
waits while the chunk has fewer rows left than its size: a partial batch measures nothing.
And a text model's challenger needs a chunk of `CHUNK_BATCHES` of its batches: bigger, it
pads a large part of the chunk to one length and is measured once or twice per chunk, so
its duel costs more than the size could win (MiniLM on 1,000-row shards, 4,000 texts: 43 s
tuned against 33 s at 64, with the 512-row duel running over three of the four shards).

A text model under "auto" is batched by padded tokens, not rows (`tokens`): a size is a
budget, and a batch takes as many of the sorted rows as fit in it, padded to its longest.
A row count tuned on a chunk's short head is wrong for its long tail: MiniLM on one CPU
thread runs fastest at 256 rows of 8 tokens but 16-32 rows of 64-96 (bigger batches of
long rows spill the caches: 25% more per token at 256 rows of 64), and as a row count the
tuner settled at 128 rows, 14% slower over a batch of mixed texts than 64. A budget of
1,024-2,048 tokens is within a few percent of the best at every length, so what a duel
finds on the short rows holds on the long ones.

A call's seconds are the whole batch's in the worker (`ShardWork.predict`): the model
call and the batch's own costs around it (its missing-value check, slicing, the output
table), which a bigger batch pays less often. Timed on the model call alone, a fast
model's calls look flat at sizes where the job still runs faster with bigger batches.

Out of memory halves the size and caps it there for good. `batch.max_memory` caps the input
bytes of one batch. Only full batches are measured, and the first call (model warm-up) is
ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GAIN = 1.05  # a size must beat the best so far by 5% to count as better
DECISIVE = 1.25  # ...and wins without further measurement if it beats it by 25%
FLAT_STEPS = 3  # sizes in a row without that gain before settling
SAMPLES = 3  # full batches measured at each size, at least...
MIN_SECONDS = 0.05  # ...and at least this much model time
SAMPLE_SECONDS = 1.0  # ...unless one size has already taken this long
CHUNK_BATCHES = 4  # a text model's challenger needs a chunk this many of its batches long
START_TOKENS = 1024  # a text model's first budget of padded tokens per batch


@dataclass
class _Tally:
    """Measured calls at one size: each call's work and seconds."""

    work: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def add(self, work: float, seconds: float) -> None:
        self.work.append(work)
        self.seconds.append(seconds)

    def enough(self) -> bool:
        total = sum(self.seconds)
        return (len(self.seconds) >= SAMPLES and total >= MIN_SECONDS) or total > SAMPLE_SECONDS

    def predict(self, work: np.ndarray) -> float:
        """Seconds for calls of this much work each: the measured calls' fixed cost and
        cost per unit of work, fitted; when the fit has no slope to find (every call the
        same work) or finds a negative part, seconds in proportion to work."""
        x, y = np.asarray(self.work), np.asarray(self.seconds)
        spread = float(((x - x.mean()) ** 2).sum())
        if spread > 0:  # least squares, by hand: np.polyfit warns on near-equal x
            per_work = float(((x - x.mean()) * (y - y.mean())).sum()) / spread
            per_call = float(y.mean()) - per_work * float(x.mean())
            if per_work >= 0 and per_call >= 0:
                return per_call * len(work) + per_work * float(work.sum())
        if x.sum() <= 0:  # rows of no length (prompts an LLM row lacks): a cost per call
            return float(y.mean()) * len(work)
        return float(y.sum() / x.sum() * work.sum())


@dataclass
class BatchTuner:
    """The model batch size of one worker: fixed, or tuned from measured throughput.

    With `tokens` (a text model whose chunks come sorted by length, under "auto"), a size
    is a budget of padded tokens, and a batch takes as many rows as fit in it."""

    fixed: int | None = None
    start: int | None = None  # 64 rows, or START_TOKENS padded tokens
    max_size: int = 65536  # rows, in either unit
    max_memory: int | None = None
    tokens: bool = False
    size: int = field(init=False)  # the best size so far; the size it settled at
    settled: bool = field(init=False)
    _challenger: int = field(init=False, default=0)
    _challenger_next: bool = field(init=False, default=False)  # sizes take turns
    _tallies: dict[int, _Tally] = field(init=False, default_factory=dict)
    _flat_steps: int = field(init=False, default=0)
    _warm: bool = field(init=False, default=False)
    _lengths: np.ndarray | None = field(init=False, default=None)  # the chunk's, sorted
    _cuts: dict[int, np.ndarray] = field(init=False, default_factory=dict)  # budget: works
    _issued: int | None = field(init=False, default=None)  # the last full batch's budget
    _rows_issued: list[int] = field(init=False, default_factory=lambda: [0, 0])

    def __post_init__(self) -> None:
        self.tokens = self.tokens and self.fixed is None
        start = self.start or (START_TOKENS if self.tokens else 64)
        self.size = self._challenger = self.fixed or (
            start if self.tokens else min(start, self.max_size)
        )
        self.settled = self.fixed is not None
        if not self.settled:
            self._next_challenger()  # the first batches at the start size, then turns

    @property
    def batch_rows(self) -> int:
        """Rows per batch in the last chunk: the size, or what a token budget made."""
        rows, batches = self._rows_issued
        return round(rows / batches) if self.tokens and batches else self.size

    def begin_chunk(self, lengths: np.ndarray | None) -> None:
        """The next batches come from one chunk; `lengths`: a text model's row lengths,
        sorted shortest first as the batches take them (None: rows of equal cost)."""
        self._lengths = lengths
        self._cuts.clear()
        self._rows_issued = [0, 0]

    def batch_size(self, row_bytes: float, rows_left: int | None = None) -> int:
        """The rows of the next batch, under the memory cap for rows this wide;
        `rows_left`: the chunk's rows not yet batched."""
        size = self._challenger if self._challenger_next and self._fits(rows_left) else self.size
        rows = size
        if self.tokens:
            rows = self._rows_in_budget(size, rows_left)
            if self._issued is None and size != self.size:  # the challenger would not fill it
                rows = self._rows_in_budget(self.size, rows_left)
        if self.max_memory and row_bytes > 0:
            capped = max(1, min(rows, int(self.max_memory // row_bytes)))
            if capped < rows:
                self._issued = None
            rows = capped
        self._rows_issued[0] += rows
        self._rows_issued[1] += 1
        return rows

    def observe(self, rows: int, seconds: float, work: float | None = None) -> None:
        """Record one model call of `rows` rows that took `seconds`.

        `work` is what the call computed in the model's own units when rows differ in
        cost: for a text model, its rows times the longest row's tokens. Rows by default."""
        measured = self._issued if self.tokens else rows
        if self.settled or seconds <= 0 or measured not in (self.size, self._challenger):
            return  # a partial batch, or one the memory cap cut
        if not self._warm:
            self._warm = True  # the first call pays for lazy initialisation
            return
        self._tallies.setdefault(measured, _Tally()).add(rows if work is None else work, seconds)
        self._challenger_next = measured == self.size
        best, challenger = self._tallies.get(self.size), self._tallies.get(self._challenger)
        if not (best and challenger):
            return
        judged = best.enough() and challenger.enough()
        if not judged and min(len(best.seconds), len(challenger.seconds)) < SAMPLES:
            return  # too soon to judge (the fits below cost more than a small batch's call)
        gain = self._throughput(challenger, self._challenger) / self._throughput(best, self.size)
        if judged or gain > DECISIVE:
            if gain > GAIN:
                self.size, self._flat_steps = self._challenger, 0
            else:
                self._flat_steps += 1
            self._next_challenger()

    def back_off(self, failed_rows: int) -> None:
        """A batch of `failed_rows` ran out of memory: halve it (unless it was a
        challenger bigger than the best), and never grow past that."""
        failed = (self._issued or self.size) if self.tokens else failed_rows
        halved = max(1, failed // 2 if failed <= self.size else self.size)
        self.size = halved
        if not self.tokens:
            self.max_size = halved
        self.settled, self._challenger_next = True, False

    def _fits(self, rows_left: int | None) -> bool:
        """Whether the challenger may take the next batch: only a full batch measures
        anything, and a text model's chunk must hold `CHUNK_BATCHES` of its batches."""
        challenger, lengths = self._challenger, self._lengths
        if self.tokens:
            return lengths is not None and len(self._cut(challenger)) >= CHUNK_BATCHES
        if rows_left is not None and rows_left < challenger:
            return False
        return lengths is None or len(lengths) >= CHUNK_BATCHES * challenger

    def _rows_in_budget(self, budget: int, rows_left: int | None) -> int:
        """The most rows from here on whose padded tokens fit `budget` (at least one);
        the budget is `_issued` when it was what cut the batch."""
        lengths = self._lengths
        self._issued = None
        if lengths is None or rows_left is None:
            return max(1, min(rows_left or 1, self.max_size))
        start = len(lengths) - rows_left
        rows = _fitting(lengths[start : start + min(rows_left, self.max_size)], budget)
        if rows < min(rows_left, self.max_size):
            self._issued = budget
        return rows

    def _cut(self, budget: int) -> np.ndarray:
        """The padded tokens of each batch the chunk makes at `budget`."""
        if budget not in self._cuts:
            lengths, works, start = self._lengths, [], 0
            assert lengths is not None
            while start < len(lengths):
                rows = _fitting(lengths[start : start + self.max_size], budget)
                works.append(rows * max(int(lengths[start + rows - 1]), 1))
                start += rows
            self._cuts[budget] = np.asarray(works, dtype=np.float64)
        return self._cuts[budget]

    def _throughput(self, tally: _Tally, size: int) -> float:
        """Rows (or a text model's tokens) per second at `size`: for text, the chunk's
        tokens over the seconds its batches of `size` would take, each padded."""
        lengths = self._lengths
        if lengths is None or len(lengths) == 0 or lengths[-1] <= 0:
            return size / tally.predict(np.array([size], dtype=np.float64))
        if self.tokens:
            return float(lengths.sum()) / tally.predict(self._cut(size))
        ends = np.minimum(np.arange(size, len(lengths) + size, size), len(lengths))
        padded = np.diff(ends, prepend=0) * lengths[ends - 1].astype(np.float64)
        return float(lengths.sum()) / tally.predict(padded)

    def _next_challenger(self) -> None:
        """Double the last challenger, or settle at the best."""
        self._tallies.clear()  # the next duel measures both afresh, side by side
        self._challenger_next = False
        self._challenger *= 2
        too_big = not self.tokens and self._challenger > self.max_size
        if self._flat_steps >= FLAT_STEPS or too_big:
            self.settled = True


def _fitting(lengths: np.ndarray, budget: int) -> int:
    """How many of `lengths` (sorted shortest first) make a batch of at most `budget`
    padded tokens, each row padded to the last one's length; at least one."""
    # No more rows fit than the budget over the shortest row's length: look no further,
    # or each batch would cost a pass over the rest of the chunk.
    lengths = lengths[: budget // max(int(lengths[0]), 1) + 1]
    padded = np.arange(1, len(lengths) + 1) * np.maximum(lengths, 1)
    return max(1, int(np.searchsorted(padded, budget, side="right")))
