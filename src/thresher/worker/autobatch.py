"""`batch.size = "auto"`: find the batch size where throughput stops growing, per worker.

The tuner starts at its start size, the best so far, and doubles: each bigger size (the
challenger) is measured against the best so far, their batches taking turns, and wins if
its throughput beats the best's by more than `GAIN`. `FLAT_STEPS` losses in a row (or the ceiling)
settle it at the best. Taking turns is what makes the comparison fair: measured one
after the other, a size would be judged on other rows (a text model's rows come sorted
shortest first, and a longer row costs less per token, so later sizes looked better)
and at another moment of a shared machine's load. Each duel measures both sizes over at
least `SAMPLES` calls and `MIN_SECONDS` of model time each, as work over seconds (work is
rows, or tokens for a text model: see `observe`); a challenger that beats the best by
`DECISIVE` over `SAMPLES` calls each wins at once. Far below the knee a call is mostly
fixed cost and each doubling wins by that much; measured for `MIN_SECONDS` of model time
each, the small sizes' thousands of calls, each with the pipeline's own cost per batch,
took a 5-second LightGBM job a fifth of its time. Out of memory halves the size and caps
it there for good. `batch.max_memory` caps the input bytes of one batch. Only full
batches are measured, and the first call (model warm-up) is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GAIN = 1.05  # a size must beat the best so far by 5% to count as better
DECISIVE = 1.25  # ...and wins without further measurement if it beats it by 25%
FLAT_STEPS = 3  # sizes in a row without that gain before settling
SAMPLES = 3  # full batches measured at each size, at least...
MIN_SECONDS = 0.05  # ...and at least this much model time
SAMPLE_SECONDS = 1.0  # ...unless one size has already taken this long


@dataclass
class _Tally:
    """Measured calls at one size."""

    calls: int = 0
    work: float = 0.0
    seconds: float = 0.0

    def add(self, work: float, seconds: float) -> None:
        self.calls += 1
        self.work += work
        self.seconds += seconds

    def enough(self) -> bool:
        return (self.calls >= SAMPLES and self.seconds >= MIN_SECONDS) or (
            self.seconds > SAMPLE_SECONDS
        )

    def beats(self, other: _Tally) -> bool:
        """Decisively faster, each measured over `SAMPLES` calls at least."""
        return min(self.calls, other.calls) >= SAMPLES and self.rate > other.rate * DECISIVE

    @property
    def rate(self) -> float:
        return self.work / self.seconds


@dataclass
class BatchTuner:
    """The model batch size of one worker: fixed, or tuned from measured throughput."""

    fixed: int | None = None
    start: int = 64
    max_size: int = 65536
    max_memory: int | None = None
    size: int = field(init=False)
    settled: bool = field(init=False)
    _best: int = field(init=False, default=0)
    _challenger: int = field(init=False, default=0)
    _tallies: dict[int, _Tally] = field(init=False, default_factory=dict)
    _flat_steps: int = field(init=False, default=0)
    _warm: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.size = self.fixed or min(self.start, self.max_size)
        self.settled = self.fixed is not None
        self._best = self._challenger = self.size
        if not self.settled:
            self._next_challenger()
            self.size = self._best  # the first batches at the start size, then turns

    def batch_size(self, row_bytes: float) -> int:
        """The size for the next batch, under the memory cap for rows this wide."""
        if self.max_memory and row_bytes > 0:
            return max(1, min(self.size, int(self.max_memory // row_bytes)))
        return self.size

    def observe(self, rows: int, seconds: float, work: float | None = None) -> None:
        """Record one model call of `rows` rows that took `seconds`.

        `work` is what the call cost in the model's own units when rows differ in cost:
        tokens for a text model, whose rows come sorted shortest first. Rows by default."""
        if self.settled or rows < self.size or seconds <= 0:
            return
        if not self._warm:
            self._warm = True  # the first call pays for lazy initialisation
            return
        self._tallies.setdefault(self.size, _Tally()).add(rows if work is None else work, seconds)
        self.size = self._challenger if self.size == self._best else self._best  # take turns
        best, challenger = self._tallies.get(self._best), self._tallies.get(self._challenger)
        if (
            best
            and challenger
            and ((best.enough() and challenger.enough()) or challenger.beats(best))
        ):
            self._judge()

    def back_off(self, failed_rows: int) -> None:
        """A batch of `failed_rows` ran out of memory: halve, and never grow past that."""
        self.size = max(1, min(self.size, failed_rows) // 2)
        self.max_size = self.size
        self.settled = True

    def _judge(self) -> None:
        best, challenger = self._tallies[self._best], self._tallies[self._challenger]
        if challenger.rate > best.rate * GAIN:
            self._best, self._flat_steps = self._challenger, 0
        else:
            self._flat_steps += 1
        self._next_challenger()

    def _next_challenger(self) -> None:
        """Double the last challenger, or settle at the best."""
        self._tallies.clear()  # the next duel measures both afresh, side by side
        self._challenger *= 2
        if self._flat_steps >= FLAT_STEPS or self._challenger > self.max_size:
            self.size, self.settled = self._best, True
        else:
            self.size = self._challenger
