"""What a drift comparison hands out: plain frozen data, and its JSON (the CLI's `--json`
and the service's `GET /v1/jobs/{id}/drift` answer with exactly `DriftReport.to_json()`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Generic, Literal, TypeVar

__all__ = [
    "VERDICTS",
    "Change",
    "ColumnDrift",
    "DriftReport",
    "SegmentDrift",
    "Share",
    "Thresholds",
    "Verdict",
    "worst",
]

Verdict = Literal["ok", "warn", "drift"]
VERDICTS: tuple[Verdict, ...] = ("ok", "warn", "drift")  # in rising order

T = TypeVar("T", int, float)


def worst(verdicts: list[Verdict]) -> Verdict:
    """The most serious of `verdicts` ("ok" for none)."""
    return max(verdicts, key=VERDICTS.index, default="ok")


@dataclass(frozen=True)
class Change(Generic[T]):
    """One figure, in the baseline and in the current."""

    baseline: T
    current: T


@dataclass(frozen=True)
class Share:
    """A bin's or a category's share of the column's values, baseline and current."""

    label: str
    baseline: float
    current: float


@dataclass(frozen=True)
class Thresholds:
    """What the verdicts were judged by (from `[monitor]`)."""

    psi_warn: float
    psi_drift: float
    bins: int
    fdr: float


@dataclass(frozen=True)
class ColumnDrift:
    """One column, baseline against current.

    `measure` says what was compared: a numeric column's `values`, a text column's
    `lengths`, a categorical column's `categories`. Numbers and lengths get PSI, JS,
    Wasserstein and KS (with `test = "ks"`); categories get PSI, JS, L∞ and chi-square
    (`test = "chi2"`). `p_adjusted` is Benjamini-Hochberg's across the comparison's
    columns, `significant` whether it is within `[monitor] fdr`. The verdict is PSI's
    alone: "drift" at `psi_drift` and above, "warn" at `psi_warn` and above.
    """

    name: str
    role: str
    kind: str
    measure: Literal["values", "lengths", "categories"] | None
    verdict: Verdict
    rows: Change[int]
    null_share: Change[float]
    nan_share: Change[float]
    psi: float | None = None
    js: float | None = None
    wasserstein: float | None = None
    ks: float | None = None
    ks_bound: float | None = None
    linf: float | None = None
    chi_square: float | None = None
    test: Literal["ks", "chi2"] | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    significant: bool | None = None
    edges: tuple[float, ...] = ()  # the baseline's frozen bin edges (numbers, lengths)
    shares: tuple[Share, ...] = ()  # per bin or category
    note: str | None = None  # why a figure is missing, or a verdict not PSI's


@dataclass(frozen=True)
class SegmentDrift:
    """One value of `segment_by`: its share of all rows on each side, and its columns
    compared as a job's are (none when it exists on one side only)."""

    key: str
    rows: Change[int]
    row_share: Change[float]
    verdict: Verdict | None
    columns: tuple[ColumnDrift, ...] = ()


@dataclass(frozen=True)
class DriftReport:
    """Baseline against current: per column figures and verdicts, the job verdict (the
    worst column's), columns only one side has, the prediction class shares of every
    categorical output, and the same per segment when both sides have segments."""

    baseline: str
    current: str
    verdict: Verdict
    rows: Change[int]
    thresholds: Thresholds
    columns: tuple[ColumnDrift, ...]
    added: tuple[str, ...] = ()  # in the current only
    removed: tuple[str, ...] = ()  # in the baseline only
    class_shares: dict[str, tuple[Share, ...]] = field(default_factory=dict)
    segment_by: str | None = None
    segments: tuple[SegmentDrift, ...] = ()

    def column(self, name: str) -> ColumnDrift:
        return next(c for c in self.columns if c.name == name)

    @property
    def drifted(self) -> list[str]:
        return [c.name for c in self.columns if c.verdict == "drift"]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
