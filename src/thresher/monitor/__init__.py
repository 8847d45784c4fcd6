"""Monitoring: profiles made in the same pass as inference, drift against a frozen
baseline, quality once actuals arrive, a report, and alerts."""

from thresher.monitor.profile import ColumnProfile, Moments, Profile
from thresher.monitor.settings import MonitorSection

__all__ = ["ColumnProfile", "Moments", "MonitorSection", "Profile"]
