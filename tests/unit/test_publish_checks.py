"""The publish gate's checks, each held and passed, on real jobs: a Parquet input, a
Python model, a real Parquet output folder and job store, driven in this process (the
in-process executor), so each check is judged from the real counts, profile and
manifest. The kills at each of the gate's steps are tests/fault/test_publish_gate_kill.py's."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import thresher
from thresher.coordinator.job import run_job
from thresher.errors import SpecError, StoreError
from thresher.store import JobState, open_store

# score = 2x; label "high"/"low", null where x is above `null_above` (a file beside the
# model, when there). A NaN score would be a bad row (worker/predict.py), not a null.
MODEL = """
from pathlib import Path

import numpy as np

class Scorer:
    def predict(self, batch):
        x = np.asarray(batch["x"], dtype="float64")
        if (x < -100).any():
            raise ValueError("x below -100")
        label = ["high" if v > 0 else "low" for v in x]
        limit = Path(__file__).with_name("null_above")
        if limit.exists():
            label = [None if v > float(limit.read_text()) else k for v, k in zip(x, label)]
        return {"score": x * 2.0, "label": label}
"""

CHECKS = """
def passes(profile, manifest):
    return None if manifest["rows_out"] > 0 else "no rows"

def says_true(profile, manifest):
    return True

def refuses(profile, manifest):
    mean = profile.columns["score"].moments.mean
    return f"mean score {mean:.1f} is implausible"

def raises(profile, manifest):
    raise RuntimeError("the check's own database is down")
"""


class Gate:
    """A job spec in `root` with its input, model and store; `run` runs it with checks."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.store = f"sqlite:///{root / 'store.db'}"
        (root / "scorer.py").write_text(MODEL)
        (root / "gate_checks.py").write_text(CHECKS)
        monkeypatch.syspath_prepend(str(root))

    def write_input(self, rows: int, shift: float = 0.0, bad: int = 0) -> None:
        rng = np.random.default_rng(7)
        x = rng.standard_normal(rows) + shift
        x[:bad] = -1000.0  # rows the model rejects
        table = pa.table({"id": np.arange(rows), "x": x})
        pq.write_table(table, self.root / "in.parquet", row_group_size=500)

    def spec(self, checks: dict[str, Any] | None, sink: str = "out/") -> dict[str, Any]:
        spec: dict[str, Any] = {
            "job": {"name": "nightly"},
            "source": {"uri": str(self.root / "in.parquet"), "id_column": "id"},
            "model": {"kind": "python", "uri": f"{self.root / 'scorer.py'}:Scorer"},
            "batch": {"size": 500},
            "run": {"executor": "thresher.testing:in_process_executor"},
            "sink": {"uri": str(self.root / sink)},
        }
        if checks is not None:
            spec["publish"] = {"checks": checks}
        return spec

    def run(self, checks: dict[str, Any] | None = None) -> thresher.JobResult:
        return thresher.run(self.spec(checks), store=self.store, raise_on_failure=False)

    def published_ids(self) -> list[int]:
        parts = sorted((self.root / "out").glob("part-*.parquet"))
        return sorted(pq.read_table(parts).column("id").to_pylist()) if parts else []

    def check(self, result: thresher.JobResult, name: str) -> dict[str, Any]:
        found = [c for c in result.manifest["publish_checks"] if c["name"] == name]
        assert len(found) == 1, result.manifest.get("publish_checks")
        return dict(found[0])


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Gate:
    return Gate(tmp_path, monkeypatch)


def test_rows_out_within_range_of_previous_run(gate: Gate) -> None:
    ratio = {"rows_out_ratio": [0.8, 1.25]}
    gate.write_input(2_000)
    first = gate.run(ratio)
    assert first.state == JobState.SUCCEEDED, first.problems  # no previous run: passes
    assert "no previous run" in gate.check(first, "rows_out_ratio")["reason"]
    gate.write_input(1_000)  # half the rows: outside [0.8, 1.25] of the previous run
    held = gate.run(ratio)
    assert held.state == JobState.HELD
    verdict = gate.check(held, "rows_out_ratio")
    assert (verdict["passed"], verdict["observed"], verdict["bound"]) == (False, 0.5, [0.8, 1.25])
    assert any("rows_out_ratio" in p and first.job_id in p for p in held.problems)
    assert gate.published_ids() == list(range(2_000)), "the previous output must stay live"
    with pytest.raises(thresher.JobFailed, match="held"):
        held.raise_for_state()
    approved = thresher.approve(held.job_id, store=gate.store)
    assert approved.state == JobState.SUCCEEDED
    assert gate.published_ids() == list(range(1_000))
    assert approved.to_arrow().num_rows == 1_000
    # The previous run is now the approved one: the same rows again pass.
    again = gate.run(ratio)
    assert again.state == JobState.SUCCEEDED
    assert gate.check(again, "rows_out_ratio")["observed"] == 1.0


