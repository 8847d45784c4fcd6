"""The publish gate through kill -9: a job its checks hold keeps its output staged and the
previous output live, and `approve` / `reject` finish exactly once whatever is killed.

Each test publishes a first job's output, then runs the same spec with the model changed
(the new output differs) and a check that fails (`rows_out_ratio` asks for twice the
previous run's rows), so the second job is held. The kills land at the gate's crash points
(`gate_judged`, `approve_decided`, `mid_publish`, `approve_published`, `reject_decided`);
after each, the same command run again must leave the new output once (approve) or the
previous output byte for byte (reject).
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from harness import FaultJob
from test_kill import KILLED, check_exact
from test_previous_output import first_run, published

SINKS = ["parquet", "sqlite", "delta", "iceberg"]
HOLDING_CHECK = "[publish.checks]\nrows_out_ratio = [2.0, 3.0]\nmax_error_rate = 0.5\n"


def gated(tmp_path: Path, sink: str) -> tuple[FaultJob, dict[str, bytes]]:
    """A first job published; the spec now changes the scores and fails its checks."""
    job, before = first_run(tmp_path, sink)
    job.spec.write_text(job.spec.read_text() + HOLDING_CHECK)
    return job, before


def decide(
    job: FaultJob, verb: str, job_id: str, fault: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`thresher approve|reject JOB_ID`, the real command, with a crash point if named."""
    return subprocess.run(
        [*job.cli(), verb, job_id],
        env=job.env(fault),
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )


def state_of(job: FaultJob, job_id: str) -> dict[str, object]:
    shown = subprocess.run(
        [*job.cli(), "status", job_id, "--json"],
        env=job.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(shown.stdout))


def held_job(job: FaultJob, before: dict[str, bytes]) -> str:
    """Run the gated job to its hold; check what a reader sees did not change."""
    ran = job.run()
    assert ran.returncode == 1, ran.stderr[-2000:]
    assert "HELD" in ran.stdout and "rows_out_ratio" in ran.stderr
    job_id = job.latest_job()
    shown = state_of(job, job_id)
    assert shown["state"] == "held"
    checks = {c["name"]: c for c in shown["publish_checks"]}  # type: ignore[attr-defined]
    assert checks["rows_out_ratio"]["passed"] is False
    assert checks["rows_out_ratio"]["bound"] == [2.0, 3.0]
    assert checks["rows_out_ratio"]["observed"] == 1.0
    assert checks["max_error_rate"]["passed"] is True
    assert published(job) == before, "a held job changed the published output"
    return job_id


@pytest.mark.parametrize("sink", SINKS)
def test_killed_after_judging_then_resumed_is_held(
    tmp_path: Path, sink: str, golden: tuple[Counter[int], Counter[int]]
) -> None:
    """Killed with the checks judged and the hold not recorded: the job is `running`;
    its resume judges again and holds it, the previous output untouched throughout."""
    job, before = gated(tmp_path, sink)
    killed = job.run(fault="gate_judged")
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    job_id = job.latest_job()
    assert state_of(job, job_id)["state"] == "running"
    assert published(job) == before
    resumed = job.resume(job_id)
    assert resumed.returncode == 1 and "HELD" in resumed.stdout, resumed.stderr[-2000:]
    assert state_of(job, job_id)["state"] == "held"
    assert published(job) == before
    assert decide(job, "approve", job_id).returncode == 0
    check_exact(job, golden, f"gate: killed judging, approved ({sink})")


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("fault", ["approve_decided", "mid_publish", "approve_published"])
def test_approve_killed_then_again_publishes_once(
    tmp_path: Path, sink: str, fault: str, golden: tuple[Counter[int], Counter[int]]
) -> None:
    job, before = gated(tmp_path, sink)
    job_id = held_job(job, before)
    killed = decide(job, "approve", job_id, fault)
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    assert state_of(job, job_id)["state"] == "approved"
    # Decided: a reject is refused now, so a half-published output is never discarded.
    refused = decide(job, "reject", job_id)
    assert refused.returncode == 1 and "approved, not held" in refused.stderr
    again = decide(job, "approve", job_id)
    assert again.returncode == 0, again.stderr[-2000:]
    assert state_of(job, job_id)["state"] == "succeeded"
    assert published(job) != before
    check_exact(job, golden, f"gate: approve killed at {fault} ({sink})")
    manifest = json.loads((job.side / "_SUCCESS").read_text())
    assert manifest["job_id"] == job_id and manifest["approved"] is True
    assert [c["name"] for c in manifest["publish_checks"]] == ["rows_out_ratio", "max_error_rate"]
    # Idempotent: approving a published job again changes nothing.
    settled = published(job)
    assert decide(job, "approve", job_id).returncode == 0
    assert published(job) == settled


@pytest.mark.parametrize("sink", SINKS)
def test_reject_killed_then_again_keeps_previous_output(tmp_path: Path, sink: str) -> None:
    job, before = gated(tmp_path, sink)
    job_id = held_job(job, before)
    killed = decide(job, "reject", job_id, "reject_decided")
    assert killed.returncode == KILLED, killed.stderr[-2000:]
    assert state_of(job, job_id)["state"] == "rejected"
    assert published(job) == before
    refused = decide(job, "approve", job_id)
    assert refused.returncode == 1 and "rejected, not held" in refused.stderr
    for _ in range(2):  # finishing the discard, then again: the same answer
        again = decide(job, "reject", job_id)
        assert again.returncode == 0, again.stderr[-2000:]
        assert "rejected" in again.stdout
    assert published(job) == before, "a rejected job changed the published output"
    assert not (job.side / "_pending").exists(), "the rejected job's parts stayed"
    if sink == "sqlite":
        import sqlite3

        with sqlite3.connect(job.database) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master")]
        assert not [t for t in tables if t.startswith("_thresher_stage_")], tables
    # The next run, passing its checks (the bound met), publishes as usual.
    job.spec.write_text(job.spec.read_text().replace("[2.0, 3.0]", "[0.5, 2.0]"))
    assert job.run().returncode == 0
    assert published(job) != before
