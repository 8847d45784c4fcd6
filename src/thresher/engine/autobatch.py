"""`batch.size = "auto"`: find the batch size where throughput stops growing, per worker.

The tuner starts small and doubles the size while measured rows/s keeps rising by more
than `GAIN`; `FLAT_STEPS` steps in a row without such a gain (or the ceiling) settle it at
the best size seen. Each size is measured over at least `MIN_SECONDS` of model time, as
work over seconds in total (work is rows, or tokens for a text model: see `observe`):
single small calls are too noisy to rank sizes by. Out of
memory halves the size and caps it there for good. `batch.max_memory` caps the input
bytes of one batch. Only full batches are measured, and the first call (model warm-up) is
ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GAIN = 1.05  # a size must beat the best so far by 5% to count as better
FLAT_STEPS = 3  # sizes in a row without that gain before settling
SAMPLES = 3  # full batches measured at each size, at least...
MIN_SECONDS = 0.05  # ...and at least this much model time
SAMPLE_SECONDS = 1.0  # ...unless one size has already taken this long


@dataclass
class BatchTuner:
    """The model batch size of one worker: fixed, or tuned from measured throughput."""

    fixed: int | None = None
    start: int = 64
    max_size: int = 65536
    max_memory: int | None = None
    size: int = field(init=False)
    settled: bool = field(init=False)
    _best: tuple[int, float] = field(init=False, default=(0, 0.0))
    _calls: int = field(init=False, default=0)
    _work: float = field(init=False, default=0.0)
    _seconds: float = field(init=False, default=0.0)
    _flat_steps: int = field(init=False, default=0)
    _warm: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.size = self.fixed or min(self.start, self.max_size)
        self.settled = self.fixed is not None

    def batch_size(self, row_bytes: float) -> int:
        """The size for the next batch, under the memory cap for rows this wide."""
        if self.max_memory and row_bytes > 0:
            return max(1, min(self.size, int(self.max_memory // row_bytes)))
        return self.size

    def observe(self, rows: int, seconds: float, work: float | None = None) -> None:
        """Record one model call of `rows` rows that took `seconds`.

        `work` is what the call cost in the model's own units when rows differ in cost:
        tokens for a text model. Its rows come sorted shortest first, so each bigger size
        is measured on longer rows, and rows/s would fall for that reason alone; work/s
        compares the sizes fairly. Rows by default."""
        if self.settled or rows < self.size or seconds <= 0:
            return
        if not self._warm:
            self._warm = True  # the first call pays for lazy initialisation
            return
        self._calls += 1
        self._work += rows if work is None else work
        self._seconds += seconds
        enough = self._calls >= SAMPLES and self._seconds >= MIN_SECONDS
        if enough or self._seconds > SAMPLE_SECONDS:
            self._step(self._work / self._seconds)

    def back_off(self, failed_rows: int) -> None:
        """A batch of `failed_rows` ran out of memory: halve, and never grow past that."""
        self.size = max(1, min(self.size, failed_rows) // 2)
        self.max_size = self.size
        self.settled = True

    def _step(self, rate: float) -> None:
        if rate > self._best[1] * GAIN:
            self._best, self._flat_steps = (self.size, rate), 0
        else:
            self._flat_steps += 1
        self._calls, self._work, self._seconds = 0, 0.0, 0.0
        if self._flat_steps >= FLAT_STEPS or self.size * 2 > self.max_size:
            self.size, self.settled = self._best[0] or self.size, True
        else:
            self.size *= 2
