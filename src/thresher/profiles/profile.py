"""Column profiles: what a job's inputs and outputs looked like, in a size that does not grow
with its rows, and that merges shard by shard.

A `ColumnProfile` holds, for one column:

- `rows` and `nulls`: exact, Arrow's metadata of every chunk;
- `nan` and `inf`: of floats, counted among the sampled values (`scanned`) and scaled to
  the column (exact where the sample is every row); other types hold neither, so every
  value of theirs is `scanned`, exactly;
- `moments` (count, min, max, mean, variance; merged by Chan's rule) and `quantiles` (an
  Apache DataSketches KLL sketch, k = 200) of the finite values of a uniform sample of the
  rows (`[monitor] sample_rows` per job; every row for a small job, where they are exact);
- for categorical columns (text of few values, booleans, integer or text outputs): a
  frequent-items sketch of the values and an HLL distinct-count sketch, of the sample for
  inputs, of every value for outputs (class labels, counted exactly); `counted` says how
  many values the counts are out of;
- for text of many values (`kind = "text"`): the moments and quantiles of its lengths;
- for numeric outputs within [0, 1]: a 20-bin histogram over [0, 1] of the sample, ready
  for calibration once actuals arrive.

Each figure says whether it is exact or an estimate, and its error (`monitor.accuracy`).
A `Profile` is the columns of one shard or job (`role` input or output), and optionally
the same per value of `[monitor] segment_by`. Sketches travel in JSON as hex (each column
says `"sketches": "hex"`; earlier profiles held base64, and are read still).

Versions: 1 held moments of every row (exact; read as such); 2 holds the sample's and
`counted`, with `nan` and `inf` of every row (read as exact); 3 counts `nan` and `inf`
among the `scanned` values of the sample. A profile of a later version is refused with
a message, not misread.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import datasketches as ds
import orjson

from thresher.errors import MonitorError
from thresher.profiles.accuracy import column_errors

__all__ = [
    "PROBABILITY_BINS",
    "VERSION",
    "ColumnProfile",
    "Moments",
    "Profile",
    "merge_profiles",
]

KLL_K = 200
FREQUENT_LG_MAP = 10  # up to 768 values counted exactly before the sketch starts to purge
HLL_LG_K = 12  # about 1.6% relative error on the distinct count
PROBABILITY_BINS = 20
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
VERSION = 3  # what `Profile.to_json` writes; see the module docstring

Kind = Literal["numeric", "categorical", "text", "other"]
Role = Literal["input", "output"]


@dataclass
class Moments:
    """Count, min, max, mean and the sum of squared deviations of finite values (a
    sample's, or every row's where the sample is every row)."""

    count: int = 0
    min: float = math.inf
    max: float = -math.inf
    mean: float = 0.0
    m2: float = 0.0

    @property
    def variance(self) -> float:
        """The population variance (ddof 0), 0 for no values."""
        return self.m2 / self.count if self.count else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    def merge(self, other: Moments) -> None:
        """Chan et al.'s pairwise update: exact in the order merged."""
        if not other.count:
            return
        if not self.count:
            self.count, self.min, self.max = other.count, other.min, other.max
            self.mean, self.m2 = other.mean, other.m2
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean += delta * other.count / total
        self.m2 += other.m2 + delta * delta * self.count * other.count / total
        self.count = total
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)

    def to_json(self) -> dict[str, Any]:
        finite = bool(self.count)
        return {
            "count": self.count,
            "min": self.min if finite else None,
            "max": self.max if finite else None,
            "mean": self.mean,
            "m2": self.m2,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Moments:
        count = int(data["count"])
        low, high = data["min"], data["max"]
        return cls(
            count,
            math.inf if low is None else float(low),
            -math.inf if high is None else float(high),
            float(data["mean"]),
            float(data["m2"]),
        )


@dataclass
class ColumnProfile:
    """One column of a shard or job (see the module docstring)."""

    name: str
    role: Role
    kind: Kind
    rows: int = 0
    nulls: int = 0
    sampled_nan: int = 0  # nan among the `scanned` values
    sampled_inf: int = 0
    scanned: int = 0  # the values looked at for nan and inf (every value of other types)
    moments: Moments = field(default_factory=Moments)
    quantiles: ds.kll_doubles_sketch | None = None
    frequent: ds.frequent_strings_sketch | None = None
    distinct: ds.hll_sketch | None = None
    probability: list[int] | None = None  # PROBABILITY_BINS counts over [0, 1]
    counted: int = 0  # the values `frequent`'s counts are out of (all, or the sample's)

    @classmethod
    def empty(cls, name: str, role: Role, kind: Kind) -> ColumnProfile:
        column = cls(name, role, kind)
        if kind != "other":  # numbers, or text's lengths
            column.quantiles = ds.kll_doubles_sketch(KLL_K)
        if kind == "categorical":
            column.frequent = ds.frequent_strings_sketch(FREQUENT_LG_MAP)
            column.distinct = ds.hll_sketch(HLL_LG_K)
        if kind == "numeric" and role == "output":
            column.probability = [0] * PROBABILITY_BINS
        return column

    def become_text(self) -> None:
        """Too many values to count as categories: keep the lengths (always tracked)."""
        self.kind, self.frequent, self.distinct = "text", None, None

    @property
    def nan(self) -> int:
        """The column's nan: the sample's, scaled (exact when `nan_exact`)."""
        return self._scaled(self.sampled_nan)

    @property
    def inf(self) -> int:
        return self._scaled(self.sampled_inf)

    @property
    def nan_exact(self) -> bool:
        """Whether `nan` and `inf` are counts of every value, not estimates."""
        return self.scanned >= self.rows - self.nulls

    @property
    def population(self) -> int:
        """The values the column's figures describe: its finite (or, for text, non-null)
        values, every row's (an estimate where `nan_exact` is not)."""
        return self.rows - self.nulls - self.nan - self.inf

    def _scaled(self, sampled: int) -> int:
        if not sampled or self.nan_exact:
            return sampled
        return round(sampled * (self.rows - self.nulls) / self.scanned)

    def top(self, limit: int = 10) -> list[tuple[str, int]]:
        """The most frequent values with their counts among the column's non-null values:
        exact for a column counted whole (outputs, or a sample of every row) while the
        sketch holds every value (up to 768); else the sample's counts scaled up."""
        if self.frequent is None or self.frequent.is_empty() or not self.counted:
            return []
        scale = (self.rows - self.nulls) / self.counted
        items = self.frequent.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_NEGATIVES)
        return [(str(value), round(estimate * scale)) for value, estimate, *_ in items[:limit]]

    def merge(self, other: ColumnProfile) -> None:
        if self.kind != other.kind and "text" in (self.kind, other.kind):
            self.become_text()
        self.rows += other.rows
        self.nulls += other.nulls
        self.sampled_nan += other.sampled_nan
        self.sampled_inf += other.sampled_inf
        self.scanned += other.scanned
        self.counted += other.counted
        self.moments.merge(other.moments)
        if self.quantiles is not None and other.quantiles is not None:
            self.quantiles.merge(other.quantiles)
        if self.frequent is not None and other.frequent is not None:
            self.frequent.merge(other.frequent)
        if self.distinct is not None and other.distinct is not None:
            union = ds.hll_union(HLL_LG_K)
            union.update(self.distinct)
            union.update(other.distinct)
            self.distinct = union.get_result()
        if self.probability is not None:
            theirs = other.probability
            self.probability = (
                None
                if theirs is None
                else [a + b for a, b in zip(self.probability, theirs, strict=True)]
            )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "role": self.role,
            "kind": self.kind,
            "rows": self.rows,
            "nulls": self.nulls,
            "sampled_nan": self.sampled_nan,
            "sampled_inf": self.sampled_inf,
            "scanned": self.scanned,
            "moments": self.moments.to_json(),
            "counted": self.counted,
            "sketches": "hex",
        }
        if self.quantiles is not None:
            out["quantiles"] = self.quantiles.serialize().hex()
        if self.frequent is not None:
            out["frequent"] = self.frequent.serialize().hex()
        if self.distinct is not None:
            out["distinct"] = self.distinct.serialize_compact().hex()
        if self.probability is not None:
            out["probability"] = self.probability
        return out

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> ColumnProfile:
        column = cls(name, data["role"], data["kind"], int(data["rows"]), int(data["nulls"]))
        whole = "scanned" not in data  # versions 1 and 2 counted nan and inf in every value
        column.sampled_nan = int(data["nan" if whole else "sampled_nan"])
        column.sampled_inf = int(data["inf" if whole else "sampled_inf"])
        column.scanned = column.rows - column.nulls if whole else int(data["scanned"])
        column.moments = Moments.from_json(data["moments"])
        # version 1 counted every value: its counts are out of every non-null row
        column.counted = int(data.get("counted", column.rows - column.nulls))
        _unpack = bytes.fromhex if data.get("sketches") == "hex" else _from_base64
        if "quantiles" in data:
            column.quantiles = ds.kll_doubles_sketch.deserialize(_unpack(data["quantiles"]))
        if "frequent" in data:
            column.frequent = ds.frequent_strings_sketch.deserialize(_unpack(data["frequent"]))
        if "distinct" in data:
            column.distinct = ds.hll_sketch.deserialize(_unpack(data["distinct"]))
        column.probability = data.get("probability")
        return column

    def describe(self) -> dict[str, Any]:
        """The column's statistics as plain JSON (no sketches): what `thresher profile`
        and `GET /v1/jobs/{id}/profile` show, each figure's error under `"error"`
        (`monitor.accuracy`): `count` is every row's, `sampled` the sample's."""
        m = self.moments
        out: dict[str, Any] = {"role": self.role, "kind": self.kind, "rows": self.rows}
        out |= {"nulls": self.nulls, "nan": self.nan, "inf": self.inf, "count": self.population}
        out["sampled"] = m.count
        of = "length_" if self.kind in ("text", "categorical") else ""
        if m.count:
            out |= {f"{of}min": m.min, f"{of}max": m.max, f"{of}mean": m.mean}
            out[f"{of}std"] = m.std
        if self.quantiles is not None and not self.quantiles.is_empty():
            values = self.quantiles.get_quantiles(list(QUANTILES))
            out["quantiles"] = {
                f"p{round(q * 100):02d}": v for q, v in zip(QUANTILES, values, strict=True)
            }
            out["quantile_rank_error"] = self.quantiles.normalized_rank_error(False)
        if self.kind == "categorical":
            out["top"] = [{"value": v, "count": n} for v, n in self.top()]
            out["distinct"] = self.distinct_count
        if self.probability is not None:
            out["probability_histogram"] = self.probability
        out["error"] = column_errors(self, of)
        return out

    @property
    def distinct_count(self) -> float | None:
        return None if self.distinct is None else float(self.distinct.get_estimate())


