"""The publish gate as a user meets it on the command line: the real `thresher run`
holds a job, `thresher status` says why, `thresher approve` publishes it and only then
sends its signed `job.completed` webhook (once, however often approved), and a spec that
gates a sink which cannot hold is refused before any work."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thresher.notify import verify_signature

from .servers import Inbox, webhook_inbox
from .support import THRESHER

pytestmark = pytest.mark.e2e

SECRET = "whsec-gate-test"


def thresher(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "THRESHER_STORE": f"sqlite:///{root / 'store.db'}"}
    env |= {"THRESHER_WEBHOOK_SECRET": SECRET}
    return subprocess.run(
        [str(THRESHER), *args], cwd=root, env=env, capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip


def write_job(root: Path, rows: int, webhook: str, checks: str) -> Path:
    table = pa.table({"id": list(range(rows)), "x": [float(i) for i in range(rows)]})
    pq.write_table(table, root / "in.parquet")
    (root / "model.py").write_text(
        "class M:\n    def predict(self, b):\n        return {'prediction': b['x'] * 2}\n"
    )
    spec = root / "job.toml"
    spec.write_text(
        '[job]\nname = "nightly"\n[source]\nuri = "in.parquet"\nid_column = "id"\n'
        '[model]\nkind = "python"\nuri = "model.py:M"\nbatch_format = "numpy"\n'
        f'[run]\nworkers = 1\n[sink]\nuri = "out/"\n[notify]\nwebhook = "{webhook}"\n'
        f"[publish.checks]\n{checks}\n"
    )
    return spec


def events(inbox: Inbox) -> list[tuple[str, str]]:
    return [(json.loads(b)["event"], json.loads(b)["job_id"]) for b in inbox.bodies]


def test_run_holds_status_says_why_approve_publishes_then_tells(tmp_path: Path) -> None:
    ratio = "rows_out_ratio = [0.8, 1.25]"
    with webhook_inbox() as inbox:
        spec = write_job(tmp_path, 100, inbox.url(), ratio)
        first = thresher(tmp_path, "run", str(spec))
        assert first.returncode == 0, first.stderr
        write_job(tmp_path, 40, inbox.url(), ratio)
        held = thresher(tmp_path, "run", str(spec), "--json")
        assert held.returncode == 1, held.stderr
        ended = [json.loads(line) for line in held.stdout.splitlines()][-1]
        job_id = ended["job_id"]
        assert ended["state"] == "held", ended
        published = json.loads((tmp_path / "out" / "_SUCCESS").read_text())
        assert published["rows_out"] == 100, "the previous output must stay live"

        status = thresher(tmp_path, "status", job_id)
        assert "held" in status.stdout and "publish check rows_out_ratio: FAILED" in status.stdout
        assert "0.4 times the 100" in status.stdout
        time.sleep(1.0)
        assert [e for e in events(inbox) if e[1] == job_id] == [], "a held job told downstream"

        approved = thresher(tmp_path, "approve", job_id)
        assert approved.returncode == 0, approved.stderr
        assert "webhook job.completed" in approved.stderr
        published = json.loads((tmp_path / "out" / "_SUCCESS").read_text())
        assert (published["job_id"], published["rows_out"]) == (job_id, 40)
        again = thresher(tmp_path, "approve", job_id)
        assert again.returncode == 0 and "succeeded" in again.stdout
        time.sleep(1.0)
        told = [d for d in inbox.got if json.loads(d.body)["job_id"] == job_id]
        assert [json.loads(d.body)["event"] for d in told] == ["job.completed"]
        assert verify_signature(SECRET, told[0].headers, told[0].body)


def test_a_sink_that_cannot_hold_is_refused_before_any_work(tmp_path: Path) -> None:
    spec = write_job(tmp_path, 10, "http://127.0.0.1:9/hook", "max_error_rate = 0.1")
    spec.write_text(
        spec.read_text().replace(
            'uri = "out/"', 'uri = "memory://gate"\nformat = "thresher.testing:memory_sink"'
        )
    )
    refused = thresher(tmp_path, "run", str(spec))
    assert refused.returncode == 2, refused.stderr
    assert "publish.checks" in refused.stderr
    assert not (tmp_path / "out").exists()
