"""kill -9 during `thresher run` over an OpenAI batch file: the coordinator dies at a
commit step, between writing the output and the error file, or in the middle of
publishing them, `thresher resume` finishes the
job, and the output and error files hold every request line exactly once — the same
answers as an uninterrupted run's, no line lost, none twice, no stray files. The same
for `thresher retry-errors` killed between a shard's commit steps or between writing
the two files again, and run once more."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from harness import FIGURES, THRESHER

LINES = 60
# Every seventh line is bad (not JSON, or a repeated custom_id); one input makes the
# model raise (until a file named `fixed` stands beside it), so the model's own failures
# are answered too.
MODEL = """
import time
from pathlib import Path

import numpy as np


class Embed:
    def predict(self, batch):
        time.sleep(0.05)
        fixed = Path(__file__).with_name("fixed").exists()
        if not fixed and any("boom" in text for text in batch["input"]):
            raise ValueError("boom")
        lengths = np.array([len(t) for t in batch["input"]], dtype=np.float32)
        return {"embedding": np.stack([lengths, -lengths], axis=1)}
"""
SPEC = """
[source]
uri = "batch.jsonl"
format = "openai-batch"
shard_bytes = 1024
options = { endpoint = "/v1/embeddings" }

[model]
kind = "python"
uri = "embed.py:Embed"
batch_format = "numpy"

[batch]
size = 2

[run]
workers = 2
shard_timeout = 60

[sink]
uri = "answers/"
"""


def request_line(i: int) -> str:
    if i % 7 == 3:
        return "{not json"
    custom_id = "r1" if i % 7 == 5 else f"r{i}"
    text = "boom" if i == 30 else f"request {i} " + "x" * i
    body = {"model": "toy", "input": [text, "second"] if i % 4 == 0 else text}
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": body}
    )


def make_batch(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "batch.jsonl").write_text("".join(request_line(i) + "\n" for i in range(LINES)))
    (root / "embed.py").write_text(MODEL)
    (root / "job.toml").write_text(SPEC)
    return root


def thresher(root: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "THRESHER_STORE": f"sqlite:///{root / 'store.db'}"}
    env.pop("THRESHER_FAULT", None)
    if fault:
        env["THRESHER_FAULT"] = fault
    return subprocess.run(
        [THRESHER, *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def answers(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The output and error lines, without the ids made from the job's id."""
    found = []
    for name in ("output.jsonl", "errors.jsonl"):
        lines = [json.loads(x) for x in (root / "answers" / name).read_text().splitlines()]
        for line in lines:
            del line["id"]
            if line["response"] is not None:
                del line["response"]["request_id"]
        found.append(lines)
    return found[0], found[1]


def stray_files(root: Path) -> list[str]:
    folder = root / "answers"
    allowed = {"output.jsonl", "errors.jsonl", "_SUCCESS", "_thresher.json", "_errors"}
    strays = []
    for path in folder.rglob("*"):
        rel = path.relative_to(folder).as_posix()
        ok = rel in allowed or (rel.startswith("part-") and rel.endswith(".parquet"))
        if not (ok or (rel.startswith("_errors/part-") and rel.endswith(".jsonl"))):
            strays.append(rel)
    return strays


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], list[Any]]:
    root = make_batch(tmp_path_factory.mktemp("golden"))
    result = thresher(root, "run", "job.toml")
    assert result.returncode == 0, result.stderr
    output, errors = answers(root)
    assert len(output) + len(errors) == LINES
    assert {e["error"]["code"] for e in errors if e["response"] is None} == {
        "invalid_json_line",
        "duplicate_custom_id",
    }
    assert [e["custom_id"] for e in errors if e["response"] is not None] == ["r30"]
    return output, errors


@pytest.mark.parametrize("fault", ["after_commit:2", "mid_commit:1", "mid_answers", "mid_publish"])
def test_a_killed_batch_job_resumed_answers_every_line_once(
    tmp_path: Path, fault: str, golden: tuple[list[Any], list[Any]]
) -> None:
    root = make_batch(tmp_path)
    killed = thresher(root, "run", "job.toml", fault=fault)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with sqlite3.connect(root / "store.db") as db:
        (job_id,) = db.execute("SELECT id FROM thresher_jobs").fetchone()
    resumed = thresher(root, "resume", job_id)
    assert resumed.returncode == 0, resumed.stderr
    output, errors = answers(root)
    lines = Counter(e["error"]["line"] for e in errors if e["response"] is None)
    ids = Counter(a["custom_id"] for a in output + errors if a["response"] is not None)
    FIGURES.append(
        f"openai-batch {fault:<22} lines={len(output) + len(errors):>4} "
        f"twice={sum(n - 1 for n in (lines + ids).values())} stray_files={len(stray_files(root))}"
    )
    assert (output, errors) == golden
    assert max((lines + ids).values()) == 1
    assert stray_files(root) == []


@pytest.fixture(scope="module")
def golden_retried(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], list[Any]]:
    root = make_batch(tmp_path_factory.mktemp("golden-retried"))
    assert thresher(root, "run", "job.toml").returncode == 0
    (root / "fixed").touch()
    retried = thresher(root, "retry-errors", job_of(root))
    assert retried.returncode == 0, retried.stderr
    output, errors = answers(root)
    assert "r30" in [a["custom_id"] for a in output]
    assert all(e["response"] is None for e in errors)  # only the bad lines stay
    return output, errors


@pytest.mark.parametrize("fault", ["retry_after_output", "mid_answers"])
def test_a_killed_retry_of_a_batch_job_run_again_answers_every_line_once(
    tmp_path: Path, fault: str, golden_retried: tuple[list[Any], list[Any]]
) -> None:
    root = make_batch(tmp_path)
    assert thresher(root, "run", "job.toml").returncode == 0
    (root / "fixed").touch()
    killed = thresher(root, "retry-errors", job_of(root), fault=fault)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    again = thresher(root, "retry-errors", job_of(root))
    assert again.returncode == 0, again.stderr
    output, errors = answers(root)
    lines = Counter(e["error"]["line"] for e in errors)
    ids = Counter(a["custom_id"] for a in output)
    FIGURES.append(
        f"openai-batch retry@{fault:<16} lines={len(output) + len(errors):>4} "
        f"twice={sum(n - 1 for n in (lines + ids).values())} stray_files={len(stray_files(root))}"
    )
    assert (output, errors) == golden_retried
    assert stray_files(root) == []


def job_of(root: Path) -> str:
    with sqlite3.connect(root / "store.db") as db:
        (job_id,) = db.execute("SELECT id FROM thresher_jobs").fetchone()
    return str(job_id)
