"""Monitoring: drift of a job's profile (`thresher.profiles`) against a frozen baseline,
quality once actuals arrive, a report, and alerts.

The names below load on first use, so importing the package loads no sketch."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Change",
    "ColumnDrift",
    "ColumnProfile",
    "DriftReport",
    "Moments",
    "MonitorSection",
    "Profile",
    "SegmentDrift",
    "Share",
    "Thresholds",
    "compare_profiles",
]

_HOMES = {
    "Change": "thresher.monitor.drift_report",
    "ColumnDrift": "thresher.monitor.drift_report",
    "ColumnProfile": "thresher.profiles.profile",
    "DriftReport": "thresher.monitor.drift_report",
    "Moments": "thresher.profiles.profile",
    "MonitorSection": "thresher.profiles.settings",
    "Profile": "thresher.profiles.profile",
    "SegmentDrift": "thresher.monitor.drift_report",
    "Share": "thresher.monitor.drift_report",
    "Thresholds": "thresher.monitor.drift_report",
    "compare_profiles": "thresher.monitor.drift",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'thresher.monitor' has no attribute {name!r}")
