"""Dataset-arrival triggers in a real `thresher serve`: files arrive in a watched folder
(and in an S3 prefix on moto's server) over time — some in one go, one written slowly,
one renamed into place, some completed by a `_SUCCESS` marker — and the server is
SIGKILLed in the middle and started again. Every file ends in exactly one job (its
`source.files`), every row in exactly one job's results, and each job's webhook fires."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from .servers import Server, ServiceSite, free_port, webhook_inbox

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

Put = Callable[[str, bytes], None]
FILES = 8  # the data files `arrivals` writes


def lines(ids: range) -> bytes:
    return "".join(json.dumps({"id": i, "x": float(i)}) + "\n" for i in ids).encode()


@pytest.fixture
def receiver() -> Iterator[tuple[int, list[bytes]]]:
    """A webhook receiver on 127.0.0.1: its port and the bodies it got."""
    with webhook_inbox(status=204) as inbox:
        yield inbox.port, inbox.bodies


def triggers_toml(inbox: str, marked: str, hook: int) -> str:
    job = (
        '{ model = "double", id_column = "id",'
        f' notify = {{ webhook = "http://127.0.0.1:{hook}/hook" }} }}'
    )
    return f"""
webhook_allow_private = true

[triggers.inbox]
watch = {json.dumps(inbox)}
pattern = "*.jsonl"
settle_seconds = 2
poll_seconds = 0.25
tenant = "acme"
job = {job}

[triggers.marked]
watch = {json.dumps(marked)}
pattern = "*.jsonl"
marker = "_SUCCESS"
poll_seconds = 0.25
tenant = "acme"
job = {job}
"""


def site_for(root: Path, roots: list[str], inbox: str, marked: str, hook: int) -> ServiceSite:
    site = ServiceSite(root, settings=triggers_toml(inbox, marked, hook))
    text = site.config.read_text()
    text = text.replace(
        f"allowed_roots = [{json.dumps(str(site.shared))}]", f"allowed_roots = {json.dumps(roots)}"
    )
    site.config.write_text(text)
    return site


def arrivals(site: ServiceSite, put: Put, env: dict[str, str], slow: Callable[[], None]) -> int:
    """Files arrive over time around a SIGKILL of the server; returns the ids written."""
    server = Server(site, env)
    put("inbox/a.jsonl", lines(range(0, 10)))
    put("inbox/b.jsonl", lines(range(10, 20)))
    put("marked/day=1/x.jsonl", lines(range(100, 110)))
    put("marked/day=1/y.jsonl", lines(range(110, 120)))
    put("marked/day=1/_SUCCESS", b"")
    put("marked/day=2/z.jsonl", lines(range(120, 130)))  # its marker comes after the crash
    wait_until(lambda: job_count(site) >= 2, 60, "the first two sets' jobs")
    writer = threading.Thread(target=slow)  # inbox/slow.jsonl: ids 200..229, over ~6 s
    writer.start()
    time.sleep(1.5)
    server.kill()  # mid-write, with day=2 waiting for its marker
    server = Server(site, env)
    try:
        writer.join()
        put("marked/day=2/_SUCCESS", b"")
        put("inbox/sub/c.jsonl", lines(range(300, 310)))
        put("inbox/d.jsonl", lines(range(310, 320)))
        wait_until(lambda: settled(site, FILES), 120, "every file's job to finish")
    finally:
        server.stop()
    return 10 + 10 + 10 + 10 + 10 + 30 + 10 + 10


def wait_until(done: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.2)
    raise AssertionError(f"waited {seconds} s for {what}")


def query(site: ServiceSite, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(site.store.removeprefix("sqlite:///"))) as db:
        try:
            return db.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return []  # the tables are not made yet


def job_count(site: ServiceSite) -> int:
    return len(query(site, "SELECT id FROM thresher_jobs"))


def settled(site: ServiceSite, files: int) -> bool:
    """Whether `files` files are in jobs, every job has ended and its webhook is delivered
    (the server is stopped next: a delivery still pending would wait for its restart)."""
    jobs = query(site, "SELECT state, spec FROM thresher_jobs")
    taken = sum(len(json.loads(spec)["source"]["files"]) for _, spec in jobs)
    delivered = query(
        site, "SELECT COUNT(*) FROM thresher_webhook_deliveries WHERE delivered_at IS NOT NULL"
    )
    return (
        taken >= files
        and all(s in ("succeeded", "failed", "cancelled") for s, _ in jobs)
        and bool(delivered)
        and delivered[0][0] >= len(jobs)
    )


def check_exactly_once(site: ServiceSite, expected_ids: int, hooks: list[bytes]) -> None:
    jobs = query(site, "SELECT id, state, spec FROM thresher_jobs")
    assert {state for _, state, _ in jobs} == {"succeeded"}, jobs
    read = Counter(f for _, _, spec in jobs for f in json.loads(spec)["source"]["files"])
    assert set(read.values()) == {1}, read  # every file in exactly one job
    names = sorted(f.rsplit("/", 2)[-2] + "/" + f.rsplit("/", 1)[-1] for f in read)
    assert names == [
        "day=1/x.jsonl", "day=1/y.jsonl", "day=2/z.jsonl", "inbox/a.jsonl", "inbox/b.jsonl",
        "inbox/d.jsonl", "inbox/slow.jsonl", "sub/c.jsonl",
    ]  # fmt: skip
    manifest = query(site, "SELECT path FROM thresher_trigger_files WHERE role = 'data'")
    assert sorted(p for (p,) in manifest) == sorted(read)
    ids: Counter[int] = Counter()
    for job_id, _, _ in jobs:
        for part in (site.data / "outputs" / job_id).glob("part-*.jsonl"):
            ids.update(json.loads(line)["id"] for line in part.read_text().splitlines())
    assert len(ids) == expected_ids and set(ids.values()) == {1}  # every row once
    wait_until(lambda: len(hooks) >= len(jobs), 60, "a webhook per triggered job")
    events = [json.loads(body) for body in hooks]
    assert sorted(e["job_id"] for e in events) == sorted(j for j, _, _ in jobs)


def test_a_folder_watch_takes_every_file_once_through_a_restart(
    tmp_path: Path, receiver: tuple[int, list[bytes]]
) -> None:
    hook, hooks = receiver
    shared = tmp_path / "shared"
    site = site_for(tmp_path, [str(shared)], str(shared / "inbox"), str(shared / "marked"), hook)

    def put(name: str, data: bytes) -> None:
        path = shared / name
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.part")  # renamed into place, whole
        temporary.write_bytes(data)
        temporary.rename(path)

    def slow() -> None:
        with (shared / "inbox" / "slow.jsonl").open("wb") as f:
            for i in range(200, 230):
                f.write(lines(range(i, i + 1)))
                f.flush()
                time.sleep(0.2)

    check_exactly_once(site, arrivals(site, put, {}, slow), hooks)


BUCKET = "thresher-triggers"
AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture
def moto(tmp_path: Path) -> Iterator[str]:
    """moto's S3 server on a free port of 127.0.0.1; its URL."""
    port, log = free_port(), tmp_path / "moto.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(url), 30, f"moto on port {port}")
        yield url
    finally:
        server.terminate()
        server.wait(10)


