"""Webhooks: signatures, the URL policy, and delivery with retries to a real local server."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from thresher.notify import check_webhook_url, signed_headers, standard_secret, verify_signature
from thresher.notify import urls as webhook_policy
from thresher.notify.endpoints import new_endpoint_id, new_secret, subject
from thresher.notify.endpoints import signed_headers as endpoint_headers
from thresher.notify.retries import RetryPolicy, retry_after_seconds
from thresher.notify.sender import WebhookSender, WebhookSettings
from thresher.service.background.webhooks import start_webhooks
from thresher.service.config import ServerConfig, prepare
from thresher.service.state import ServiceState
from thresher.spec import JobSpec
from thresher.store import (
    BatchRow,
    BatchStatus,
    EndpointRow,
    JobRecord,
    JobState,
    Store,
    open_store,
)

SECRET = "s3cret"
# waits 0.05, 0.1, 0.2, 0.4 s, none drawn: five tries, the sixth past the window
FAST = RetryPolicy(first=0.05, longest=0.4, window=1.0, jitter=0.0)
# A second try a second after the first fails: time for the test to change the endpoint
# in between, and a window wide enough that a loaded machine's slow first try still
# leaves it one (a 0.5 s window lost it under CI's load: the delivery ended failed).
ONCE_LATER = RetryPolicy(first=1.0, longest=1.0, window=10.0, jitter=0.0)


@dataclass
class Receiver:
    """A webhook receiver on 127.0.0.1 answering each POST with the next scripted status."""

    statuses: list[int]
    received: list[dict[str, Any]] = field(default_factory=list)
    retry_after: dict[int, str] = field(default_factory=dict)  # sent with these statuses
    port: int = 0

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/hook"

    def wait_for(self, count: int, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.received) >= count, f"got {len(self.received)} of {count} deliveries"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver(statuses=[])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = dict(self.headers.items())
            got.received.append({"headers": headers, "body": body, "at": time.monotonic()})
            status = got.statuses.pop(0) if got.statuses else 200
            self.send_response(status)
            if status in got.retry_after:
                self.send_header("Retry-After", got.retry_after[status])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield got
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(f"sqlite:///{tmp_path / 'store.db'}")


def finished_job(
    store: Store, webhook: str | None, state: JobState = JobState.SUCCEEDED
) -> JobRecord:
    """A job that ran two shards (10 rows in, 9 out, 1 error) and ended in `state`."""
    job_id = f"job-{time.monotonic_ns()}"
    spec = JobSpec.model_validate(
        {
            "model": {"kind": "python", "uri": "model.py"},
            "source": {"uri": "in.csv", "id_column": "id"},
            "sink": {"uri": "out/"},
            "notify": {"webhook": webhook},
        }
    )
    store.create_job(job_id, "hooked", spec, {"shards": [{}, {}]})
    store.shard_done(job_id, 0, "a0", (6, 5, 1), 0.1)
    store.shard_done(job_id, 1, "a1", (4, 4, 0), 0.1)
    store.finish(job_id, state, None, None if state == JobState.SUCCEEDED else "it broke")
    return store.job(job_id)


def wait_state(store: Store, job_id: str, state: str, timeout: float = 5.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = store.deliveries.of_job(job_id)
        if rows and rows[0]["state"] == state:
            return rows[0]
        time.sleep(0.01)
    raise AssertionError(
        f"delivery of {job_id} never reached {state}: {store.deliveries.of_job(job_id)}"
    )


def test_signature_round_trip_and_standard_webhooks_verifies_it() -> None:
    from standardwebhooks import Webhook

    body = b'{"event": "job.completed"}'
    headers = signed_headers([SECRET], "msg_1", body)
    assert headers["webhook-signature"].startswith("v1,")
    assert verify_signature(SECRET, headers, body)
    assert verify_signature(SECRET, headers, body.decode())
    assert not verify_signature("other", headers, body)
    assert not verify_signature(SECRET, headers, body + b" ")
    moved = {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) + 1)}
    assert not verify_signature(SECRET, moved, body)
    assert Webhook(standard_secret(SECRET)).verify(body, headers) == {"event": "job.completed"}


def test_an_old_signature_is_refused_unless_age_is_not_checked() -> None:
    headers = signed_headers([SECRET], "msg_1", b"{}", at=time.time() - 3600)
    assert not verify_signature(SECRET, headers, b"{}")
    assert verify_signature(SECRET, headers, b"{}", max_age=None)
    assert not verify_signature(SECRET, {**headers, "webhook-timestamp": "yesterday"}, b"{}")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://10.1.2.3/hook", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[::1]/hook", "loopback"),
        ("http://localhost/hook", "loopback"),
        ("http://[::ffff:192.168.0.1]/hook", "private"),
        ("http://224.0.0.1/hook", "multicast"),
        ("http://0.0.0.0/hook", "unspecified"),
        ("http://100.64.0.1/hook", "non-global"),
    ],
)
def test_private_addresses_are_refused_unless_allowed(url: str, reason: str) -> None:
    with pytest.raises(ValueError, match=rf"notify\.webhook: .*\({reason}\), not a public"):
        check_webhook_url(url, allow_private=False)
    check_webhook_url(url, allow_private=True)


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "http:///nohost"])
def test_only_http_urls_with_a_host_are_webhooks(url: str) -> None:
    with pytest.raises(ValueError, match=r"notify\.webhook"):
        check_webhook_url(url, allow_private=True)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://[2002:7f00:1::]/hook", "6to4 of 127.0.0.1: loopback"),
        ("http://[2002:c0a8:1::1]/hook", "6to4 of 192.168.0.1: private"),
        ("http://[2002:a9fe:a9fe::]/hook", "6to4 of 169.254.169.254: link-local"),
        ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", "private"),  # Teredo
        ("http://[::7f00:1]/hook", "reserved"),  # IPv4-compatible 127.0.0.1
        ("http://[64:ff9b::a00:1]/hook", "reserved"),  # NAT64 of 10.0.0.1
    ],
)
def test_ipv6_forms_wrapping_a_private_ipv4_are_refused(url: str, reason: str) -> None:
    with pytest.raises(ValueError, match=rf"notify\.webhook: .*\({reason}\), not a public"):
        check_webhook_url(url, allow_private=False)


def test_a_6to4_address_of_a_public_ipv4_passes() -> None:
    check_webhook_url("http://[2002:5db8:d822::1]/hook", allow_private=False)  # 93.184.216.34


@pytest.mark.parametrize(
    "url",
    [
        "http://93.184.216.34/hook\x00",
        "http://93.184.216.34/hook\r\nX-Injected: 1",
        "http://93.184.216.34/a b",
        "http://93.184.216.34/\thook",
        "http://93.184.216.34/" + "a" * 2100,
    ],
)
def test_a_url_with_control_characters_spaces_or_too_long_is_refused(url: str) -> None:
    for allow_private in (False, True):
        with pytest.raises(ValueError, match=r"notify\.webhook: "):
            check_webhook_url(url, allow_private=allow_private)


def fake_dns(monkeypatch: pytest.MonkeyPatch, names: dict[str, list[str]]) -> None:
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in names:
            family = {4: socket.AF_INET, 6: socket.AF_INET6}
            return [
                (family[6 if ":" in ip else 4], socket.SOCK_STREAM, 6, "", (ip, port))
                for ip in names[host]
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(webhook_policy.socket, "getaddrinfo", getaddrinfo)


def test_a_public_host_passes_but_any_private_address_refuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_dns(monkeypatch, {"hooks.example.com": ["93.184.216.34"], "mixed.example.com":
                           ["93.184.216.34", "10.0.0.7"]})  # fmt: skip
    check_webhook_url("https://hooks.example.com/x", allow_private=False)
    with pytest.raises(ValueError, match=r"10\.0\.0\.7 \(private\)"):
        check_webhook_url("https://mixed.example.com/x", allow_private=False)


def test_delivery_retries_with_backoff_until_the_receiver_answers(
    store: Store, receiver: Receiver
) -> None:
    receiver.statuses = [503, 500]
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=FAST))
    job = finished_job(store, receiver.url())
    try:
        sender.job_finished(job)
        receiver.wait_for(3)
        row = wait_state(store, job.id, "delivered")
    finally:
        sender.close()
    assert row["attempts"] == 3 and row["last_status"] == 200 and row["delivered_at"]
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(receiver.received)]
    assert gaps[0] >= FAST.first and gaps[1] >= 2 * FAST.first
    last = receiver.received[-1]
    assert verify_signature(SECRET, last["headers"], last["body"])
    ids = {r["headers"]["webhook-id"] for r in receiver.received}
    assert len(ids) == 1  # one message, retried: the receiver can drop a repeat
    assert json.loads(last["body"]) == {
        "event": "job.completed",
        "job_id": job.id,
        "status": "succeeded",
        "request_counts": {"total": 10, "completed": 9, "failed": 1},
        "created_at": job.created_at,
        "finished_at": job.finished_at,
    }


def test_a_job_end_is_delivered_once_however_often_the_hook_runs(
    store: Store, receiver: Receiver
) -> None:
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=FAST))
    job = finished_job(store, receiver.url(), JobState.FAILED)
    try:
        sender.job_finished(job)
        sender.job_finished(job)
        wait_state(store, job.id, "delivered")
        time.sleep(0.1)
    finally:
        sender.close()
    assert len(receiver.received) == 1
    assert json.loads(receiver.received[0]["body"])["event"] == "job.failed"


def test_a_refused_url_gets_no_delivery(store: Store, receiver: Receiver) -> None:
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=False, retry=FAST))
    job = finished_job(store, receiver.url())
    try:
        sender.job_finished(job)
        row = wait_state(store, job.id, "refused")
    finally:
        sender.close()
    assert receiver.received == [] and row["attempts"] == 1
    assert "loopback" in row["last_error"]


def test_a_client_error_is_not_retried(store: Store, receiver: Receiver) -> None:
    receiver.statuses = [404]
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=FAST))
    job = finished_job(store, receiver.url(), JobState.CANCELLED)
    try:
        sender.job_finished(job)
        row = wait_state(store, job.id, "failed")
    finally:
        sender.close()
    assert row["attempts"] == 1 and row["last_status"] == 404 and len(receiver.received) == 1


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_errors_are_retried_then_given_up(store: Store) -> None:
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=FAST))
    job = finished_job(store, f"http://127.0.0.1:{closed_port()}/hook")
    try:
        sender.job_finished(job)
        row = wait_state(store, job.id, "failed")
    finally:
        sender.close()
    assert row["attempts"] == 5 and row["last_status"] is None and "Connect" in row["last_error"]


def test_pending_deliveries_resume_after_a_restart(store: Store, receiver: Receiver) -> None:
    receiver.statuses = [503]
    later = RetryPolicy(first=60.0, longest=60.0, jitter=0.0)
    slow = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=later))
    job = finished_job(store, receiver.url())
    slow.job_finished(job)
    receiver.wait_for(1)
    wait_state(store, job.id, "pending")
    slow.close()  # the server stops while the retry waits
    restarted = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=FAST))
    try:
        assert restarted.resume_pending() == 1
        row = wait_state(store, job.id, "delivered")
    finally:
        restarted.close()
    assert row["attempts"] == 2 and len(receiver.received) == 2


def test_delivery_connects_to_the_address_it_checked(
    store: Store, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host is resolved once, by the policy; the POST goes to that address with the
    name in `Host`, so a DNS answer that changes after the check cannot redirect it."""
    fake_dns(monkeypatch, {"hooks.example.com": ["127.0.0.1"]})
    monkeypatch.setattr(webhook_policy, "_not_public", lambda address: None)
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=False, retry=FAST))
    job = finished_job(store, receiver.url("hooks.example.com"))
    try:
        sender.job_finished(job)
        wait_state(store, job.id, "delivered")
    finally:
        sender.close()
    headers = {k.lower(): v for k, v in receiver.received[0]["headers"].items()}
    assert headers["host"] == f"hooks.example.com:{receiver.port}"


