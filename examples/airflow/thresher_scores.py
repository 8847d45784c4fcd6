"""Nightly scores with thresher, in Airflow 3 (docs/airflow.md).

`score` runs the job in the worker: by default the spec `thresher demo` writes (run
`thresher demo --rows 100000` from the repo root first), or the spec file $THRESHER_SPEC.
Its XCom is the job's `ended` event, manifest included, which `report` reads.

With $THRESHER_SERVER (a `thresher serve` URL) and $THRESHER_SERVER_INPUT (a JSONL file
under the server's allowed roots), `score_on_server` submits a job on the server's model
$THRESHER_SERVER_MODEL and waits deferred, on the triggerer; its token is the password of
the Airflow connection `thresher` (e.g. AIRFLOW_CONN_THRESHER='{"password": "..."}').
`job_done` then waits, deferred too, on that job by its id.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from thresher.integrations.airflow import ThresherJobSensor, ThresherOperator

DEMO_SPEC = Path(__file__).resolve().parents[2] / "thresher-demo" / "score.toml"
SERVER = os.environ.get("THRESHER_SERVER")

with DAG(
    "thresher_scores",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["thresher"],
):
    score = ThresherOperator(task_id="score", spec=os.environ.get("THRESHER_SPEC", str(DEMO_SPEC)))

    @task
    def report(ended: dict[str, Any]) -> int:
        """What downstream tasks get: where the scores are, and how many."""
        manifest = ended["manifest"]
        print(f"job {ended['job_id']}: {manifest['rows_out']} rows to {ended['output']}")
        return int(manifest["rows_out"])

    report(score.output)

    if SERVER:
        on_server = ThresherOperator(
            task_id="score_on_server",
            server=SERVER,
            token_conn_id="thresher",
            spec={
                "model": os.environ.get("THRESHER_SERVER_MODEL", "scorer"),
                "source": {"uri": os.environ["THRESHER_SERVER_INPUT"]},
                "id_column": "id",
                "output_format": "jsonl",
            },
            poll_seconds=0.5,
        )
        job_done = ThresherJobSensor(
            task_id="job_done",
            server=SERVER,
            token_conn_id="thresher",
            job_id="{{ ti.xcom_pull(task_ids='score_on_server')['id'] }}",
            poll_seconds=0.5,
        )
        on_server >> job_done
