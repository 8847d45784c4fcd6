"""Monitoring: profiles made in the same pass as inference, drift against a frozen
baseline, quality once actuals arrive, a report, and alerts."""

from thresher.monitor.drift import compare_profiles
from thresher.monitor.drift_report import (
    Change,
    ColumnDrift,
    DriftReport,
    SegmentDrift,
    Share,
    Thresholds,
)
from thresher.monitor.profile import ColumnProfile, Moments, Profile
from thresher.monitor.settings import MonitorSection

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