def test_the_service_hook_delivers_with_the_configured_secret(
    store: Store, receiver: Receiver, tmp_path: Path
) -> None:
    config = prepare(ServerConfig(data_dir=tmp_path / "data", webhook_allow_private=True))
    state = ServiceState(store=store, config=config, data_dir=config.data_dir)
    stop = start_webhooks(state)
    try:
        state.job_finished(finished_job(store, receiver.url()))
        receiver.wait_for(1)
    finally:
        stop()
    got = receiver.received[0]
    assert config.webhook_secret
    assert verify_signature(config.webhook_secret, got["headers"], got["body"])


def test_a_job_without_a_webhook_sends_nothing(store: Store, receiver: Receiver) -> None:
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=FAST))
    job = finished_job(store, None)
    sender.job_finished(job)
    sender.close()
    assert store.deliveries.of_job(job.id) == [] and receiver.received == []


def test_a_missed_tick_is_told_to_on_missed_once(store: Store, receiver: Receiver) -> None:
    from datetime import UTC, datetime

    from thresher.schedules.notice import TickNotice
    from thresher.schedules.settings import ScheduleSettings

    settings = ScheduleSettings.model_validate(
        {"cron": "0 2 * * *", "tenant": "acme", "job": {}, "notify": {"on_missed": receiver.url()}}
    )
    notice = TickNotice(
        "nightly",
        "nightly",
        settings,
        datetime(2026, 12, 1, 2, tzinfo=UTC),
        "missed",
        "too late to run",
    )
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=FAST))
    try:
        sender.tick_missed(notice)
        sender.tick_missed(notice)
        wait_state(store, "tick:nightly:2026-12-01T02:00:00+00:00", "delivered")
        time.sleep(0.1)
    finally:
        sender.close()
    (got,) = receiver.received
    body = json.loads(got["body"])
    assert body == {
        "event": "schedule.tick_missed",
        "schedule": "nightly",
        "nominal_time": "2026-12-01T02:00:00+00:00",
        "outcome": "missed",
        "message": "too late to run",
    }
    assert verify_signature(SECRET, got["headers"], got["body"])


