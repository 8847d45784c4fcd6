"""The service examples of the README and the docs, run as written: the README's and
docs/service.md's `server.toml` (the same block), docs/scheduling.md's schedule and
trigger, together in one config beside the demo's model and data, each making the job it
describes — through the code a server uses (the ticker's `fill_in`, the watcher's
`job_body`, `build_spec`) — and each job succeeding. They once named a model the config
did not have and left out `columns`, so every job they made failed."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from thresher.cli.demo import make_customers, train_model
from thresher.coordinator.job import run_job
from thresher.schedules.templates import fill_in
from thresher.service.app import build_state
from thresher.service.background.watcher import job_body
from thresher.service.submission import build_spec
from thresher.store import JobState

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "service.md", ROOT / "docs" / "scheduling.md"]
ROWS = 1000


def toml_block(starts: str) -> str:
    """The one TOML block whose first line starts with `starts`, of the README and the
    service's docs pages (a block the README and a page both show must be the same)."""
    pages = "".join(page.read_text(encoding="utf-8") for page in PAGES)
    blocks = re.findall(r"```toml\n(.*?)```", pages, re.S)
    (found,) = {b for b in blocks if b.startswith(starts)}
    return str(found)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The folder the examples' commands run in: `thresher demo --rows 1000`'s files and
    the config made of the three blocks."""
    demo = tmp_path / "thresher-demo"
    demo.mkdir()
    customers = make_customers(ROWS)
    pq.write_table(customers, demo / "customers.parquet")
    train_model(customers, demo / "model.skops")
    config = "\n".join(
        toml_block(start) for start in ("# server.toml", "[schedules.", "[triggers.landing]")
    )
    (tmp_path / "server.toml").write_text(config, encoding="utf-8")
    return tmp_path


def succeeded(site: Path, body: dict[str, object], job_id: str) -> None:
    state = build_state(f"sqlite:///{site / 'store.db'}", site / "server.toml")
    spec = build_spec(state, "acme", body, job_id)
    result = run_job(spec, state.store)
    assert result.state == JobState.SUCCEEDED, result.problems
    assert (result.manifest["rows_out"], result.manifest["rows_error"]) == (ROWS, 0)


def test_the_schedule_example_makes_a_job_that_succeeds(site: Path) -> None:
    state = build_state(f"sqlite:///{site / 'store.db'}", site / "server.toml")
    (schedule,) = state.config.schedules.values()
    nominal = datetime(2026, 12, 1, 1, 30, tzinfo=UTC)
    body = fill_in(schedule.job, nominal, schedule.schedule.zone)
    night = site / "shared" / "customers" / "2026-12-01"  # the night's partition lands
    night.mkdir(parents=True)
    shutil.copy(site / "thresher-demo" / "customers.parquet", night)
    succeeded(site, body, "nightly-1")


def test_the_trigger_example_makes_a_job_that_succeeds(site: Path) -> None:
    state = build_state(f"sqlite:///{site / 'store.db'}", site / "server.toml")
    ((name, trigger),) = state.config.triggers.items()
    landing = Path(trigger.watch)
    landing.mkdir(parents=True)
    landed = shutil.copy(site / "thresher-demo" / "customers.parquet", landing / "part-1.parquet")
    succeeded(site, job_body(name, trigger, "set-1", [str(landed)]), "landing-1")
