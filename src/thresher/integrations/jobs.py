"""One job for an orchestrator: run it in this process, or submit it to `thresher serve`
and follow it there, and tell how it ended in one shape (`JobOutcome`).

The Airflow and Dagster integrations both stand on this module; it needs no orchestrator.
In process, a job is a job spec (a file or a mapping) and runs in the calling process,
its store `store` (default `$THRESHER_STORE`). Through a server, a job is the body of
`POST /v1/jobs` (a model registered on the server by name, input under its allowed roots
or an uploaded file), followed by `GET /v1/jobs/{id}` with httpx2 (the service's client).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thresher.errors import ThresherError

__all__ = ["FINISHED", "JobOutcome", "JobsApi", "run_in_process"]

FINISHED = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended, from either side. `record` is what thresher itself said: `thresher
    run --json`'s `ended` event (with the manifest) in process, the API's job through a
    server (which serves no manifest: status, counts and download URLs)."""

    job_id: str | None
    state: str
    rows_in: int | None
    rows_out: int | None
    rows_error: int | None
    output: str | None
    errors_uri: str | None
    problems: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"

    @property
    def error_rate(self) -> float:
        """Bad records over input rows (0 for no rows)."""
        return (self.rows_error or 0) / self.rows_in if self.rows_in else 0.0

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> JobOutcome:
        """From an `ended` event (`thresher run --json`, the Kubeflow step's result)."""
        manifest = event.get("manifest") or {}
        return cls(
            job_id=event.get("job_id"),
            state=str(event["state"]),
            rows_in=manifest.get("rows_in"),
            rows_out=manifest.get("rows_out"),
            rows_error=manifest.get("rows_error"),
            output=event.get("output"),
            errors_uri=event.get("errors_uri"),
            problems=list(event.get("problems") or []),
            record=dict(event),
        )

    @classmethod
    def from_api(cls, job: Mapping[str, Any], server: str) -> JobOutcome:
        """From `GET /v1/jobs/{id}` on `server`: the output is the results' download URL."""
        counts = job.get("request_counts") or {}
        return cls(
            job_id=job["id"],
            state=str(job["status"]),
            rows_in=counts.get("total"),
            rows_out=counts.get("completed"),
            rows_error=counts.get("failed"),
            output=server.rstrip("/") + job["results_url"],
            errors_uri=server.rstrip("/") + job["errors_url"],
            problems=[job["message"]] if job.get("message") else [],
            record=dict(job),
        )


def run_in_process(spec: str | Path | Mapping[str, Any], store: str | None = None) -> JobOutcome:
    """Run the job `spec` (a spec file's path, or a spec as a mapping) here, to its end.
    Raises SpecError before any work when the spec or its input do not fit; a job that
    ran and failed is an outcome, not an exception."""
    import thresher
    from thresher.cli.views.events import ended_event

    job = thresher.load_spec(spec) if isinstance(spec, str | Path) else thresher.parse_spec(spec)
    result = thresher.run(job, store, raise_on_failure=False, progress=False)
    return JobOutcome.from_event(ended_event(result))


@dataclass(frozen=True)
class JobsApi:
    """`thresher serve`'s jobs API at `url`, as tenant `token` (a bearer token)."""

    url: str
    token: str | None = None
    timeout: float = 30.0

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def submit(self, body: Mapping[str, Any], idempotency_key: str | None = None) -> str:
        """Submit a job (the body of `POST /v1/jobs`); its id. With `idempotency_key`,
        submitting again (a retried task) returns the first job instead of a second."""
        headers = dict(self.headers)
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        return str(self._call("POST", "/v1/jobs", json=dict(body), headers=headers)["id"])

    def submit_once(self, body: Mapping[str, Any], key: str, attempt: int = 0) -> str:
        """Submit one task's job once: a retry (`attempt` above 0) gets the first
        attempt's job back — one whose caller was lost after submitting runs on, no second
        job starts — unless that job failed or was cancelled: then a job of its own."""
        job_id = self.submit(body, idempotency_key=key)
        if attempt > 0 and self.job(job_id)["status"] in ("failed", "cancelled"):
            job_id = self.submit(body, idempotency_key=f"{key}/{attempt}")
        return job_id

    def job(self, job_id: str) -> dict[str, Any]:
        """`GET /v1/jobs/{job_id}`: status, counts, progress."""
        return self._call("GET", f"/v1/jobs/{job_id}")

    async def job_async(self, job_id: str) -> dict[str, Any]:
        """The same, without blocking an event loop (an Airflow trigger's)."""
        import httpx2 as httpx

        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers) as client:
            reply = await client.get(f"{self.url.rstrip('/')}/v1/jobs/{job_id}")
        return _answer(reply, f"GET /v1/jobs/{job_id}")

    def wait(
        self, job_id: str, poll_seconds: float = 2.0, timeout: float | None = None
    ) -> JobOutcome:
        """Poll the job until it ends; raises ThresherError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (job := self.job(job_id))["status"] not in FINISHED:
            if deadline is not None and time.monotonic() > deadline:
                raise ThresherError(f"job {job_id} did not end in {timeout} s: {job['status']}")
            time.sleep(poll_seconds)
        return JobOutcome.from_api(job, self.url)

    def drift(self, job_id: str, baseline: str | None = None) -> dict[str, Any]:
        """The job's drift report against `baseline` (default: its `[monitor] baseline`)."""
        params = {"baseline": baseline} if baseline else {}
        return self._call("GET", f"/v1/jobs/{job_id}/drift", params=params)

    def quality(self, job_id: str) -> dict[str, Any]:
        """The job's quality over the actuals added so far (metrics None before any)."""
        return self._call("GET", f"/v1/jobs/{job_id}/quality")

    def ticks(self, schedule: str, limit: int = 20) -> list[dict[str, Any]]:
        """A schedule's recent ticks, newest first."""
        answer = self._call("GET", f"/v1/schedules/{schedule}/ticks", params={"limit": limit})
        return list(answer["data"])

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        import httpx2 as httpx

        kwargs.setdefault("headers", self.headers)
        reply = httpx.request(method, self.url.rstrip("/") + path, timeout=self.timeout, **kwargs)
        return _answer(reply, f"{method} {path}")


def _answer(reply: Any, what: str) -> dict[str, Any]:
    """The JSON of a 2xx reply, else a ThresherError carrying the server's own message."""
    if reply.status_code >= 400:
        try:
            detail = reply.json().get("detail") or reply.text
        except ValueError:
            detail = reply.text
        raise ThresherError(f"{what}: {reply.status_code} {detail}")
    answer: dict[str, Any] = reply.json()
    return answer
