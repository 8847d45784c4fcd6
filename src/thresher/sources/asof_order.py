"""The one number the features source's ASOF JOIN matches a Parquet or Delta feature row
on (`asof.py`): its time, then its place among the files, so a (key, time) tie goes to
the row last in file order without a window function over the feature rows.

The plain form is a HUGEINT: the time in µs shifted past 64 bits of place. Comparing
HUGEINTs cost DuckDB a third more than its own join on the timestamp. Most feature
tables' times are whole seconds (or milliseconds), and then the time since the earliest
one, in those steps, and the place fit in a BIGINT: one scan of the time column and the
row numbers (60 ms over 10M rows) says whether they do, and the join runs on that.

That scan is a tenth of the join. So the join first runs on a guess made from the
entities' as-of times alone (`guessed_key`): whole seconds since a base the feature rows
that can match are not before, and few enough rows a file. The join checks each feature
row against the guess and stops at the first that does not fit; only then is the scan
made. A table's ttl is checked on the key as well (`OrderKey.oldest`), so the rows the
join sorts carry no time column beside it.

The key counts in µs, or in ns where the feature times or the as-of times are
timestamp[ns] (pandas' own, and pyarrow's default from it): a µs key would round them,
joining a row up to half a µs after its as-of time (`Clock`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BIGINT_BITS = 62  # a sign bit and a spare: the probe's "last place" adds one step below
HUGE_PLACE_BITS = 64  # the HUGEINT form: file position << 40, + row number
# in ns, a µs side's dates span ±2^68 ns (years 1 to 9999): 58 bits of place (2^18 files
# of 2^40 rows) leave the HUGEINT room
HUGE_NS_PLACE_BITS = 58
MISFIT = "thresher: a feature row outside the guessed join key"
SECOND = 1_000_000  # µs
MILLISECOND = 1_000

Span = tuple[int | None, int | None]  # the entities' earliest and latest as-of time, in ticks


@dataclass(frozen=True)
class Clock:
    """How the join's times become ticks: µs, or ns where the feature times or the as-of
    times are timestamp[ns]. A side in µs (or coarser) then counts its µs x 1000 as a
    HUGEINT: a cast to TIMESTAMP_NS fails for a date outside 1677-2262 (a `0001-01-01`
    "valid since" row)."""

    feature_ns: bool = False
    probe_ns: bool = False

    @property
    def nanos(self) -> bool:
        return self.feature_ns or self.probe_ns

    @property
    def per_us(self) -> int:
        return 1_000 if self.nanos else 1

    def feature(self, timestamp: str) -> str:
        """SQL for a feature time (a column or expression) since the epoch, in ticks."""
        return self._ticks(timestamp, self.feature_ns)

    def probe(self, timestamp: str) -> str:
        """SQL for an entity's as-of time since the epoch, in ticks."""
        return self._ticks(timestamp, self.probe_ns)

    def _ticks(self, timestamp: str, in_ns: bool) -> str:
        micros = f"epoch_us(CAST({timestamp} AS TIMESTAMP))"
        if not self.nanos:
            return micros
        return f"epoch_ns({timestamp})" if in_ns else f"({micros}::HUGEINT * 1000)"


