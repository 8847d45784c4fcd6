"""Fixtures for the end-to-end tests; the helpers themselves live in `support.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """A fresh folder for one end-to-end run (or a few), with the steps as methods."""
    return Workspace(tmp_path)
