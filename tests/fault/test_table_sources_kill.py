"""kill -9 of jobs reading the table sources: a Delta table, an Iceberg table, a SQLite and
a DuckDB query, and entities joined point-in-time with a feature table, each in about
twelve shards. A job killed as a worker stages a part, or
as the coordinator commits one, is resumed to the same output as one uninterrupted run:
every row once, in the output or the error file, no stray file. A Delta or Iceberg table
that writers moved on while the job was down is read at the version its plan froze: the
rows added since are not scored."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from harness import FEATURES, FaultJob, make_job
from test_kill import KILLED, check_exact, finish

LATE = range(100_000, 100_050)  # ids written to the input table while the job is down


def move_on(job: FaultJob, source: str) -> None:
    """A writer appends rows to the input table after the job's plan was made."""
    rows = {"id": np.array(list(LATE), dtype=np.int64)}
    rows |= {name: np.zeros(len(LATE)) for name in FEATURES}
    table = pa.table(rows)
    if source == "delta":
        from deltalake import write_deltalake

        write_deltalake(job.root / "input", table, mode="append")
    else:
        from harness import iceberg_catalog
        from pyiceberg.catalog import load_catalog

        load_catalog("default", **iceberg_catalog(job.root)).load_table("db.input").append(table)


@pytest.mark.parametrize("fault", ["worker_after_stage:5", "after_commit:3"])
@pytest.mark.parametrize("source", ["delta", "iceberg", "sqlite", "duckdb", "features"])
def test_a_killed_job_over_a_table_resumes_to_every_row_once(
    tmp_path: Path, golden: tuple[Counter[int], Counter[int]], source: str, fault: str
) -> None:
    job = make_job(tmp_path, "parquet", source=source)
    killed = job.run(fault=fault)
    assert killed.returncode in (KILLED, 1), killed.stderr[-2000:]
    assert not job.has_success()
    if source in ("delta", "iceberg"):
        move_on(job, source)
    finish(job)
    check_exact(job, golden, f"{source} source killed at {fault}")
    assert not set(LATE) & set(job.ids())  # the frozen version's rows only
