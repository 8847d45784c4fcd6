"""Monitoring: profiles made in the same pass as inference, drift against a frozen
baseline, quality once actuals arrive, a report, and alerts.

The names below load on first use: every job spec has a `[monitor]` section, so this
package is imported wherever a spec is, and the sketches need not be."""

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
    "ColumnProfile": "thresher.monitor.profile",
    "DriftReport": "thresher.monitor.drift_report",
    "Moments": "thresher.monitor.profile",
    "MonitorSection": "thresher.monitor.settings",
    "Profile": "thresher.monitor.profile",
    "SegmentDrift": "thresher.monitor.drift_report",
    "Share": "thresher.monitor.drift_report",
    "Thresholds": "thresher.monitor.drift_report",
    "compare_profiles": "thresher.monitor.drift",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'thresher.monitor' has no attribute {name!r}")