def test_error_rate_bound(gate: Gate) -> None:
    gate.write_input(2_000, bad=30)  # 1.5% bad rows
    held = gate.run({"max_error_rate": 0.01})
    assert held.state == JobState.HELD
    verdict = gate.check(held, "max_error_rate")
    assert verdict["observed"] == pytest.approx(0.015) and not verdict["passed"]
    passed = gate.run({"max_error_rate": 0.02})
    assert passed.state == JobState.SUCCEEDED and gate.check(passed, "max_error_rate")["passed"]


def test_null_share_of_a_column(gate: Gate) -> None:
    gate.write_input(2_000)
    (gate.root / "null_above").write_text("1.0")  # about 16% of labels null
    held = gate.run({"max_null_share": {"label": 0.05}})
    assert held.state == JobState.HELD
    verdict = gate.check(held, "max_null_share.label")
    assert 0.12 < verdict["observed"] < 0.2 and not verdict["passed"]
    assert gate.run({"max_null_share": {"label": 0.25}}).state == JobState.SUCCEEDED
    missing = gate.run({"max_null_share": {"scroe": 0.25}})
    assert missing.state == JobState.HELD
    assert "no column 'scroe'" in gate.check(missing, "max_null_share.scroe")["reason"]


def test_drift_verdict_against_the_previous_run(gate: Gate) -> None:
    gate.write_input(4_000)
    first = gate.run({"no_drift": True})
    assert first.state == JobState.SUCCEEDED  # no baseline: a first run passes
    same = gate.run({"no_drift": True})
    assert same.state == JobState.SUCCEEDED, same.problems
    assert gate.check(same, "no_drift")["observed"] == "ok"
    gate.write_input(4_000, shift=2.0)  # every input moved two standard deviations
    drifted = gate.run({"no_drift": True})
    assert drifted.state == JobState.HELD
    verdict = gate.check(drifted, "no_drift")
    assert verdict["observed"] == "drift" and "x" in verdict["reason"]


@pytest.mark.parametrize(
    ("function", "passed", "reason"),
    [
        ("passes", True, "passed"),
        ("says_true", True, "passed"),
        ("refuses", False, "implausible"),
        ("raises", False, "RuntimeError: the check's own database is down"),
    ],
)
def test_custom_check(gate: Gate, function: str, passed: bool, reason: str) -> None:
    gate.write_input(1_000)
    result = gate.run({"custom": [f"gate_checks:{function}"]})
    assert result.state == (JobState.SUCCEEDED if passed else JobState.HELD)
    verdict = gate.check(result, f"custom:gate_checks:{function}")
    assert verdict["passed"] is passed and reason in verdict["reason"]


@pytest.mark.parametrize("path", ["gate_checks:missing", "no_such_module:check"])
def test_a_custom_check_that_cannot_be_found_is_a_spec_error_before_any_work(
    gate: Gate, path: str
) -> None:
    gate.write_input(500)
    with pytest.raises(SpecError, match=r"publish\.checks\.custom: " + path):
        gate.run({"custom": [path]})
    assert not (gate.root / "out").exists()


def test_reject_discards_and_keeps_the_previous_output(gate: Gate) -> None:
    gate.write_input(2_000)
    assert gate.run().state == JobState.SUCCEEDED
    gate.write_input(500)
    held = gate.run({"rows_out_ratio": [0.9, 1.1]})
    assert held.state == JobState.HELD
    assert (gate.root / "out" / "_pending" / held.job_id).is_dir()
    for _ in range(2):  # idempotent
        rejected = thresher.reject(held.job_id, store=gate.store)
        assert rejected.state == JobState.REJECTED
    assert not (gate.root / "out" / "_pending").exists()
    assert gate.published_ids() == list(range(2_000))
    with pytest.raises(StoreError, match="rejected, not held"):
        thresher.approve(held.job_id, store=gate.store)
    with pytest.raises(StoreError, match="publish gate"):
        thresher.resume(held.job_id, store=gate.store)
    store = open_store(gate.store)
    assert store.job(held.job_id).state == JobState.REJECTED
    assert store.request_cancel(held.job_id) == JobState.REJECTED  # decided: not cancelled


def test_only_a_held_job_is_decided(gate: Gate) -> None:
    gate.write_input(500)
    done = gate.run()
    with pytest.raises(StoreError, match="not held"):
        thresher.reject(done.job_id, store=gate.store)
    # approving a job that published is its answer again, not an error
    assert thresher.approve(done.job_id, store=gate.store).state == JobState.SUCCEEDED