@dataclass(frozen=True)
class OrderKey:
    """(time - base) // unit, then the file's position, then the row in the file; times,
    `base` and `unit` in the clock's ticks."""

    base: int = 0
    unit: int = 1
    row_bits: int = 40
    place_bits: int = HUGE_PLACE_BITS
    cast: str = "HUGEINT"
    guessed: bool = False  # then each feature row is checked to fit, or the query stops
    clock: Clock = field(default_factory=Clock)

    def feature(self, timestamp: str, position: str | None) -> str:
        """A feature row's key: `timestamp` its time column, `position` its file's
        1-based place in the plan's list (None: there is one file)."""
        rows = "file_row_number"
        place = rows
        if position is not None:
            place = f"(({position})::{self.cast} - 1) * {1 << self.row_bits} + {rows}"
        time = self.clock.feature(timestamp)
        key = f"{self._steps(time)} * {1 << self.place_bits} + {place}"
        if not self.guessed:
            return key
        fits = (
            f"{timestamp} IS NULL OR ({time} % {self.unit} = 0"
            f" AND {time} >= {self.base} AND {rows} < {1 << self.row_bits})"
        )
        return f"CASE WHEN {fits} THEN {key} ELSE error('{MISFIT}')::{self.cast} END"

    def probe(self, timestamp: str) -> str:
        """An entity's key: its as-of time, after every place of that time."""
        steps = self._steps(self.clock.probe(timestamp))
        return f"{steps} * {1 << self.place_bits} + {(1 << self.place_bits) - 1}"

    def oldest(self, timestamp: str, ttl_us: int) -> str:
        """The least key of a feature row at most `ttl_us` older than `timestamp` (an
        entity's as-of time): a matched row is fresh when its key is at least this, so
        the join carries no feature time beside the key. Below the feature rows' least
        steps (0 past the base; BIGINT's least for the plain form) it is clamped: a
        ttl longer than the table is old never overflows the key."""
        time = f"{self.clock.probe(timestamp)}::{self.cast}"
        ttl = ttl_us * self.clock.per_us
        least = 0 if self.cast == "BIGINT" else -(1 << 63) * self.clock.per_us
        since = f"greatest({time} - {ttl + self.base}, {least})"
        if self.unit > 1:  # in whole steps, rounded up (the steps here are ≥ 0)
            since = f"({since} + {self.unit - 1}) // {self.unit}"
        return f"{since} * {1 << self.place_bits}"

    def _steps(self, time: str) -> str:
        if self.base == 0 and self.unit == 1:
            return f"{time}::{self.cast}"
        return f"(({time}::{self.cast} - {self.base}) // {self.unit})"


HUGE = OrderKey()


def huge(clock: Clock) -> OrderKey:
    """The HUGEINT key, which any times fit."""
    place_bits = HUGE_NS_PLACE_BITS if clock.nanos else HUGE_PLACE_BITS
    return OrderKey(place_bits=place_bits, clock=clock)


def probe_span(conn: Any, probe: str, clock: Clock = HUGE.clock) -> Span:
    """The earliest and latest as-of time of table `probe`'s entities (`__ts`), in ticks."""
    time = clock.probe("__ts")
    first, last = conn.execute(f"SELECT min({time}), max({time}) FROM {probe}").fetchall()[0]
    return first, last


def guessed_key(
    span: Span, files: int, ttl_us: int | None, *, clock: Clock = HUGE.clock
) -> OrderKey | None:
    """A BIGINT key of whole seconds guessed from the entities alone: the feature rows that
    can match are at or before the latest as-of time (the join's bounds say so) and, with
    a ttl, not before the earliest less the ttl; without one, not more than the steps left
    by 2^32 rows a file before the latest. None where no such guess leaves room."""
    first, last = span
    if first is None or last is None:
        return None
    second = SECOND * clock.per_us
    file_bits = 0 if files == 1 else files.bit_length()
    latest = last // second
    if ttl_us is not None:
        base = (first - ttl_us * clock.per_us) // second
        row_bits = min(40, BIGINT_BITS - file_bits - (latest - base + 1).bit_length())
    else:
        row_bits = 32
        base = latest - (1 << (BIGINT_BITS - file_bits - row_bits)) + 1
    if row_bits < 20 or first // second < base:
        return None
    bits = (row_bits, row_bits + file_bits)
    return OrderKey(base * second, second, *bits, "BIGINT", guessed=True, clock=clock)


def order_key(
    conn: Any, features: str, timestamp: str, files: int, span: Span, *, clock: Clock = HUGE.clock
) -> OrderKey:
    """The BIGINT key when the rows of `features` (a FROM clause with its filters, whose
    rows carry `file_row_number`) and the entities' `span` fit one, else the HUGEINT one."""
    per = clock.per_us
    units = [SECOND * per, MILLISECOND * per, per][: 3 if clock.nanos else 2]  # s, ms, µs
    time = clock.feature(timestamp)
    whole = ", ".join(f"bool_and({time} % {unit} = 0)" for unit in units)
    low, high, rows, *fits = conn.execute(
        f"SELECT min({time}), max({time}), max(file_row_number), {whole} FROM {features}"
    ).fetchall()[0]
    first, last = span
    if low is None or first is None or last is None:
        return huge(clock)
    row_bits = int(rows).bit_length()
    place_bits = row_bits + files.bit_length()
    unit = next((u for u, fit in zip(units, fits, strict=True) if fit), 1)
    base = min(low, first) // unit * unit  # a whole step: the features' steps stay exact
    steps = (max(high, last) - base) // unit + 1
    if steps.bit_length() + place_bits > BIGINT_BITS:
        return huge(clock)
    return OrderKey(base, unit, row_bits, place_bits, "BIGINT", clock=clock)
