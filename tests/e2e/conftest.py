"""Fixtures for the end-to-end tests; the helpers themselves live in `support.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """A fresh folder for one end-to-end run (or a few), with the steps as methods."""
    return Workspace(tmp_path)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the load figures tests recorded with `record_property("load", ...)`."""
    figures = [
        f"{report.nodeid.rsplit('::', 1)[-1]}: {value}"
        for report in terminalreporter.stats.get("passed", [])
        for name, value in getattr(report, "user_properties", [])
        if name == "load"
    ]
    if figures:
        terminalreporter.section("load figures")
        for line in figures:
            terminalreporter.write_line(line)
