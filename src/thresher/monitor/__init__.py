"""Monitoring: profiles made in the same pass as inference, drift against a frozen
baseline, quality once actuals arrive, a report, and alerts.

The names below load on first use: every job spec has a `[monitor]` section, so this
package is imported wherever a spec is, and the sketches need not be."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ColumnProfile", "Moments", "MonitorSection", "Profile"]

_HOMES = {
    "ColumnProfile": "thresher.monitor.profile",
    "Moments": "thresher.monitor.profile",
    "MonitorSection": "thresher.monitor.settings",
    "Profile": "thresher.monitor.profile",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'thresher.monitor' has no attribute {name!r}")