def _cli_job(tmp_path: Path, webhook: str, *, failing: bool = False) -> Path:
    """A small job whose `notify.webhook` is `webhook` (failing, if `failing`: its model
    rejects every row and no error is allowed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": list(range(50)), "x": [float(i) for i in range(50)]}),
                   tmp_path / "in.parquet")  # fmt: skip
    body = "raise RuntimeError('broken')" if failing else "return {'prediction': b['x'] * 2}"
    (tmp_path / "model.py").write_text(f"class M:\n    def predict(self, b):\n        {body}\n")
    spec = tmp_path / "job.toml"
    spec.write_text(
        '[source]\nuri = "in.parquet"\nid_column = "id"\n'
        '[model]\nkind = "python"\nuri = "model.py:M"\nbatch_format = "numpy"\n'
        f'[run]\nworkers = 1\nmax_attempts = 1\n[sink]\nuri = "out/"\n'
        f'[notify]\nwebhook = "{webhook}"\n'
        + ("[errors]\nmax_error_rate = 0.0\n" if failing else "")
    )
    return spec


def _thresher(*args: str, env: dict[str, str]) -> Any:
    import os
    import subprocess
    import sys

    binary = str(Path(sys.executable).parent / "thresher")
    return subprocess.run(
        [binary, *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip


def test_thresher_run_sends_the_job_webhook_as_the_service_does(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The real CLI: the signed `job.completed` event with the manifest's counts, once."""
    spec = _cli_job(tmp_path, receiver.url())
    done = _thresher("run", str(spec), env={"THRESHER_WEBHOOK_SECRET": SECRET})
    assert done.returncode == 0, done.stderr
    assert "webhook job.completed to http://127.0.0.1" in done.stderr
    (got,) = receiver.received
    body = json.loads(got["body"])
    assert body["event"] == "job.completed" and body["status"] == "succeeded"
    assert body["request_counts"] == {"total": 50, "completed": 50, "failed": 0}
    assert verify_signature(SECRET, got["headers"], got["body"])


