"""Every test gets its own job store, so no test reads another's jobs or the user's."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'thresher-store.db'}"
    monkeypatch.setenv("THRESHER_STORE", url)
    monkeypatch.delenv("THRESHER_FAULT", raising=False)
    return url


@pytest.fixture(autouse=True)
def no_tracking_in_the_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow writes ./mlruns unless told otherwise; keep it in the test's folder."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