def _answers(url: str) -> bool:
    import httpx

    try:
        httpx.get(url, timeout=0.5)
    except httpx.TransportError:
        return False
    return True


@pytest.mark.integration
def test_an_s3_prefix_watch_takes_every_object_once_through_a_restart(
    tmp_path: Path, moto: str, receiver: tuple[int, list[bytes]]
) -> None:
    import boto3

    hook, hooks = receiver
    env = {**AWS, "AWS_ENDPOINT_URL": moto}
    client = boto3.client(
        "s3", endpoint_url=moto, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip
    client.create_bucket(Bucket=BUCKET)
    root = f"s3://{BUCKET}"
    site = site_for(tmp_path, [f"{root}/"], f"{root}/inbox", f"{root}/marked", hook)

    def put(name: str, data: bytes) -> None:
        client.put_object(Bucket=BUCKET, Key=name, Body=data)

    def slow() -> None:  # an object put again and again as it grows (a new ETag each time)
        for i in range(200, 230):
            put("inbox/slow.jsonl", lines(range(200, i + 1)))
            time.sleep(0.2)

    check_exactly_once(site, arrivals(site, put, env, slow), hooks)


def test_two_servers_on_one_postgresql_store_take_each_file_once(
    tmp_path: Path, postgres_server: str, pg_schema: str, receiver: tuple[int, list[bytes]]
) -> None:
    from urllib.parse import quote

    import adbc_driver_postgresql.dbapi as pg_adbc

    shared = tmp_path / "shared"
    inbox = shared / "inbox"
    inbox.mkdir(parents=True)
    site = site_for(tmp_path, [str(shared)], str(inbox), str(shared / "marked"), receiver[0])
    quick = site.config.read_text().replace("settle_seconds = 2", "settle_seconds = 0.3")
    site.config.write_text(quick)
    site.store = f"{postgres_server}?options={quote(f'-csearch_path={pg_schema}')}"

    def specs() -> list[tuple[str, dict[str, Any]]]:
        with closing(pg_adbc.connect(site.store)) as conn, closing(conn.cursor()) as cur:
            cur.execute("SELECT state, spec FROM thresher_jobs")
            return [(state, json.loads(spec)) for state, spec in cur.fetchall()]

    servers = [Server(site), Server(site)]
    try:
        for n in range(20):  # 5 bursts of 4 files, each settling while both servers look
            (inbox / f".{n}.part").write_bytes(lines(range(n * 10, n * 10 + 10)))
            (inbox / f".{n}.part").rename(inbox / f"f{n:02d}.jsonl")
            time.sleep(1.0 if n % 4 == 3 else 0.0)

        def all_done() -> bool:
            jobs = specs()
            files = sum(len(spec["source"]["files"]) for _, spec in jobs)
            return files >= 20 and all(s in ("succeeded", "failed") for s, _ in jobs)

        wait_until(all_done, 120, "all 20 files' jobs")
    finally:
        for server in servers:
            server.stop()
    jobs = specs()
    read = Counter(f for _, spec in jobs for f in spec["source"]["files"])
    assert len(read) == 20 and set(read.values()) == {1}, read
    assert {state for state, _ in jobs} == {"succeeded"}
