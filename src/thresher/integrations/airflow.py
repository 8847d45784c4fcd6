"""thresher jobs in Airflow 3 (the `airflow` extra): an operator, its trigger, a sensor.

    from airflow.sdk import DAG
    from thresher.integrations.airflow import ThresherOperator

    with DAG("nightly_scores", schedule="0 2 * * *"):
        ThresherOperator(task_id="score", spec="/opt/jobs/score.toml")

`ThresherOperator` runs one job. Without `server` it runs in the worker, to its end, in
the worker's slot (not deferrable: the job's worker processes are the task's); the XCom
it returns is `thresher run --json`'s `ended` event, manifest included. With `server` it
submits `spec` — then the body of `POST /v1/jobs` — to `thresher serve` and defers to
`ThresherJobTrigger`, which polls `GET /v1/jobs/{id}` with httpx2 on the triggerer: no
worker slot is held while the job runs. Its XCom is then the API's job (status, counts,
download URLs; the API serves no manifest). Either way the task fails when the job does.

`ThresherJobSensor` waits, deferred the same way, for a job given by id, or for the job
of a schedule's tick at or after a time (the DAG run's data interval end by default).

The bearer token is the password of the Airflow connection `token_conn_id`, read in the
worker and handed to the trigger among its arguments (which Airflow stores encrypted with
its Fernet key, when one is set).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator, Context
from airflow.triggers.base import BaseTrigger, TriggerEvent

from thresher.integrations.jobs import FINISHED, JobsApi, run_in_process

__all__ = ["ThresherJobSensor", "ThresherJobTrigger", "ThresherOperator"]


class ThresherJobTrigger(BaseTrigger):
    """Polls `thresher serve` every `poll_seconds` until job `job_id` ends — or, given a
    `schedule` instead, until that schedule's first tick at or after `after` (ISO 8601)
    has started a job, and then until that job ends. Fires one event: `{"job": the API's
    job}`, or `{"error": why}`."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        job_id: str | None = None,
        schedule: str | None = None,
        after: str | None = None,
        poll_seconds: float = 5.0,
    ) -> None:
        super().__init__()
        if (job_id is None) == (schedule is None):
            raise ValueError("ThresherJobTrigger: give exactly one of job_id and schedule")
        self.server, self.token, self.job_id = server, token, job_id
        self.schedule, self.after, self.poll_seconds = schedule, after, poll_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.ThresherJobTrigger",
            {
                "server": self.server,
                "token": self.token,
                "job_id": self.job_id,
                "schedule": self.schedule,
                "after": self.after,
                "poll_seconds": self.poll_seconds,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        api = JobsApi(self.server, self.token)
        try:
            job_id = self.job_id or await self._ticked_job(api)
            while (job := await api.job_async(job_id))["status"] not in FINISHED:
                await asyncio.sleep(self.poll_seconds)
        except Exception as exc:  # the task says why: a trigger that raises says less
            yield TriggerEvent({"error": f"{type(exc).__name__}: {exc}"})
            return
        yield TriggerEvent({"job": job})

    async def _ticked_job(self, api: JobsApi) -> str:
        """The job of the schedule's first tick at or after `after`, once it has one."""
        assert self.schedule is not None
        since = _utc(self.after) if self.after else None
        while True:
            ticks = await asyncio.to_thread(api.ticks, self.schedule, 100)
            due = [
                tick
                for tick in ticks
                if tick.get("job_id") and (since is None or _utc(tick["nominal_time"]) >= since)
            ]
            if due:  # the first at or after `after`; with no `after`, the newest
                pick = min if since is not None else max
                return str(pick(due, key=lambda tick: _utc(tick["nominal_time"]))["job_id"])
            await asyncio.sleep(self.poll_seconds)


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _token(conn_id: str | None) -> str | None:
    return None if conn_id is None else BaseHook.get_connection(conn_id).password


def _ended(event: Mapping[str, Any]) -> dict[str, Any]:
    """The API's job from a trigger's event; the task fails unless the job succeeded."""
    if "error" in event:
        raise AirflowException(f"following the thresher job failed: {event['error']}")
    job = dict(event["job"])
    if job["status"] != "succeeded":
        why = job.get("message") or "no reason given"
        raise AirflowException(f"thresher job {job['id']} {job['status']}: {why}")
    return job


class ThresherOperator(BaseOperator):
    """Run one thresher job: `spec` a spec file's path or a spec as a mapping (in the
    worker, on the store `store`, default `$THRESHER_STORE`), or, with `server`, the body
    of `POST /v1/jobs` (deferred; the token from connection `token_conn_id`)."""

    template_fields = ("spec", "server", "store")

    def __init__(
        self,
        *,
        spec: str | Mapping[str, Any],
        server: str | None = None,
        token_conn_id: str | None = None,
        store: str | None = None,
        poll_seconds: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec, self.server, self.store = spec, server, store
        self.token_conn_id, self.poll_seconds = token_conn_id, poll_seconds

    def execute(self, context: Context) -> dict[str, Any]:
        if self.server is None:
            outcome = run_in_process(self.spec, self.store)
            if not outcome.succeeded:
                why = "; ".join(outcome.problems) or "no reason given"
                raise AirflowException(f"thresher job {outcome.job_id} {outcome.state}: {why}")
            return outcome.record
        if not isinstance(self.spec, Mapping):
            raise AirflowException("with a server, spec is the body of POST /v1/jobs (a mapping)")
        token = _token(self.token_conn_id)
        ti = context["ti"]
        task_run = f"{ti.dag_id}/{ti.task_id}/{ti.run_id}/{ti.map_index}"
        job_id = JobsApi(self.server, token).submit_once(self.spec, task_run, ti.try_number - 1)
        self.log.info("thresher job %s on %s", job_id, self.server)
        self.defer(
            trigger=ThresherJobTrigger(
                self.server, token, job_id=job_id, poll_seconds=self.poll_seconds
            ),
            method_name="execute_complete",
        )
        raise AssertionError("unreachable: defer raises TaskDeferred")

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        return _ended(event)


class ThresherJobSensor(BaseSensorOperator):
    """Wait, deferred, for a thresher job on `server` to end: job `job_id`, or the job of
    `schedule`'s first tick at or after `after` (default: the run's data interval end;
    empty: its newest tick with a job).
    Fails when the job does not succeed; its XCom is the API's job."""

    template_fields = ("job_id", "schedule", "after", "server")

    def __init__(
        self,
        *,
        server: str,
        job_id: str | None = None,
        schedule: str | None = None,
        after: str | None = "{{ (data_interval_end | ts) if data_interval_end else '' }}",
        token_conn_id: str | None = None,
        poll_seconds: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (job_id is None) == (schedule is None):
            raise ValueError("ThresherJobSensor: give exactly one of job_id and schedule")
        self.server, self.job_id, self.schedule, self.after = server, job_id, schedule, after
        self.token_conn_id, self.poll_seconds = token_conn_id, poll_seconds

    def execute(self, context: Context) -> None:
        trigger = ThresherJobTrigger(
            self.server,
            _token(self.token_conn_id),
            job_id=self.job_id,
            schedule=self.schedule,
            after=(self.after or None) if self.schedule else None,
            poll_seconds=self.poll_seconds,
        )
        self.defer(trigger=trigger, method_name="execute_complete")

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        return _ended(event)