def _from_base64(text: str) -> bytes:
    """A sketch as profiles stored before `"sketches": "hex"` hold it."""
    return base64.b64decode(text.encode("ascii"))


@dataclass
class Profile:
    """The profiled columns of a shard or a job, by name (inputs then outputs), and the
    same per segment when the job has `[monitor] segment_by`."""

    rows: int = 0
    columns: dict[str, ColumnProfile] = field(default_factory=dict)
    sample_rate: float = 1.0
    segment_by: str | None = None
    segments: dict[str, Profile] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # what profiling cost the workers, summed

    def inputs(self) -> list[ColumnProfile]:
        return [c for c in self.columns.values() if c.role == "input"]

    def outputs(self) -> list[ColumnProfile]:
        return [c for c in self.columns.values() if c.role == "output"]

    def merge(self, other: Profile) -> None:
        self.rows += other.rows
        self.cpu_seconds += other.cpu_seconds
        self.segment_by = self.segment_by or other.segment_by
        for name, column in other.columns.items():
            mine = self.columns.get(name)
            if mine is None:
                self.columns[name] = ColumnProfile.from_json(name, column.to_json())  # a copy
            else:
                mine.merge(column)
        for key, segment in other.segments.items():
            self.segments.setdefault(key, Profile(sample_rate=self.sample_rate)).merge(segment)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": VERSION,
            "rows": self.rows,
            "sample_rate": self.sample_rate,
            "cpu_seconds": self.cpu_seconds,
            "columns": {name: c.to_json() for name, c in self.columns.items()},
        }
        if self.segment_by:
            out["segment_by"] = self.segment_by
            out["segments"] = {key: s.to_json() for key, s in self.segments.items()}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Profile:
        """A profile as stored; MonitorError for one of a later version than this
        thresher reads (a store shared with a newer release)."""
        version = int(data.get("version", 1))
        if version > VERSION:
            raise MonitorError(
                f"this profile is of version {version}, written by a newer thresher; this"
                f" one reads versions up to {VERSION}: upgrade thresher to read it"
            )
        return cls(
            rows=int(data["rows"]),
            columns={n: ColumnProfile.from_json(n, c) for n, c in data["columns"].items()},
            sample_rate=float(data.get("sample_rate", 1.0)),
            segment_by=data.get("segment_by"),
            segments={k: cls.from_json(s) for k, s in data.get("segments", {}).items()},
            cpu_seconds=float(data.get("cpu_seconds", 0.0)),
        )

    def to_text(self) -> str:
        """`to_json` as JSON text, as shards send it and the store keeps it: orjson, for
        a shard's profile is mostly its sketches' text, which `json` escapes a character
        at a time."""
        return orjson.dumps(self.to_json()).decode()

    @classmethod
    def from_text(cls, text: str | bytes) -> Profile:
        return cls.from_json(orjson.loads(text))

    def describe(self) -> dict[str, Any]:
        """Every column's statistics (`ColumnProfile.describe`), per segment too."""
        out: dict[str, Any] = {"rows": self.rows, "sample_rate": self.sample_rate}
        out["columns"] = {name: c.describe() for name, c in self.columns.items()}
        if self.segment_by:
            out["segment_by"] = self.segment_by
            out["segments"] = {key: s.describe() for key, s in self.segments.items()}
        return out

    def summary(self) -> dict[str, Any]:
        """What the manifest shows: per column its kind, nulls and centre."""
        columns: dict[str, Any] = {}
        for name, c in self.columns.items():
            entry: dict[str, Any] = {"role": c.role, "kind": c.kind, "nulls": c.nulls}
            if c.kind == "numeric" and c.moments.count:
                entry |= {"mean": c.moments.mean, "min": c.moments.min, "max": c.moments.max}
            if c.kind == "categorical":
                entry["top"] = dict(c.top(3))
            columns[name] = entry
        return {"rows": self.rows, "cpu_seconds": self.cpu_seconds, "columns": columns}


def merge_profiles(profiles: list[Profile]) -> Profile:
    """One profile of many (a job's of its shards', in shard order)."""
    merged = Profile(sample_rate=profiles[0].sample_rate if profiles else 1.0)
    for profile in profiles:
        merged.merge(profile)
    return merged
