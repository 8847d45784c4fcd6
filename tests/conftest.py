"""Every test gets its own job store, so no test reads another's jobs or the user's."""

from __future__ import annotations

from collections.abc import Iterator
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


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Compiled tree models go to one cache for the whole run, not the user's."""
    folder = tmp_path_factory.mktemp("thresher-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("THRESHER_CACHE", str(folder))
        yield folder
