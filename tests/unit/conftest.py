"""Fixtures for the unit tests of actuals and quality: a store (SQLite, and PostgreSQL
where a test server is named), and succeeded jobs whose published Parquet output is a
table the test chose."""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thresher.spec import JobSpec
from thresher.store import JobState, Store, open_store


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped: an owner killed with
    SIGKILL, as `store/_owners.py` sees it."""
    process = mp.get_context("spawn").Process(target=int)
    process.start()
    process.join()
    assert process.pid is not None
    return process.pid


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store of this test's own: a SQLite file, and a PostgreSQL schema (where
    THRESHER_TEST_POSTGRES names a server)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        server = request.getfixturevalue("postgres_server")
        schema = request.getfixturevalue("pg_schema")
        url = f"{server}?options={quote(f'-csearch_path={schema}')}"
    opened = open_store(url)
    yield opened
    opened.db.close()


@pytest.fixture
def finished_job(store: Store, tmp_path: Path) -> Callable[..., str]:
    """`finished_job(output, name=, id_column=, sink=, mode=)`: the id of a succeeded job
    whose published output (two Parquet parts in `sink`, else a folder of its own) is
    `output`; in mode "append" its parts are named by the job, as the sink names them."""

    def make(
        output: pa.Table,
        name: str = "scores",
        id_column: str | None = "id",
        sink: Path | None = None,
        mode: str = "overwrite",
    ) -> str:
        job_id = f"job-{time.monotonic_ns()}"
        out = sink or tmp_path / job_id
        out.mkdir(parents=True, exist_ok=True)
        spec = JobSpec.model_validate(
            {
                "job": {"name": name},
                "model": {"kind": "python", "uri": "model.py:Model"},
                "source": {"uri": "in.parquet", "id_column": id_column},
                "sink": {"uri": str(out), "mode": mode},
            }
        )
        half, prefix = output.num_rows // 2, "part-" if mode == "overwrite" else f"part-{job_id}-"
        pq.write_table(output.slice(0, half), out / f"{prefix}00000.parquet")
        pq.write_table(output.slice(half), out / f"{prefix}00001.parquet")
        (out / "_SUCCESS").write_text(json.dumps({"job_id": job_id}))
        store.create_job(job_id, name, spec, {"shards": [{}]})
        store.finish(job_id, JobState.SUCCEEDED, {"rows_out": output.num_rows}, None)
        return job_id

    return make
