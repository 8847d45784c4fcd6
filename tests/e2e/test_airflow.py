"""The example DAG (examples/airflow/thresher_scores.py) under `airflow dags test` on a
standalone Airflow 3 with SQLite metadata, in the venv scripts/airflow.sh makes (Airflow
pins too much to share .venv): a real job in the worker, whose `ended` event reaches XCom
and the task after it; the same kind of job submitted to a real `thresher serve` and
waited for deferred, the trigger run on the triggerer's path (`dags test` runs it in
line); and a sensor deferred on that job's id. A job that cannot run fails its task; the
trigger, rebuilt from what it serialized, follows a server schedule's tick to its job."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from .servers import Server, ServiceSite
from .support import ID, KEEP, Workspace, make_table

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

VENV = os.environ.get("THRESHER_TEST_AIRFLOW")
if not VENV:
    pytest.skip(
        "THRESHER_TEST_AIRFLOW is not set: Airflow lives in a venv of its own; make it with "
        'THRESHER_TEST_AIRFLOW="$(bash scripts/airflow.sh)"',
        allow_module_level=True,
    )

DAGS = Path(__file__).resolve().parents[2] / "examples" / "airflow"
ROWS = 1500


class Airflow:
    """A standalone Airflow: AIRFLOW_HOME in a fresh folder, SQLite metadata, the example
    DAGs folder, and the CLI of the Airflow venv."""

    def __init__(self, home: Path) -> None:
        assert VENV is not None
        self.home = home
        self.cli = str(Path(VENV) / "bin" / "airflow")
        self.db = home / "airflow.db"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON"))}
        self.env = env | {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.db}",
            "THRESHER_STORE": f"sqlite:///{home / 'thresher.db'}",
        }
        self.run("db", "migrate")

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.cli, *args],
            env=self.env | (env or {}),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        (self.home / f"{args[0]}-{args[1]}.log").write_text(done.stdout + done.stderr)
        return done

    def xcom(self, task_id: str) -> Any:
        with closing(sqlite3.connect(self.db)) as db:
            (value,) = db.execute(
                "SELECT value FROM xcom WHERE task_id = ? AND key = 'return_value'", (task_id,)
            ).fetchone()
        # A JSON column: SQLite hands a bare number back as one.
        return json.loads(value) if isinstance(value, str | bytes) else value

    def states(self) -> dict[str, str]:
        with closing(sqlite3.connect(self.db)) as db:
            return dict(db.execute("SELECT task_id, state FROM task_instance").fetchall())


def scores_spec(workspace: Workspace) -> Path:
    table = make_table(ROWS)
    workspace.write_input(table, "parquet")
    trained = workspace.sklearn_skops(table)
    return workspace.spec(
        {
            "job": {"name": "airflow-scores"},
            "source": {"uri": "customers.parquet", "id_column": ID, "shard_bytes": 65536},
            "model": trained.section,
            "run": {"workers": 2},
            "sink": {"uri": "scores/", "keep_columns": [KEEP]},
        }
    )


def test_dags_test_runs_the_job_in_process_and_deferred_on_a_server(
    workspace: Workspace, tmp_path: Path
) -> None:
    spec = scores_spec(workspace)
    site = ServiceSite(tmp_path / "site")
    lines = "".join(f'{{"id": {i}, "x": {i}}}\n' for i in range(40))
    (site.shared / "requests.jsonl").write_text(lines, encoding="utf-8")
    airflow = Airflow(tmp_path / "airflow")
    server = Server(site)
    try:
        token = site.token("acme")
        done = airflow.run(
            "dags",
            "test",
            "thresher_scores",
            env={
                "THRESHER_SPEC": str(spec),
                "THRESHER_SERVER": server.url,
                "THRESHER_SERVER_INPUT": str(site.shared / "requests.jsonl"),
                "THRESHER_SERVER_MODEL": "double",
                "AIRFLOW_CONN_THRESHER": json.dumps({"conn_type": "http", "password": token}),
            },
        )
    finally:
        server.stop()

    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-5000:]
    assert airflow.states() == {
        "score": "success",
        "report": "success",
        "score_on_server": "success",
        "job_done": "success",
    }
    ended = airflow.xcom("score")  # the `ended` event, manifest and all
    assert ended["state"] == "succeeded"
    assert ended["manifest"]["rows_in"] == ended["manifest"]["rows_out"] == ROWS
    assert ended["output"] == str(workspace.root / "scores") + "/"
    written = pq.read_table(workspace.root / "scores")
    assert written.num_rows == ROWS
    assert sorted(written.column(ID).to_pylist()) == sorted(make_table(ROWS).column(ID).to_pylist())
    assert airflow.xcom("report") == ROWS  # the task after it read the XCom

    remote = airflow.xcom("score_on_server")  # the API's job, after the deferral
    assert remote["status"] == "succeeded"
    assert remote["request_counts"] == {"total": 40, "completed": 40, "failed": 0}
    assert airflow.xcom("job_done")["id"] == remote["id"]
    assert log.count("[DAG TEST] running trigger in line") == 2  # deferred, both


def test_a_job_that_cannot_run_fails_its_task(workspace: Workspace, tmp_path: Path) -> None:
    spec = scores_spec(workspace)
    (workspace.root / "model.skops").unlink()
    airflow = Airflow(tmp_path / "airflow")

    done = airflow.run("dags", "test", "thresher_scores", env={"THRESHER_SPEC": str(spec)})

    assert airflow.states()["score"] == "failed", (done.stdout + done.stderr)[-5000:]
    assert airflow.states().get("report") != "success"
    assert "model.skops" in done.stdout + done.stderr
    assert not (workspace.root / "scores").exists()


# The trigger as the triggerer runs it: rebuilt from what it serialized, then its events.
FOLLOW = """
import asyncio, json, sys
from importlib import import_module

