"""The continuous consumer: a `table = "kafka"` trigger in a real `thresher serve`, over
a topic that gets messages in bursts while the server is SIGKILLed and started again.
Every message is scored by exactly one job, each job reads the offsets its set covers,
and the group ends committed at the partitions' ends."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kafka_topics import broker, committed, ends, new_topic, produce

from .servers import Server, ServiceSite
from .test_service_triggers import query, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def site_for(root: Path, address: str, topic: str, group: str) -> ServiceSite:
    site = ServiceSite(root)
    text = site.config.read_text()
    text = text.replace(
        f"allowed_roots = [{json.dumps(str(site.shared))}]",
        f"allowed_roots = [{json.dumps(str(site.shared))}, {json.dumps(f'kafka://{address}/')}]",
    )
    site.config.write_text(
        text
        + f"""
[triggers.events]
watch = "kafka://{address}/{topic}"
table = "kafka"
poll_seconds = 0.25
tenant = "acme"

[triggers.events.job]
model = "double"
id_column = "n"
columns = ["x"]
source = {{ options = {{ group = "{group}", gather_messages = 40, gather_seconds = 1 }} }}
"""
    )
    return site


def scored(site: ServiceSite) -> Counter[int]:
    found: Counter[int] = Counter()
    for (job_id,) in query(site, "SELECT id FROM thresher_jobs WHERE state = 'succeeded'"):
        for part in (site.data / "outputs" / str(job_id)).glob("part-*.jsonl"):
            found.update(json.loads(line)["n"] for line in part.read_text().splitlines())
    return found


def all_ended(site: ServiceSite) -> bool:
    states = [s for (s,) in query(site, "SELECT state FROM thresher_jobs")]
    return bool(states) and all(s in ("succeeded", "failed", "cancelled") for s in states)


def test_every_message_in_exactly_one_job_through_a_restart(tmp_path: Path) -> None:
    address, topic = broker(), new_topic()
    group = f"g-{topic}"
    site = site_for(tmp_path, address, topic, group)
    produce(address, topic, 100)  # two sets' worth before the server starts
    server = Server(site, {})
    try:
        wait_until(lambda: sum(scored(site).values()) >= 100, 90, "the first 100 messages")
        produce(address, topic, 15, first=100)  # fewer than 40: the timer makes the set
        wait_until(lambda: sum(scored(site).values()) >= 115, 60, "the timer's set")
        produce(address, topic, 50, first=115)
        server.kill()
    finally:
        server.stop()
    produce(address, topic, 35, first=165)  # while it is down
    server = Server(site, {})
    try:
        wait_until(lambda: sum(scored(site).values()) >= 200 and all_ended(site), 90, "all 200")
    finally:
        server.stop()
    assert scored(site) == Counter(range(200))  # each message once
    states = {s for (s,) in query(site, "SELECT state FROM thresher_jobs")}
    assert states == {"succeeded"}, states
    jobs = query(site, "SELECT spec FROM thresher_jobs")
    assert len(jobs) >= 3  # a set by count, one by the timer, one after the restart
    wanted = {p: e for p, e in ends(address, topic).items() if e > 0}
    assert committed(address, group, topic) == wanted  # the group at the ends


def test_two_servers_on_one_postgresql_store_one_killed(
    tmp_path: Path, postgres_server: str, pg_schema: str
) -> None:
    """Two servers watch the same topic through one PostgreSQL store; one is SIGKILLed
    mid-way. Each set is taken by one server (the trigger ledger), so every message is
    scored by exactly one job, and the group ends at the partitions' ends."""
    from contextlib import closing
    from urllib.parse import quote

    import adbc_driver_postgresql.dbapi as pg_adbc

    address, topic = broker(), new_topic()
    group = f"g-{topic}"
    site = site_for(tmp_path, address, topic, group)
    site.store = f"{postgres_server}?options={quote(f'-csearch_path={pg_schema}')}"

    def jobs() -> list[tuple[str, str]]:
        with closing(pg_adbc.connect(site.store)) as conn, closing(conn.cursor()) as cur:
            try:
                cur.execute("SELECT id, state FROM thresher_jobs")
            except Exception:  # the tables are not made yet
                return []
            return [(str(i), str(s)) for i, s in cur.fetchall()]

    def scored_by_jobs() -> Counter[int]:
        found: Counter[int] = Counter()
        for job_id, state in jobs():
            if state == "succeeded":
                for part in (site.data / "outputs" / job_id).glob("part-*.jsonl"):
                    found.update(json.loads(line)["n"] for line in part.read_text().splitlines())
        return found

    def ended() -> bool:
        states = [s for _, s in jobs()]
        return bool(states) and all(s in ("succeeded", "failed", "cancelled") for s in states)

    servers = [Server(site, {}), Server(site, {})]
    try:
        produce(address, topic, 120)
        wait_until(lambda: sum(scored_by_jobs().values()) >= 120, 90, "the first 120")
        produce(address, topic, 60, first=120)
        servers[0].kill()  # while the next set may be gathering or running on it
        produce(address, topic, 70, first=180)
        wait_until(lambda: sum(scored_by_jobs().values()) >= 250 and ended(), 120, "all 250")
    finally:
        for server in servers:
            server.stop()
    assert scored_by_jobs() == Counter(range(250))  # each message once
    assert {s for _, s in jobs()} == {"succeeded"}
    wanted = {p: e for p, e in ends(address, topic).items() if e > 0}
    assert committed(address, group, topic) == wanted