def test_thresher_run_tells_a_failed_job_and_needs_the_secret(
    tmp_path: Path, receiver: Receiver
) -> None:
    spec = _cli_job(tmp_path, receiver.url(), failing=True)
    unsigned = _thresher("run", str(spec), env={"THRESHER_WEBHOOK_SECRET": ""})
    assert unsigned.returncode == 2 and "THRESHER_WEBHOOK_SECRET" in unsigned.stderr
    assert not (tmp_path / "out").exists()  # refused before any work
    failed = _thresher("run", str(spec), env={"THRESHER_WEBHOOK_SECRET": SECRET})
    assert failed.returncode == 1, failed.stderr
    (got,) = receiver.received
    assert json.loads(got["body"])["event"] == "job.failed"


def _nightly(tmp_path: Path, shift: float, alert: str) -> Path:
    """Job `nightly` over 2,000 rows of x ~ N(shift, 1), alerting to `alert`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.random.default_rng(int(shift * 10) + 1).normal(shift, 1.0, 2_000)
    pq.write_table(pa.table({"id": np.arange(2_000), "x": x}), tmp_path / f"in-{shift}.parquet")
    (tmp_path / "model.py").write_text(
        "class M:\n    def predict(self, b):\n        return {'prediction': b['x'] > 0}\n"
    )
    spec = tmp_path / f"job-{shift}.toml"
    spec.write_text(
        f'[job]\nname = "nightly"\n[source]\nuri = "in-{shift}.parquet"\nid_column = "id"\n'
        '[model]\nkind = "python"\nuri = "model.py:M"\nbatch_format = "numpy"\n'
        f'[run]\nworkers = 1\n[sink]\nuri = "out-{shift}/"\n'
        f'[monitor]\nalert_webhook = "{alert}"\n'
    )
    return spec


def test_a_drift_alert_goes_once_a_job_against_the_run_before(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The real CLI, three nights: the first has no baseline (no alert), the second's
    feature moved (a signed `monitor.drift` naming it), the third is like the second (none)."""
    env = {"THRESHER_WEBHOOK_SECRET": SECRET}
    for shift in (0.0, 1.5, 1.5):
        done = _thresher("run", str(_nightly(tmp_path, shift, receiver.url())), env=env)
        assert done.returncode == 0, done.stderr
    (got,) = receiver.received
    body = json.loads(got["body"])
    assert body["event"] == "monitor.drift" and body["verdict"] == "drift"
    assert body["name"] == "nightly"
    assert {c["name"] for c in body["columns"]} >= {"x"}
    assert next(c for c in body["columns"] if c["name"] == "x")["psi"] >= 0.25
    assert verify_signature(SECRET, got["headers"], got["body"])
    # The same job's end seen again (a restarted server, say) sends nothing more.
    store = open_store(f"sqlite:///{tmp_path / 'thresher-store.db'}")
    second = store.job(body["job_id"])
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=FAST))
    try:
        sender.job_finished(second)
        time.sleep(0.3)
    finally:
        sender.close()
    assert len(receiver.received) == 1
    assert [d["event"] for d in store.deliveries.of_job(second.id)] == ["monitor.drift"]


