"""A trigger's look at a prefix of 100,000 objects: the paged S3 listing (moto's server in
a child process, filled in its own memory so no 100,000 PUTs are needed, and listed over
HTTP as any S3 endpoint is), the same count of files in a local folder, the set decision
over them, the claim of all of them in a SQLite store, and the next look, when all are
taken. Best of 3 for the local listing; the S3 listing once (moto answers each page
slower the more keys the bucket holds), with this process's CPU time beside it.

    PYTHONPATH=<tree>/src python benchmarks/trigger_listing.py [COUNT]

Figures go to benchmarks/results/, never into docstrings.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from thresher.store import TakenFile, open_store
from thresher.triggers import Settling, TriggerSettings, candidates, complete_sets, list_watch

SERVER = """
import sys
from moto.server import ThreadedMotoServer
from moto.s3.models import s3_backends

server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
server.start()
backend = s3_backends["123456789012"]["aws"]
backend.create_bucket("listing", "us-east-1")
for i in range(int(sys.argv[2])):
    backend.put_object("listing", f"in/day={i // 1000:03d}/part-{i:06d}.jsonl", b"{}\\n")
print("ready", flush=True)
sys.stdin.read()
"""


def best_of(runs: int, work: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best, result


def timed(work: Callable[[], Any]) -> tuple[float, Any]:
    return best_of(1, work)


def s3_listing(count: int) -> tuple[float, float]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    os.environ.update(env)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(count)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        cpu = time.process_time()
        seconds, files = best_of(1, lambda: list(list_watch("s3://listing/in")))
        cpu = time.process_time() - cpu  # this side's share: requests, XML, FileSeen
        assert len(files) == count, len(files)
        return seconds, cpu
    finally:
        server.kill()
        server.wait()


def local_figures(count: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as root:
        for i in range(count):
            folder = Path(root) / "in" / f"day={i // 1000:03d}"
            if i % 1000 == 0:
                folder.mkdir(parents=True)
            (folder / f"part-{i:06d}.jsonl").write_bytes(b"{}\n")
        watch = f"{root}/in"
        figures["local listing"], files = best_of(3, lambda: list(list_watch(watch)))
        rule = TriggerSettings(watch=watch, tenant="t", job={}, pattern="*.jsonl", settle_seconds=0)
        now = datetime.now(UTC)
        decide = lambda: complete_sets(files, {}, rule, Settling(), now)  # noqa: E731
        figures["set decision"], (found,) = timed(decide)
        ledger = open_store(f"sqlite:///{root}/store.db").triggers
        taken = [TakenFile(f.path, f.size, f.version) for f in found.files]
        figures["claim in SQLite"], won = timed(lambda: ledger.claim("t", found.key(), taken, "me"))
        assert won

        def next_look() -> int:
            return len(candidates(list(list_watch(watch)), ledger.taken("t"), rule)[0])

        figures["next look, all taken"], new = timed(next_look)
        assert new == 0
    return figures


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    seconds, cpu = s3_listing(count)
    figures = {"S3 listing (moto, over HTTP)": seconds, "  of which this process's CPU": cpu}
    figures |= local_figures(count)
    for name, seconds in figures.items():
        print(f"{name}: {seconds:.2f} s for {count:,} files")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory of this process: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
