"""kill -9 over a folder of images: `thresher resume` finishes the job, and each file is
in the output or the error file exactly once — the decode errors (bad media) and the
predict errors (images the model rejects) included, whatever died when."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from harness import FaultJob, wait_for_workers

from media_files import bad_files, image_folder

KILLED = -signal.SIGKILL
IMAGES = 96

# Slow enough (20 ms a batch) for kills to land mid-shard; it rejects the images 91
# pixels wide (a third of them), so the predict-stage error path runs too.
MODEL = """
import time
import numpy as np

class Brightness:
    def predict(self, batch):
        time.sleep(0.02)
        if any(image.shape[1] == 91 for image in batch["image"]):
            raise ValueError("too wide")
        return {"brightness": np.array([float(image.mean()) for image in batch["image"]])}
"""


def image_job(root: Path) -> FaultJob:
    """96 images and the 4 bad files in about 10 shards of 10 files, 2 workers."""
    image_folder(root / "photos", IMAGES)
    bad_files(root / "photos")
    (root / "model.py").write_text(MODEL)
    spec = root / "job.toml"
    spec.write_text(
        '[source]\nuri = "photos"\nformat = "images"\nid_column = "path"\n'
        "options = { shard_files = 10 }\n"
        '[model]\nkind = "python"\nuri = "model.py:Brightness"\nbatch_format = "numpy"\n'
        '[batch]\nsize = 4\n[run]\nworkers = 2\nshard_timeout = 60\n[sink]\nuri = "out/"\n'
    )
    return FaultJob(root, spec, f"sqlite:///{root / 'store.db'}", "parquet")


def outcome(job: FaultJob) -> tuple[Counter[str], Counter[str]]:
    """Each file's count in the output and in the error file (by its source)."""
    parts = sorted(job.out.glob("part-*.parquet"))
    done = Counter(pq.read_table(parts).column("path").to_pylist()) if parts else Counter()
    failed: Counter[str] = Counter()
    for part in sorted((job.out / "_errors").glob("*.jsonl")):
        failed.update(json.loads(line)["source"] for line in part.read_text().splitlines())
    return done, failed


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Counter[str], Counter[str]]:
    job = image_job(tmp_path_factory.mktemp("golden"))
    result = job.run()
    assert result.returncode == 0, result.stderr[-2000:]
    done, failed = outcome(job)
    files = {str(p) for p in (job.root / "photos").iterdir()}
    assert set(done) | set(failed) == files and not set(done) & set(failed)
    assert len(failed) > 4  # the four bad files, and images the model rejects
    return done, failed


def finish(job: FaultJob) -> None:
    job_id = job.recorded_job()
    if job_id is None:
        assert job.run().returncode == 0
        return
    for _ in range(3):
        if job.resume(job_id).returncode == 0:
            return
    raise AssertionError(f"resume did not finish job {job_id}")


def check_exact(job: FaultJob, golden: tuple[Counter[str], Counter[str]]) -> None:
    """Each file once, where the uninterrupted run put it: paths under this job's root."""
    done, failed = outcome(job)
    moved = [
        Counter({p.replace(str(job.root), ""): n for p, n in c.items()}) for c in (done, failed)
    ]
    want = [Counter({p.rsplit("/photos/", 1)[-1]: n for p, n in c.items()}) for c in golden]
    got = [Counter({p.rsplit("/photos/", 1)[-1]: n for p, n in c.items()}) for c in moved]
    assert got == want, (got, want)
    assert max((done + failed).values()) == 1
    assert job.stray_files() == [] and job.has_success()


@pytest.mark.parametrize("fault", ["before_commit:2", "mid_commit:3", "after_commit:4"])
def test_coordinator_killed_at_a_commit_step(
    tmp_path: Path, golden: tuple[Counter[str], Counter[str]], fault: str
) -> None:
    job = image_job(tmp_path)
    assert job.run(fault=fault).returncode == KILLED
    finish(job)
    check_exact(job, golden)


def test_workers_killed_at_random(
    tmp_path: Path, golden: tuple[Counter[str], Counter[str]]
) -> None:
    """SIGKILL to a worker mid-shard, then to the coordinator: resume finishes it."""
    job = image_job(tmp_path)
    process = job.start()
    workers = wait_for_workers(process.pid)
    time.sleep(random.Random(38).uniform(0.3, 1.0))
    for pid in workers[:1]:
        subprocess.run(["kill", "-9", str(pid)], check=False)
    time.sleep(0.5)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    finish(job)
    check_exact(job, golden)