# -- OpenAI batch events to a tenant's webhook endpoints ----------------------------------


def endpoint(
    store: Store, url: str, events: list[str], tenant: str = "acme", made: int = 1
) -> EndpointRow:
    row = EndpointRow(
        new_endpoint_id(), tenant, "hook", url, events, new_secret(), None, None, made, made
    )
    store.webhook_endpoints.add(row, limit=20)
    return row


def ended_batch(status: BatchStatus, tenant: str = "acme") -> BatchRow:
    at = int(time.time())
    return BatchRow(f"batch_{time.monotonic_ns()}", tenant, "file-1", "/v1/embeddings", "24h",
                    status, at - 5, completed_at=at, failed_at=at)  # fmt: skip


def test_a_batch_event_goes_to_the_endpoints_that_take_it_signed_with_their_secrets(
    store: Store, receiver: Receiver
) -> None:
    from openai import OpenAI

    taker = endpoint(store, receiver.url(), ["batch.completed"])
    endpoint(store, receiver.url("localhost"), ["batch.failed"])  # not this event
    endpoint(store, receiver.url(), ["batch.completed"], tenant="globex")  # another's
    # made after the batch ended (its event announced late, by a restarted server)
    endpoint(store, receiver.url(), ["batch.completed"], made=int(time.time()) + 60)
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=FAST))
    batch = ended_batch(BatchStatus.COMPLETED)
    try:
        sender.batch_ended(batch)
        sender.batch_ended(batch)  # seen twice, sent once
        sender.batch_ended(ended_batch(BatchStatus.IN_PROGRESS))  # not ended: nothing
        receiver.wait_for(1)
        time.sleep(0.2)
    finally:
        sender.close()
    (got,) = receiver.received
    client = OpenAI(api_key="unused", base_url="http://127.0.0.1:9")
    event = client.webhooks.unwrap(got["body"], got["headers"], secret=taker.secret)
    assert (event.type, event.data.id, event.created_at) == (
        "batch.completed",
        batch.id,
        batch.completed_at,
    )
    assert got["headers"]["webhook-id"] == event.id  # the same id on every retry


