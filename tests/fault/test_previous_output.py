"""A job that dies, fails or is cancelled leaves the previous output exactly as it was.

Each test publishes a first job's output, then runs the same spec again with the model
changed (so the new output differs) and stops it: kill -9 at every crash point, a
failure, a cancel, a misspelt model kind. The previous output must be byte-for-byte what
it was; `thresher resume` then publishes the new job's output, complete and once.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from harness import FaultJob, make_job, wait_for_children
from test_kill import KILLED, check_exact, finish


def published(job: FaultJob) -> dict[str, bytes]:
    """What a reader of the output sees: every published file's bytes, and the table's
    rows for a SQL sink."""
    folder = job.side
    skip = ("_pending", "_staging", "_errors/_staging", "_thresher.json")
    seen = {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.relative_to(folder).as_posix().startswith(skip)
    }
    if job.sink != "parquet":
        seen["table scores"] = repr(sorted(job.table_rows("*"))).encode()
    if job.sink == "iceberg":  # and the snapshot readers see is still the same one
        table = job.iceberg_table()
        seen["snapshot"] = repr(table and table.current_snapshot().snapshot_id).encode()
    return seen


def first_run(tmp_path: Path, sink: str, pace: float = 0.0) -> tuple[FaultJob, dict[str, bytes]]:
    job = make_job(tmp_path, sink, pace=pace)
    assert job.run().returncode == 0
    before = published(job)
    model = tmp_path / "model.py"
    model.write_text(model.read_text().replace("* 2.0", "* 3.0"))  # the next run differs
    return job, before


@pytest.fixture(scope="module")
def new_golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Counter[int], Counter[int]]:
    """The ids (and error ids) an uninterrupted run publishes: the model's change alters the
    scores, not which rows fail. Made once, as it is the same for every test here."""
    job = make_job(tmp_path_factory.mktemp("golden-new"), "parquet")
    assert job.run().returncode == 0
    return job.ids(), job.error_ids()


@pytest.mark.parametrize("sink", ["parquet", "sqlite", "duckdb", "delta", "iceberg"])
@pytest.mark.parametrize(
    "fault", ["before_commit:3", "mid_commit:3", "after_commit:3", "worker_after_stage:5"]
)
def test_killed_run_leaves_previous_output(
    tmp_path: Path, sink: str, fault: str, new_golden: tuple[Counter[int], Counter[int]]
) -> None:
    job, before = first_run(tmp_path, sink)
    second = job.run(fault=fault)
    assert second.returncode in (KILLED, 1), second.stderr[-2000:]
    assert published(job) == before, f"the previous output changed after a kill at {fault}"
    finish(job)
    assert published(job) != before
    check_exact(job, new_golden, f"previous kept, then resume ({sink}, {fault})")


@pytest.mark.parametrize("sink", ["parquet", "sqlite", "duckdb", "delta", "iceberg"])
def test_killed_while_publishing_rolls_forward(
    tmp_path: Path, sink: str, new_golden: tuple[Counter[int], Counter[int]]
) -> None:
    """A kill in the middle of publishing (old parts gone, new ones not all in): the
    publish is decided, and the next start on the folder finishes it."""
    job, before = first_run(tmp_path, sink)
    assert job.run(fault="mid_publish").returncode == KILLED
    assert job.run().returncode == 0  # a new run first finishes the cut-short publish
    assert published(job) != before
    check_exact(job, new_golden, f"killed mid-publish, next run ({sink})")


def run_with(job: FaultJob, *overrides: str) -> subprocess.CompletedProcess[str]:
    """`thresher run` of the job's spec with `--set` overrides."""
    sets = [arg for item in overrides for arg in ("--set", item)]
    return subprocess.run(
        [*job.cli(), "run", str(job.spec), *sets],
        env=job.env(),
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("sink", ["parquet", "sqlite", "duckdb", "delta", "iceberg"])
def test_failed_job_leaves_previous_output(tmp_path: Path, sink: str) -> None:
    job, before = first_run(tmp_path, sink)
    failed = run_with(job, "errors.max_error_rate=0.0")
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert published(job) == before


@pytest.mark.parametrize("sink", ["parquet", "sqlite"])
def test_misspelt_model_kind_exits_2_and_keeps_output(tmp_path: Path, sink: str) -> None:
    job, before = first_run(tmp_path, sink)
    bad = run_with(job, 'model.kind="pyhton"')
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "model.kind" in bad.stderr and "pyhton" in bad.stderr
    assert published(job) == before


@pytest.mark.parametrize("sink", ["parquet", "sqlite", "duckdb", "delta", "iceberg"])
def test_cancelled_job_leaves_previous_output(
    tmp_path: Path, sink: str, new_golden: tuple[Counter[int], Counter[int]]
) -> None:
    job, before = first_run(tmp_path, sink, pace=0.02)  # still running when cancelled
    proc = job.start()
    try:
        wait_for_children(proc.pid)
        cancel = subprocess.run(
            [*job.cli(), "cancel", job.latest_job()],
            env=job.env(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert cancel.returncode == 0, cancel.stderr
        assert proc.wait(timeout=60) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert published(job) == before
    finish(job)
    check_exact(job, new_golden, f"cancelled, then resume ({sink})")
