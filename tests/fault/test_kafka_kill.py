"""kill -9 on a Kafka job: 100,000 messages over 3 partitions, the coordinator killed at
seeded random moments (resumes killed too) and at named crash points, then resumed to the
end: every message in exactly one output row or error line, and the consumer group's
offsets at the partitions' ends — committed only once the output was published."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import FIGURES, wait_for_workers

from kafka_topics import broker, check_once, committed, ends, new_topic, produce, write_job

THRESHER = str(Path(sys.executable).parent / "thresher")
MESSAGES = 100_000
SEED = 20261205


def bad(n: int) -> bool:
    return n % 9_973 == 5


class KafkaJob:
    def __init__(self, root: Path, address: str, topic: str) -> None:
        self.root, self.address, self.topic = root, address, topic
        self.spec = write_job(root, address, topic, sleep=0.1)
        self.env = {**os.environ, "THRESHER_STORE": f"sqlite:///{root / 'store.db'}"}
        self.env.pop("THRESHER_FAULT", None)

    def start(self, job_id: str | None, fault: str | None = None) -> subprocess.Popen[str]:
        args = ["resume", job_id] if job_id else ["run", str(self.spec)]
        env = {**self.env, **({"THRESHER_FAULT": fault} if fault else {})}
        return subprocess.Popen(
            [THRESHER, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )

    def job_id(self) -> str | None:
        try:
            with sqlite3.connect(self.root / "store.db") as db:
                row = db.execute("SELECT id FROM thresher_jobs ORDER BY created_at DESC").fetchone()
        except sqlite3.OperationalError:
            return None
        return str(row[0]) if row else None

    def finish(self) -> None:
        """Resume (or, never recorded, run again) until the job succeeds."""
        for _ in range(3):
            process = self.start(self.job_id())
            _, err = process.communicate(timeout=300)
            if process.returncode == 0:
                return
        raise AssertionError(f"the job did not finish: {err[-2000:]}")

    def group(self) -> dict[int, int]:
        return committed(self.address, f"g-{self.topic}", self.topic)


@pytest.fixture
def kafka_job(tmp_path: Path) -> tuple[KafkaJob, dict[int, list[int]]]:
    address, topic = broker(), new_topic()
    placed = produce(address, topic, MESSAGES, bad=bad)
    return KafkaJob(tmp_path, address, topic), placed


def test_random_kills_then_resume(kafka_job: tuple[KafkaJob, dict[int, list[int]]]) -> None:
    """The coordinator (and once a worker) SIGKILLed at seeded random moments, its resumes
    too, then resumed to the end."""
    job, placed = kafka_job
    rng = random.Random(SEED)
    kills = 0
    for round_ in range(4):
        process = job.start(job.job_id())
        if round_ == 1:  # a worker dies: the coordinator runs its shard again
            workers = wait_for_workers(process.pid)
            time.sleep(rng.uniform(0.2, 1.0))
            if workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(workers[0], signal.SIGKILL)
                kills += 1
        time.sleep(rng.uniform(0.5, 4.0))
        if process.poll() is not None:
            process.communicate()
            break  # it finished first
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
        kills += 1
        # The group moves all at once, after the publish, or not at all.
        assert job.group() in ({}, ends(job.address, job.topic))
    job.finish()
    assert kills >= 1, "no kill landed: the job ran faster than the first moment"
    check_once(job.root / "out", placed, range(MESSAGES))
    assert job.group() == ends(job.address, job.topic)
    FIGURES.append(
        f"kafka, {MESSAGES:,} messages, {kills} random kills: each once, group at the ends"
    )


@pytest.mark.parametrize("point", ["after_publish", "after_commit", "mid_publish"])
def test_a_crash_point_then_resume(
    point: str, kafka_job: tuple[KafkaJob, dict[int, list[int]]]
) -> None:
    job, placed = kafka_job
    process = job.start(None, fault=point)
    process.communicate(timeout=300)
    assert process.returncode == -signal.SIGKILL
    assert job.group() == {}, f"the group moved before its hook ({point})"
    job.finish()
    check_once(job.root / "out", placed, range(MESSAGES))
    assert job.group() == ends(job.address, job.topic)
    FIGURES.append(f"kafka, {MESSAGES:,} messages, killed at {point}: each once, group at the ends")
