"""Monitoring: profiles made in the same pass as inference, drift against a frozen
baseline, quality once actuals arrive, a report, and alerts."""
