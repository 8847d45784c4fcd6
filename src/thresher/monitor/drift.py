"""Drift: two profiles compared, column by column, on the baseline's frozen bins.

Only the profiles are read — a few sketches per column — never the data, so comparing
tonight's job with last week's costs milliseconds whatever their rows. Columns both
profiles have are compared (the others are listed as added or removed); categorical
outputs' class shares are always reported; with `segment_by` on both sides, each
segment's share of rows and its columns are compared too (skew by group).

>>> from thresher.monitor import compare_profiles
>>> report = compare_profiles(last_week, tonight)            # doctest: +SKIP
>>> report.verdict, report.drifted                           # doctest: +SKIP
('drift', ['income'])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from thresher.monitor.drift_columns import compare_column, judge
from thresher.monitor.drift_report import (
    Change,
    ColumnDrift,
    DriftReport,
    SegmentDrift,
    Share,
    Thresholds,
    worst,
)
from thresher.monitor.drift_stats import benjamini_hochberg
from thresher.profiles.profile import Profile
from thresher.profiles.settings import MonitorSection

__all__ = ["compare_profiles", "thresholds_of"]


def thresholds_of(monitor: MonitorSection | None) -> Thresholds:
    """The verdict thresholds of a `[monitor]` section (its defaults when None)."""
    section = monitor or MonitorSection()
    return Thresholds(section.psi_warn, section.psi_drift, section.bins, section.fdr)


def compare_profiles(
    baseline: Profile,
    current: Profile,
    monitor: MonitorSection | None = None,
    columns: Sequence[str] | None = None,
    names: tuple[str, str] = ("baseline", "current"),
) -> DriftReport:
    """Compare `current` with `baseline` under `monitor`'s thresholds (the defaults when
    None): every column both have, or only `columns`. `names` label the two sides."""
    thresholds = thresholds_of(monitor)
    compared = _compare_columns(baseline, current, thresholds, columns)
    only_current = [n for n in current.columns if n not in baseline.columns]
    only_baseline = [n for n in baseline.columns if n not in current.columns]
    if columns is not None:
        only_current = [n for n in only_current if n in columns]
        only_baseline = [n for n in only_baseline if n in columns]
    segment_by, segments = _segments(baseline, current, thresholds, columns)
    return DriftReport(
        baseline=names[0],
        current=names[1],
        verdict=worst([c.verdict for c in compared]),
        rows=Change(baseline.rows, current.rows),
        thresholds=thresholds,
        columns=tuple(compared),
        added=tuple(only_current),
        removed=tuple(only_baseline),
        class_shares=_class_shares(baseline, current),
        segment_by=segment_by,
        segments=segments,
    )


def _compare_columns(
    baseline: Profile, current: Profile, thresholds: Thresholds, only: Sequence[str] | None
) -> list[ColumnDrift]:
    """The common columns (in the current's order), judged, with BH-adjusted p-values
    across them."""
    names = [n for n in current.columns if n in baseline.columns and (only is None or n in only)]
    rates = (baseline.sample_rate, current.sample_rate)
    found = [
        compare_column(baseline.columns[n], current.columns[n], thresholds.bins, rates)
        for n in names
    ]
    tested = [i for i, c in enumerate(found) if c.p_value is not None]
    adjusted = benjamini_hochberg([found[i].p_value or 0.0 for i in tested])
    for i, q in zip(tested, adjusted, strict=True):
        found[i] = replace(found[i], p_adjusted=q, significant=q <= thresholds.fdr)
    return [judge(c, thresholds) for c in found]


def _class_shares(baseline: Profile, current: Profile) -> dict[str, tuple[Share, ...]]:
    """Each categorical output's class shares, baseline and current (whatever `columns`)."""
    shares = {}
    for name, column in current.columns.items():
        other = baseline.columns.get(name)
        kinds = (column.kind, other.kind if other is not None else None)
        if column.role == "output" and other is not None and kinds == ("categorical",) * 2:
            shares[name] = compare_column(other, column, 2, (1.0, 1.0)).shares
    return shares


def _segments(
    baseline: Profile, current: Profile, thresholds: Thresholds, only: Sequence[str] | None
) -> tuple[str | None, tuple[SegmentDrift, ...]]:
    if not (baseline.segments and current.segments):
        return current.segment_by, ()
    if baseline.segment_by != current.segment_by:
        return current.segment_by, ()  # segments of different columns: nothing to pair
    found = []
    for key in sorted(baseline.segments.keys() | current.segments.keys()):
        b, c = baseline.segments.get(key), current.segments.get(key)
        rows = Change(b.rows if b else 0, c.rows if c else 0)
        share = Change(
            rows.baseline / baseline.rows if baseline.rows else 0.0,
            rows.current / current.rows if current.rows else 0.0,
        )
        if b is None or c is None:
            found.append(SegmentDrift(key, rows, share, None))
            continue
        columns = _compare_columns(b, c, thresholds, only)
        found.append(
            SegmentDrift(key, rows, share, worst([x.verdict for x in columns]), tuple(columns))
        )
    return current.segment_by, tuple(found)