def test_a_rotated_secret_signs_beside_the_old_one_only_while_it_is_kept() -> None:
    row = EndpointRow("we_1", "acme", "h", "http://x", [], "new", "old", 1_000, 1, 1)
    assert row.secrets(999.0) == ["new", "old"] and row.secrets(1_000.0) == ["new"]
    headers = endpoint_headers(row, "evt_1", b"{}", 5.0)
    assert len(headers["webhook-signature"].split()) == 2


def test_a_delivery_to_a_deleted_endpoint_is_refused_unsent(
    store: Store, receiver: Receiver
) -> None:
    gone = endpoint(store, receiver.url(), ["batch.failed"])
    receiver.statuses = [503]  # the first try fails; the endpoint is deleted before the next
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=ONCE_LATER))
    batch = ended_batch(BatchStatus.FAILED)
    try:
        sender.batch_ended(batch)
        receiver.wait_for(1)
        store.webhook_endpoints.remove(gone.id, "acme")
        row = wait_state(store, subject(gone.id, batch.id), "refused")
    finally:
        sender.close()
    assert "deleted" in row["last_error"] and len(receiver.received) == 1


def test_an_endpoints_new_url_takes_its_pending_retries(store: Store, receiver: Receiver) -> None:
    moved = endpoint(store, receiver.url("localhost"), ["batch.failed"])
    receiver.statuses = [503]  # the first try fails; the endpoint moves before the next
    sender = WebhookSender(store, WebhookSettings(SECRET, allow_private=True, retry=ONCE_LATER))
    batch = ended_batch(BatchStatus.FAILED)
    try:
        sender.batch_ended(batch)
        receiver.wait_for(1)
        table = store.webhook_endpoints
        table.save(replace(moved, url=receiver.url(), updated_at=2), ("url",))
        wait_state(store, subject(moved.id, batch.id), "delivered")
    finally:
        sender.close()
    first, second = (got["headers"]["Host"] for got in receiver.received)
    assert first.startswith("localhost:") and second.startswith("127.0.0.1:")


