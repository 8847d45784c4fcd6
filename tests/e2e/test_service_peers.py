"""Servers on several hosts sharing one store: one that dies (SIGKILL) on another host
has its running job taken over and resumed by a live peer once its heartbeat is
`owner_timeout` old, exactly once per row; while it lives and beats, the peer leaves its
job alone. The other host is a real server process told its host is `ghost-host`
(`THRESHER_HOST`), so its owner cannot be checked by process id from here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from thresher.store import JobState, this_host

from .servers import Server, ServiceSite, wait_for_job
from .test_service_slots import job, results, store_of, until, write_shards

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_dead_servers_job_on_another_host_is_resumed_by_a_live_peer(tmp_path: Path) -> None:
    # 12 shards of 0.5 s: the job outlasts the peer's start, and is taken over half done.
    site = ServiceSite(tmp_path, slow_delay=0.5, settings="owner_timeout = 0.5")
    token = site.token("acme")
    xs = write_shards(site.shared / "in", shards=12, rows=5)
    body = {"source": {"uri": str(site.shared / "in"), "format": "jsonl"}, "model": "slow",
            "id_column": "id", "workers": 1}  # fmt: skip
    ghost = Server(site, env={"THRESHER_HOST": "ghost-host"})
    peer: Server | None = None
    try:
        with ghost.client(token) as client:
            job_id = client.post("/v1/jobs", json=body).json()["id"]
            until(lambda: job(client, job_id)["progress"]["shards_done"] >= 1, "the job got going")
        peer = Server(site)
        time.sleep(0.8)  # longer than owner_timeout: the ghost beats, so it keeps its job
        with store_of(site) as store:
            assert store.job(job_id).owner == f"ghost-host:{ghost.process.pid}"
        ghost.kill()
        with store_of(site) as store:
            assert store.job(job_id).state == JobState.RUNNING
            mine = f"{this_host()}:{peer.process.pid}"
            until(lambda: store.job(job_id).owner == mine, "the peer took the job over", 10)
        with peer.client(token) as client:
            assert wait_for_job(client, job_id)["status"] == "succeeded"
            rows = results(client, job_id)
        assert sorted(r["id"] for r in rows) == sorted(xs)  # every row once
    finally:
        ghost.kill()
        if peer is not None:
            peer.stop()