def test_a_sink_that_cannot_hold_refuses_checks(gate: Gate) -> None:
    gate.write_input(500)
    spec = gate.spec({"max_error_rate": 0.1})
    spec["sink"] = {"uri": "memory://gate", "format": "thresher.testing:memory_sink"}
    with pytest.raises(SpecError, match=r"publish\.checks: the .* sink cannot hold"):
        thresher.run(spec, store=gate.store)


@pytest.mark.parametrize(
    ("checks", "monitor", "message"),
    [
        ({"rows_out_ratio": [1.2, 0.8]}, {}, "low <= high"),
        ({"max_null_share": {"score": 1.5}}, {}, "between 0 and 1"),
        ({"custom": ["checks.plausible"]}, {}, "module:function"),
        ({"max_error_rate": 2}, {}, "max_error_rate"),
        ({"no_drift": True}, {"profile": False}, "profile = true"),
        ({"max_nulls": {"score": 0.1}}, {}, "max_nulls"),
    ],
)
def test_spec_errors_name_the_field(
    gate: Gate, checks: dict[str, Any], monitor: dict[str, Any], message: str
) -> None:
    spec = gate.spec(checks)
    spec["monitor"] = monitor
    with pytest.raises(SpecError, match="publish") as caught:
        thresher.parse_spec(spec)
    assert message in str(caught.value)


def test_a_schedules_jobs_compare_with_the_schedules_previous_run(gate: Gate) -> None:
    """Each tick's job has its own name (`nightly@<time>`): the previous run is the
    schedule's, not the name's."""
    ratio = {"rows_out_ratio": [0.8, 1.25]}

    def tick(when: str, schedule: str) -> thresher.JobResult:
        spec = gate.spec(ratio)
        spec["job"] = {"name": f"{schedule}@{when}", "schedule": schedule}
        return thresher.run(spec, store=gate.store, raise_on_failure=False)

    gate.write_input(2_000)
    assert tick("2026-12-01", "nightly").state == JobState.SUCCEEDED
    gate.write_input(1_000)
    held = tick("2026-12-02", "nightly")
    assert held.state == JobState.HELD
    assert gate.check(held, "rows_out_ratio")["observed"] == 0.5
    other = tick("2026-12-02", "weekly")  # another schedule: its first run
    assert other.state == JobState.SUCCEEDED
    assert "schedule 'weekly'" in gate.check(other, "rows_out_ratio")["reason"]


def test_a_postgresql_store_and_table_hold_approve_and_reject(
    gate: Gate, postgres_server: str, pg_schema: str
) -> None:
    """The decisions' conditional writes on PostgreSQL, and a PostgreSQL table's staging
    table kept while held, published by approve and dropped by reject."""
    import adbc_driver_postgresql.dbapi as pg_adbc

    gate.store = f"{postgres_server}?options={quote(f'-csearch_path={pg_schema}')}"
    table = f"gate_{pg_schema}"

    def run(rows: int) -> thresher.JobResult:
        gate.write_input(rows)
        spec = gate.spec({"rows_out_ratio": [0.8, 1.25]})
        spec["sink"] = {"uri": f"{postgres_server}?table={table}", "staging": "side"}
        store = open_store(gate.store)  # closed here: `thresher.run` leaves its store open
        try:
            return run_job(thresher.parse_spec(spec), store)
        finally:
            store.db.close()

    def rows_and_stages() -> tuple[int, list[str]]:
        with closing(pg_adbc.connect(postgres_server)) as conn, closing(conn.cursor()) as cur:
            cur.execute(f'SELECT COUNT(*) FROM "{table}"')
            (count,) = cur.fetchone()
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_name LIKE"
                        " '_thresher_stage_%'")  # fmt: skip
            stages = [str(r[0]) for r in cur.fetchall()]
        return int(count), stages

    try:
        assert run(1_000).state == JobState.SUCCEEDED
        held = run(400)
        assert held.state == JobState.HELD
        count, stages = rows_and_stages()
        assert count == 1_000 and any(held.job_id.replace("-", "_") in s for s in stages)
        assert thresher.approve(held.job_id, store=gate.store).state == JobState.SUCCEEDED
        assert rows_and_stages()[0] == 400
        rejected = run(100)
        assert rejected.state == JobState.HELD
        assert thresher.reject(rejected.job_id, store=gate.store).state == JobState.REJECTED
        count, stages = rows_and_stages()
        assert count == 400
        assert not any(rejected.job_id.replace("-", "_") in s for s in stages)
    finally:
        dropping = closing(pg_adbc.connect(postgres_server, autocommit=True))
        with dropping as conn, closing(conn.cursor()) as cur:
            cur.execute(f'DROP TABLE IF EXISTS "{table}"')