# -- retries: backoff with jitter in a window of hours, Retry-After, redelivery ----------


def test_waits_double_up_to_the_longest_with_jitter_and_stop_at_the_window() -> None:
    policy = RetryPolicy(first=1.0, longest=3600.0, window=24 * 3600.0)
    exact = RetryPolicy(first=1.0, longest=3600.0, window=24 * 3600.0, jitter=0.0)
    assert [exact.wait(n, 0.0) for n in (1, 2, 3, 12, 13, 40)] == [
        1.0, 2.0, 4.0, 2048.0, 3600.0, 3600.0,
    ]  # fmt: skip
    drawn = [policy.wait(1, 0.0) for _ in range(200)]
    assert all(w is not None and 0.75 <= w <= 1.25 for w in drawn)
    assert len({round(w or 0, 6) for w in drawn}) > 100  # spread, not one value
    assert exact.wait(5, 24 * 3600.0 - 10) is None  # would start past the window
    assert exact.wait(5, 24 * 3600.0 - 20) == 16.0
    # a day of a receiver down: tried about thirty times, not five
    age, tries = 0.0, 0
    while (wait := exact.wait(tries + 1, age)) is not None:
        age, tries = age + wait, tries + 1
    assert 30 <= tries <= 40 and age <= 24 * 3600


def test_a_receivers_retry_after_is_honoured() -> None:
    exact = RetryPolicy(first=1.0, jitter=0.0)
    assert exact.wait(1, 0.0, retry_after=120.0) == 120.0
    assert exact.wait(1, 0.0, retry_after=0.5) == 1.0  # never sooner than the backoff
    assert exact.wait(1, 0.0, retry_after=25 * 3600.0) is None  # past the window: over
    assert retry_after_seconds("30") == 30.0
    at = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    assert retry_after_seconds("Fri, 04 Dec 2026 12:01:00 GMT", now=at) == 60.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_a_429_with_retry_after_waits_that_long(store: Store, receiver: Receiver) -> None:
    receiver.statuses = [429]
    receiver.retry_after = {429: "1"}
    fast = RetryPolicy(first=0.01, longest=0.01, window=30.0, jitter=0.0)
    sender = WebhookSender(store, WebhookSettings("s", allow_private=True, retry=fast))
    job = finished_job(store, receiver.url())
    try:
        sender.job_finished(job)
        receiver.wait_for(2)
        wait_state(store, job.id, "delivered")
    finally:
        sender.close()
    (gap,) = [b["at"] - a["at"] for a, b in itertools.pairwise(receiver.received)]
    assert gap >= 1.0  # not the 0.01 s backoff


def test_a_failed_delivery_is_sent_again_on_request_once(store: Store, receiver: Receiver) -> None:
    receiver.statuses = [410]  # gone: not worth retrying, until someone fixes the receiver
    policy = RetryPolicy(first=0.01, longest=0.01, window=30.0)
    sender = WebhookSender(store, WebhookSettings("s", allow_private=True, retry=policy))
    job = finished_job(store, receiver.url())
    try:
        sender.job_finished(job)
        failed = wait_state(store, job.id, "failed")
        assert failed["last_status"] == 410
        assert sender.redeliver([job.id]) == 1
        delivered = wait_state(store, job.id, "delivered")
        assert sender.redeliver([job.id]) == 0  # delivered: nothing to send again
    finally:
        sender.close()
    assert delivered["attempts"] == 1 and len(receiver.received) == 2
    ids = {r["headers"]["webhook-id"] for r in receiver.received}
    assert len(ids) == 1  # the same message, so the receiver can tell it is a resend
