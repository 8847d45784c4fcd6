"""kill -9 of a job that merges into a Delta or an Iceberg table (`sink.mode = "merge"`).

A first job merges ids 0..23,999; a second job, scoring ids 12,000..35,999 with another
model, is killed at every crash point. Before its publish is decided (its one table
commit), the table stays at the first job's version, row for row; once it committed,
the kill is after the merge. Either way, `thresher resume` leaves the table as one
uninterrupted second job would: the ids the second job scored with its scores, the
others (below 12,000, or rejected by the second model) with the first's, each id once,
and one commit a job: the merge never twice.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from harness import FaultJob, make_job
from test_kill import KILLED, finish

SHIFT = 12_000  # the second job's ids: the first's, moved up by this


def merge_job(root: Path, sink: str) -> FaultJob:
    job = make_job(root, sink)
    job.spec.write_text(job.spec.read_text() + 'mode = "merge"\n')
    assert job.run().returncode == 0
    return job


def second_input(job: FaultJob) -> dict[int, float]:
    """Rewrite the input as the second job's (ids moved up by SHIFT, the model scoring
    x0 * 3 + x1); returns the scores the table should then hold, by id."""
    table = pq.read_table(job.root / "input.parquet")
    expected = scores_of(table, 2.0)
    table = table.set_column(0, "id", pa.array(table.column("id").to_numpy() + SHIFT))
    pq.write_table(table, job.root / "input.parquet", row_group_size=2_000)
    model = job.root / "model.py"
    model.write_text(model.read_text().replace("* 2.0", "* 3.0"))
    return {**expected, **scores_of(table, 3.0)}  # a row the second rejects keeps the first's


def scores_of(table: pa.Table, factor: float) -> dict[int, float]:
    """The model's score of every row it does not reject (x0 > 3.2 raises)."""
    ids = table.column("id").to_numpy()
    x0, x1 = (table.column(c).to_numpy() for c in ("x0", "x1"))
    good = x0 <= 3.2
    return dict(zip(ids[good].tolist(), (x0 * factor + x1)[good].tolist(), strict=True))


def table_scores(job: FaultJob) -> dict[int, float]:
    rows = job.table_rows("id, score")
    ids = [r[0] for r in rows]
    assert len(set(ids)) == len(ids), "an id is in the table twice"
    return {int(i): float(s) for i, s in rows}  # type: ignore[arg-type]


def table_version(job: FaultJob) -> int | None:
    """The Delta table's version, the Iceberg table's current snapshot id."""
    if job.sink == "delta":
        return int(DeltaTable(job.out).version())
    return int(job.iceberg_table().current_snapshot().snapshot_id)


def commits_by_job(job: FaultJob) -> list[str]:
    """The job of each commit of the table, oldest first (an Iceberg merge's delete and
    append snapshots are one commit, both named by it)."""
    if job.sink == "delta":
        history = DeltaTable(job.out).history()
        assert [c["operation"] for c in history] == ["MERGE", "WRITE"], history
        return [c["thresher.job_id"] for c in reversed(history)]
    summaries = [s.summary for s in job.iceberg_table().snapshots()]
    commits = dict.fromkeys(s["thresher.commit"] for s in summaries)
    return [c.split("/")[1] for c in commits]


@pytest.mark.parametrize(
    ("sink", "fault"),
    [
        *(
            ("delta", fault)
            for fault in (
                "before_commit:3",
                "mid_commit:3",
                "after_commit:3",
                "worker_after_stage:5",
                "after_publish_commit",
                "mid_publish",
            )
        ),
        *(
            ("iceberg", fault)
            for fault in (
                "before_commit:3",
                "worker_after_stage:5",
                "after_table_commit",
                "mid_publish",
            )
        ),
    ],
)
def test_a_killed_merge_keeps_the_previous_version_and_merges_once(
    tmp_path: Path, sink: str, fault: str
) -> None:
    job = merge_job(tmp_path, sink)
    before, version = table_scores(job), table_version(job)
    want = second_input(job)
    killed = job.run(fault=fault)
    assert killed.returncode in (KILLED, 1), killed.stderr[-2000:]
    # the merge committed at these, before they stopped the job
    published = fault in ("after_publish_commit", "after_table_commit", "mid_publish")
    if not published:
        assert table_version(job) == version, f"a commit before the end ({fault})"
        assert table_scores(job) == before
    finish(job)
    got = table_scores(job)
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[i] for i in sorted(want)], [want[i] for i in sorted(want)])
    jobs = commits_by_job(job)  # one commit a job: the first made the table, the second merged
    assert len(jobs) == 2 and len(set(jobs)) == 2, jobs
