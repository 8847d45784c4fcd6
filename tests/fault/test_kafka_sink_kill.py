"""kill -9 on a job writing to a Kafka topic: 20,000 messages in over 3 partitions,
predictions out to a topic of their own, the coordinator killed at each step of sending a
part (half of it delivered; all of it delivered and committed, its ledger not told), while
publishing and before the source's offsets are committed, with and without transactions,
then resumed: every input message in exactly one output message (keyed by its input's
key) or error line, and the input group's offsets at the partitions' ends."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from harness import FIGURES

from kafka_topics import broker, committed, ends, new_topic, produce, read_topic, write_job

THRESHER = str(Path(sys.executable).parent / "thresher")
MESSAGES = 20_000


def bad(n: int) -> bool:
    return n % 4_999 == 3


@pytest.mark.parametrize(
    ("point", "transactional"),
    [
        ("kafka_mid_part:1", True),
        ("kafka_mid_part:1", False),
        ("kafka_part_sent:2", True),
        ("kafka_part_sent:0", False),
        ("mid_publish", True),
        ("after_publish", True),
    ],
)
def test_a_kill_while_sending_then_resume(point: str, transactional: bool, tmp_path: Path) -> None:
    address, source, scores = broker(), new_topic(), new_topic()
    produce(address, source, MESSAGES, bad=bad)
    produce(address, scores, 1, partitions=1)  # the output topic exists, with one message
    staging = tmp_path / "side"
    sink = (
        f'[sink]\nuri = "kafka://{address}/{scores}"\nstaging = "{staging}"\n'
        f'keep_columns = ["n"]\noptions = {{ transactional = {str(transactional).lower()} }}\n'
    )
    spec = write_job(tmp_path, address, source, sink=sink)
    text = spec.read_text().replace("shard_rows = 10000", "shard_rows = 5000")
    spec.write_text(text)
    env = {**os.environ, "THRESHER_STORE": f"sqlite:///{tmp_path / 'store.db'}"}
    killed = subprocess.run(
        [THRESHER, "run", str(spec)],
        check=False,
        env={**env, "THRESHER_FAULT": point},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert committed(address, f"g-{source}", source) == {}, "offsets moved before the publish"
    before = [m for m in read_topic(address, scores) if "thresher-job" in m[2]]
    if point.startswith("kafka_part_sent") or (point.startswith("kafka_mid") and not transactional):
        assert before, "the kill landed before any message reached the topic"
    with sqlite3.connect(tmp_path / "store.db") as db:
        (job_id,) = db.execute("SELECT id FROM thresher_jobs").fetchone()
    resumed = subprocess.run(
        [THRESHER, "resume", job_id],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    messages = [m for m in read_topic(address, scores) if "thresher-job" in m[2]]
    numbers = Counter(value["n"] for _, value, _ in messages)
    for part in sorted((staging / "_errors").glob("part-*.jsonl")):  # a bad one: -1
        numbers.update(-1 for _ in part.read_text().splitlines())
    expected = Counter(n for n in range(MESSAGES) if not bad(n))
    expected[-1] = sum(bad(n) for n in range(MESSAGES))
    assert numbers == expected, "a message is missing from the output topic or on it twice"
    assert all(key == str(value["n"]).encode() for key, value, _ in messages)
    assert committed(address, f"g-{source}", source) == ends(address, source)
    mode = "transactional" if transactional else "idempotent"
    FIGURES.append(
        f"kafka sink ({mode}), {MESSAGES:,} messages, killed at {point}: each once on the topic"
    )
