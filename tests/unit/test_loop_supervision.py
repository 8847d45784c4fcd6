"""Every background loop survives one tenant's poison object (issue 34, findings 2, 3
and 7): the object's exception is caught at it and counted, the others' work goes on, and
after `quarantine_after` failures in a row it is quarantined (a schedule or trigger
paused with its reason, a batch failed with `errors.data`, buffered records answered
failed, a delivery recorded failed). A loop whose pass raises anyway is restarted by its
supervisor, and `/healthz` says `degraded` meanwhile."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from croniter import CroniterBadDateError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_batch_worker import batch_api
from test_batch_worker import service as batch_service

from thresher.loops import LoopRegistry, Strikes, start_loop
from thresher.notify.attempts import Answer
from thresher.notify.sender import RetryPolicy, WebhookSender, WebhookSettings
from thresher.schedules import Cron
from thresher.service import submission
from thresher.service.background import batches
from thresher.service.background.buffer import Flusher
from thresher.service.background.ticker import Ticker
from thresher.service.background.watcher import Watcher
from thresher.service.config import BufferSettings, ServerConfig, prepare
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import (
    BatchStatus,
    open_store,
)

pytestmark = pytest.mark.unit

MODEL = "class M:\n    def predict(self, batch):\n        return {'prediction': batch['x']}\n"
LIMIT = 3


def site(tmp_path: Path, **config: Any) -> ServiceState:
    """A server's state (no threads): model `m`, `shared/` readable, quarantine at 3."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "m.py").write_text(MODEL)
    shared = tmp_path / "shared"
    (shared / "inbox").mkdir(parents=True, exist_ok=True)
    (shared / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n')
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            models={"m": ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")},
            allowed_roots=[str(shared)],
            quarantine_after=LIMIT,
            **config,
        )
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    return ServiceState(store=store, config=config, data_dir=config.data_dir)


def job(state: ServiceState) -> dict[str, Any]:
    uri = str(state.config.allowed_roots[0]) + "/in.jsonl"
    return {"model": "m", "source": {"uri": uri}, "id_column": "id"}


def hourly(state: ServiceState) -> str:
    """A healthy tenant schedule's stored settings: every hour, each tick's job queued."""
    return json.dumps(
        {"cron": "0 * * * *", "tenant": "acme", "overlap": "queue", "job": job(state)}
    )


def at(hour: int) -> datetime:
    return datetime(2026, 12, 1, hour, 0, 10, tzinfo=UTC)


def ticker(state: ServiceState) -> Ticker:
    return Ticker(
        state, lambda tenant, body, key, tick: submission.submit_job(state, tenant, body, key, tick)
    )


def test_a_never_firing_schedule_is_quarantined_and_other_schedules_still_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cron whose fire times raise (as croniter's did for 31 February before creation
    and `Cron` refused one: any schedule a later bug makes raise) is the poison."""
    real = Cron.after

    def after(self: Cron, start: datetime, count: int) -> list[datetime]:
        if self.expression == "0 0 31 2 *":
            raise CroniterBadDateError("failed to find next date")
        return real(self, start, count)

    monkeypatch.setattr(Cron, "after", after)
    state = site(tmp_path)
    table = state.store.schedules
    # Stored before creation refused it (or straight in the store): 31 February.
    table.create("evil", "never", json.dumps({"cron": "0 0 31 2 *", "tenant": "evil",
                                              "job": job(state)}))  # fmt: skip
    table.create("acme", "hourly", hourly(state))
    looking = ticker(state)
    for hour in range(1, LIMIT + 3):
        looking.look(at(hour))
    started = [t for t in state.store.ticks.recent("acme/hourly") if t.job_id]
    assert len(started) == LIMIT + 2  # every hour, the poison's looks notwithstanding
    reason = table.find("evil/never").quarantined  # type: ignore[union-attr]
    assert reason is not None and f"{LIMIT} failures in a row" in reason
    assert "CroniterBadDateError" in reason


def test_a_schedule_that_does_not_read_is_quarantined_not_every_schedule(tmp_path: Path) -> None:
    state = site(tmp_path)
    table = state.store.schedules
    table.create("evil", "garbled", '{"cron": 7}')
    table.create("acme", "hourly", hourly(state))
    looking = ticker(state)
    for hour in range(1, LIMIT + 1):
        looking.look(at(hour))
    assert len(state.store.ticks.recent("acme/hourly")) == LIMIT
    assert table.find("evil/garbled").quarantined is not None  # type: ignore[union-attr]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cron=st.one_of(
        st.sampled_from(["0 0 31 2 *", "0 0 30 2 *", "* * * * *", "59 23 31 12 *", "0 0 29 2 1"]),
        st.text(max_size=20),
    ),
    timezone=st.one_of(st.just("UTC"), st.text(max_size=10)),
    name=st.text(alphabet="abcdefghij", min_size=1, max_size=8),
)
def test_no_schedule_contents_stop_another_tenants_schedule(
    tmp_path_factory: pytest.TempPathFactory, cron: str, timezone: str, name: str
) -> None:
    """Whatever a stored schedule holds, the healthy one ticks at every look."""
    state = site(tmp_path_factory.mktemp("site"))
    table = state.store.schedules
    table.create("evil", name, json.dumps({"cron": cron, "timezone": timezone, "tenant": "evil",
                                           "job": job(state)}))  # fmt: skip
    table.create("acme", "hourly", hourly(state))
    looking = ticker(state)
    for hour in range(1, 3):
        looking.look(at(hour))
    assert len(state.store.ticks.recent("acme/hourly")) == 2


def test_a_batch_that_raises_is_failed_after_n_and_other_batches_move_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = batch_service(tmp_path, quarantine_after=LIMIT)
    with batch_api(state) as api:
        poison = api.create().json()["id"]
        healthy = api.create().json()["id"]
    real = batches.prepare_lines

    def prepare(source: Path, dest: Path, *args: Any) -> Any:
        if poison in dest.name:  # what a lone surrogate in a custom_id does
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return real(source, dest, *args)

    monkeypatch.setattr(batches, "prepare_lines", prepare)
    worker = batches.BatchWorker(state)
    table = state.store.batches
    worker.step()
    assert table.find(healthy).status == BatchStatus.IN_PROGRESS  # type: ignore[union-attr]
    for _ in range(LIMIT - 1):
        worker.step()
    failed = table.find(poison)
    assert failed is not None and failed.status == BatchStatus.FAILED
    (error,) = failed.errors["data"]  # type: ignore[index]
    assert "quarantined" in error["message"] and "UnicodeEncodeError" in error["message"]


def test_a_trigger_whose_listing_raises_is_paused_and_other_triggers_take_files(
    tmp_path: Path,
) -> None:
    state = site(tmp_path)
    inbox = Path(state.config.allowed_roots[0]) / "inbox"
    (inbox / "a.jsonl").write_text('{"id": 1, "x": 1.0}\n')
    table = state.store.trigger_defs
    for tenant, watch in (("evil", str(inbox) + "-poison"), ("acme", str(inbox))):
        job = {"model": "m", "id_column": "id"}
        settings = {"watch": watch, "pattern": "*.jsonl", "settle_seconds": 0,
                    "poll_seconds": 1, "tenant": tenant, "job": job}  # fmt: skip
        table.create(tenant, "inbox", json.dumps(settings), False)

    def listing(watch: str) -> Any:
        if watch.endswith("-poison"):
            raise RuntimeError("a listing that cannot be made")
        from thresher.triggers import list_watch

        return list_watch(watch)

    submit = lambda tenant, body, key: submission.submit_job(state, tenant, body, key)  # noqa: E731
    watcher = Watcher(state, submit, listing)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    for step in range(LIMIT + 1):
        watcher.look(now + timedelta(seconds=10 * step))
    assert [j.tenant for j in state.store.jobs(10)] == ["acme"]
    (evil,) = [r for r in table.every() if r.tenant == "evil"]
    assert evil.paused and evil.quarantined and "RuntimeError" in evil.quarantined


def test_a_buffered_batch_that_fails_is_answered_failed_and_others_flush(tmp_path: Path) -> None:
    state = site(tmp_path, buffer={"m": BufferSettings(max_records=1)})
    submitted: list[str] = []

    def submit(tenant: str, body: dict[str, Any], key: str | None) -> str:
        if tenant == "evil":
            raise ValueError("a batch that cannot be made into a job")
        submitted.append(tenant)
        return f"job-{len(submitted)}"

    flusher = Flusher(state, submit)
    requests = state.store.requests
    requests.add("evil", [("bad", "m", {"x": 1.0})])
    requests.add("zeta", [("good", "m", {"x": 1.0})])
    for _ in range(LIMIT):
        flusher.flush_due()
        flusher.reconcile()
    assert submitted[:1] == ["zeta"]
    bad = requests.get("evil", "bad")
    assert bad is not None and bad.state.value == "failed"
    assert "quarantined" in json.dumps(bad.error)


def test_a_delivery_that_raises_is_recorded_failed_and_others_are_delivered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = site(tmp_path)

    def post(self: WebhookSender, delivery: Any) -> Answer:
        if "poison" in delivery.url:
            raise KeyError("id")
        return Answer(204)

    monkeypatch.setattr(WebhookSender, "_post", post)
    fast = RetryPolicy(first=0.01, longest=0.01)
    settings = WebhookSettings("s", allow_private=True, retry=fast, quarantine_after=LIMIT)
    sender = WebhookSender(state.store, settings)
    try:
        sender._send("j1", "job.completed", "http://poison.example/", "{}")
        sender._send("j2", "job.completed", "http://good.example/", "{}")
        poison = sender.settle("j1", 10)
        good = sender.settle("j2", 10)
    finally:
        sender.close()
    assert [r["state"] for r in good] == ["delivered"]
    assert [r["state"] for r in poison] == ["failed"], poison
    assert "quarantined" in poison[0]["last_error"]
    assert state.store.deliveries.pending() == []


def test_a_loop_whose_pass_raises_is_restarted_and_healthz_says_degraded(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from thresher.service.app import create_app

    state = site(tmp_path)
    passes: list[str] = []
    healed = threading.Event()

    def step() -> float:
        passes.append("pass")
        if len(passes) <= 2:
            raise RuntimeError("a bug in the loop's own body")
        healed.set()
        return 0.05

    client = TestClient(create_app(state, background=False))
    stop = start_loop("thresher-flaky", step, registry=state.loops)
    try:
        time.sleep(0.2)
        answer = client.get("/healthz")
        assert answer.status_code == 200
        body = answer.json()
        assert body["status"] == "degraded", body
        flaky = body["loops"]["flaky"]
        assert flaky["failures"] >= 1 and "a bug in the loop's own body" in flaky["last_error"]
        assert healed.wait(10)  # restarted after its backoff (1 s, then 2 s)
        time.sleep(0.1)
        assert client.get("/healthz").json() == {"status": "ok"}
        shown = client.get("/healthz", params={"loops": "true"}).json()["loops"]["flaky"]
        assert shown["restarts"] == 2 and shown["last_success"] is not None
    finally:
        stop()
    assert "flaky" not in state.loops.report()


def test_strikes_forget_an_object_that_succeeds_and_spare_the_store() -> None:
    from thresher.store import StoreError

    strikes, quarantined = Strikes("test", 2), list[str]()

    def fail(exc: Exception) -> None:
        raise exc

    strikes.attempt("a", lambda: fail(ValueError("x")), quarantined.append)
    strikes.attempt("a", lambda: None, quarantined.append)
    strikes.attempt("a", lambda: fail(ValueError("x")), quarantined.append)
    for _ in range(3):
        strikes.attempt("a", lambda: fail(StoreError("locked")), quarantined.append)
    assert quarantined == []
    strikes.attempt("a", lambda: fail(ValueError("x")), quarantined.append)
    assert len(quarantined) == 1


def test_a_private_registry_is_fine_for_a_loop_of_its_own() -> None:
    registry, ran = LoopRegistry(), threading.Event()

    def step() -> float:
        ran.set()
        return 10.0

    stop = start_loop("thresher-once", step, registry=registry)
    assert ran.wait(5)
    stop()
    assert registry.report() == {}
