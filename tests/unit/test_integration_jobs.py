"""The orchestrators' one shape of a job's end (`JobOutcome`), from `thresher run --json`'s
`ended` event and from the API's job, and the API's refusals as ThresherError."""

from __future__ import annotations

import httpx2
import pytest

from thresher.errors import ThresherError
from thresher.integrations import jobs
from thresher.integrations.jobs import JobOutcome, JobsApi

pytestmark = pytest.mark.unit


def test_from_the_ended_event() -> None:
    event = {
        "event": "ended",
        "job_id": "20261205-020000-a1b2c3",
        "state": "succeeded",
        "succeeded": True,
        "output": "/data/scores/",
        "errors_uri": "/data/scores/_errors",
        "problems": [],
        "manifest": {"rows_in": 200, "rows_out": 198, "rows_error": 2},
    }
    outcome = JobOutcome.from_event(event)
    assert outcome.succeeded
    assert (outcome.rows_in, outcome.rows_out, outcome.rows_error) == (200, 198, 2)
    assert outcome.error_rate == 0.01
    assert outcome.output == "/data/scores/"
    assert outcome.record == event


def test_from_a_job_that_never_started() -> None:
    event = {"event": "ended", "job_id": None, "state": "failed", "succeeded": False,
             "output": None, "errors_uri": None, "problems": ["model.uri: no file"],
             "manifest": None}  # fmt: skip
    outcome = JobOutcome.from_event(event)
    assert not outcome.succeeded
    assert outcome.problems == ["model.uri: no file"]
    assert outcome.error_rate == 0.0


def test_from_the_apis_job() -> None:
    job = {
        "id": "j1",
        "status": "failed",
        "request_counts": {"total": 10, "completed": 4, "failed": 6},
        "results_url": "/v1/jobs/j1/results",
        "errors_url": "/v1/jobs/j1/errors",
        "message": "error rate 60% above errors.max_error_rate 10%",
    }
    outcome = JobOutcome.from_api(job, "http://thresher:8000/")
    assert outcome.output == "http://thresher:8000/v1/jobs/j1/results"
    assert outcome.error_rate == 0.6
    assert outcome.problems == [job["message"]]


def test_a_refusal_carries_the_servers_message(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(method: str, url: str, **kwargs: object) -> httpx2.Response:
        assert kwargs["headers"] == {"Authorization": "Bearer t0k"}
        return httpx2.Response(404, json={"detail": "no job 'nope'"})

    monkeypatch.setattr(httpx2, "request", refuse)
    with pytest.raises(ThresherError, match="GET /v1/jobs/nope: 404 no job 'nope'"):
        JobsApi("http://thresher:8000", "t0k").job("nope")
    assert jobs.FINISHED == ("succeeded", "failed", "cancelled")


@pytest.mark.parametrize(
    ("attempt", "first", "submitted"),
    [
        (0, "failed", ["task"]),  # a first attempt never looks back
        (1, "running", ["task"]),  # a retry waits on the job its lost attempt started
        (1, "succeeded", ["task"]),
        (2, "failed", ["task", "task/2"]),  # ... but runs again after a failed one
        (1, "cancelled", ["task", "task/1"]),
    ],
)
def test_submit_once(
    monkeypatch: pytest.MonkeyPatch, attempt: int, first: str, submitted: list[str]
) -> None:
    keys: list[str] = []

    def server(method: str, url: str, **kwargs: object) -> httpx2.Response:
        if method == "POST":
            headers = kwargs["headers"]
            assert isinstance(headers, dict)
            keys.append(headers["Idempotency-Key"])
            return httpx2.Response(201, json={"id": keys[-1]})
        return httpx2.Response(200, json={"id": url.rsplit("/", 1)[1], "status": first})

    monkeypatch.setattr(httpx2, "request", server)
    job_id = JobsApi("http://thresher:8000").submit_once({"model": "m"}, "task", attempt)
    assert keys == submitted
    assert job_id == submitted[-1]