from thresher.integrations.airflow import ThresherJobTrigger

path, kwargs = ThresherJobTrigger(
    sys.argv[1], sys.argv[2], schedule="nightly", after=sys.argv[3] or None, poll_seconds=0.2
).serialize()
module, _, name = path.rpartition(".")
trigger = getattr(import_module(module), name)(**kwargs)


async def first_event():
    async for event in trigger.run():
        return event.payload


print(json.dumps(asyncio.run(asyncio.wait_for(first_event(), float(sys.argv[4])))))
"""


def test_the_trigger_follows_a_schedules_tick(tmp_path: Path) -> None:
    site = ServiceSite(tmp_path / "site")
    (site.shared / "in.jsonl").write_text('{"id": 1, "x": 2}\n{"id": 2, "x": -1}\n')
    server = Server(site)
    python = str(Path(str(VENV)) / "bin" / "python")
    try:
        token = site.token("acme")
        with server.client(token) as client:
            job = {"model": "double", "source": {"uri": str(site.shared / "in.jsonl")}}
            schedule = {"name": "nightly", "cron": "0 2 1 1 *", "timezone": "UTC", "job": job}
            assert client.post("/v1/schedules", json=schedule).status_code == 201
            tick = client.post("/v1/schedules/nightly/trigger").json()
            # A tick, but none at or after a time far ahead: still waiting when cut off.
            waiting = subprocess.run(
                [python, "-c", FOLLOW, server.url, token, "2099-01-01T00:00:00Z", "3"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert "TimeoutError" in waiting.stderr, waiting.stderr[-3000:]
            followed = subprocess.run(
                [python, "-c", FOLLOW, server.url, token, "", "60"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
    finally:
        server.stop()

    assert followed.returncode == 0, followed.stderr[-3000:]
    event = json.loads(followed.stdout.splitlines()[-1])  # after the HTTP client's log lines
    assert event["job"]["status"] == "succeeded"
    assert event["job"]["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    assert tick["manual"]
