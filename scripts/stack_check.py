"""scripts/stack.sh's check of the compose stack: the official `openai` client runs an
embeddings batch through one replica, the replica whose server coordinates the batch's
job is killed (SIGKILL, `docker kill`) mid-batch, and the other replica finishes it:
the batch completes with every request line answered exactly once, in input order.

Run from a Python with `openai` and thresher (for the store: who owns the job):

    python scripts/stack_check.py --token TOKEN --store postgresql://... \
        --replica thresher-a=http://127.0.0.1:18081 --replica thresher-b=http://127.0.0.1:18082 \
        --kill 'docker kill --signal KILL {container}' --container thresher-a=ID ...
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from typing import Any

from openai import OpenAI

from thresher.store import JobState, ShardState, Store, open_store


def log(message: str) -> None:
    print(f"stack_check: {time.strftime('%H:%M:%S')} {message}", flush=True)


def pairs(values: list[str]) -> dict[str, str]:
    return dict(v.split("=", 1) for v in values)


def until(what: str, check: Any, timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"stack_check: FAILED: {what} (not within {timeout:.0f} s)")


def request_file(lines: int, model: str) -> bytes:
    """A batch input file of `lines` embeddings requests, `r0` to `r{lines - 1}`."""
    texts = [f"request {i}: a sentence about {('cats', 'dogs', 'boats')[i % 3]}, " * 3
             for i in range(lines)]  # fmt: skip
    body = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": model, "input": text},
        }
        for i, text in enumerate(texts)
    ]
    return ("\n".join(json.dumps(line) for line in body) + "\n").encode()


def job_of(store: Store, batch_id: str) -> str | None:
    row = store.batches.find(batch_id)
    return None if row is None else row.job_id


def kill_mid_job(store: Store, job_id: str, args: argparse.Namespace) -> str:
    """Kill the replica coordinating `job_id` once it has committed a shard and has
    shards still to run; the host it names."""

    def mid_job() -> tuple[int, int] | None:
        state = store.job(job_id).state
        if state not in (JobState.RUNNING, JobState.QUEUED):
            raise SystemExit(f"stack_check: FAILED: the job is {state} before the kill")
        shards = store.shards(job_id)
        done = sum(s.state == ShardState.DONE for s in shards)
        # Killed with shards committed and shards still to run: both kinds are tested.
        return (done, len(shards)) if state == JobState.RUNNING and 0 < done < len(shards) else None

    done, total = until("the job runs and commits a shard", mid_job, args.timeout, 0.1)
    containers = pairs(args.container)
    owner = store.job(job_id).owner or ""
    host = owner.rsplit(":", 1)[0]
    if host not in containers:
        raise SystemExit(f"stack_check: FAILED: the job's owner {owner!r} is no replica")
    log(f"job {job_id} runs on {host} ({owner}), {done} of {total} shards done; killing it")
    kill = args.kill.format(container=shlex.quote(containers[host]))
    subprocess.run(kill, shell=True, check=True, stdout=subprocess.DEVNULL)
    return host


def check_answers(client: OpenAI, batch: Any, lines: int) -> str:
    """What the finished batch's output holds, or SystemExit when a line is missing,
    repeated, out of order or failed."""
    if batch.status != "completed" or batch.error_file_id is not None:
        raise SystemExit(f"stack_check: FAILED: {batch}")
    text = client.files.content(batch.output_file_id).text
    answers = [json.loads(x) for x in text.splitlines()]
    ids = [a["custom_id"] for a in answers]
    expected = [f"r{i}" for i in range(lines)]
    if ids != expected:
        seen = set(ids)
        raise SystemExit(
            f"stack_check: FAILED: {len(ids)} answers for {len(expected)} lines,"
            f" {len(ids) - len(seen)} repeated, {len(set(expected) - seen)} missing"
        )
    sizes = {len(a["response"]["body"]["data"][0]["embedding"]) for a in answers}
    codes = {a["response"]["status_code"] for a in answers}
    if codes != {200} or len(sizes) != 1:
        raise SystemExit(f"stack_check: FAILED: status codes {codes}, embedding sizes {sizes}")
    return f"every one of {len(ids)} lines answered once, in order ({sizes.pop()} floats each)"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--token", required=True)
    parser.add_argument("--store", required=True, help="the stack's store URL, from here")
    parser.add_argument("--replica", action="append", required=True, help="HOST=URL")
    parser.add_argument("--container", action="append", required=True, help="HOST=ID")
    parser.add_argument("--kill", required=True, help="command; {container} is replaced")
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--lines", type=int, default=6000)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    replicas = pairs(args.replica)

    first = next(iter(replicas.values()))
    client = OpenAI(base_url=f"{first}/v1", api_key=args.token, max_retries=2)
    data = request_file(args.lines, args.model)
    uploaded = client.files.create(file=("requests.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h"
    )
    log(f"batch {batch.id}: {args.lines} lines, {len(data)} bytes, through {first}")
    store = open_store(args.store)
    job_id = until("the batch has a job", lambda: job_of(store, batch.id), 120)
    host = kill_mid_job(store, job_id, args)
    killed_at = time.monotonic()

    survivor, url = next((h, u) for h, u in replicas.items() if h != host)
    new_owner = until(
        f"{survivor} takes the job over",
        lambda: (o := store.job(job_id).owner or "").startswith(f"{survivor}:") and o,
        args.timeout,
        0.5,
    )
    log(f"{survivor} took the job over ({new_owner}) {time.monotonic() - killed_at:.1f} s"
        " after the kill")  # fmt: skip
    other = OpenAI(base_url=f"{url}/v1", api_key=args.token, max_retries=2)

    def ended() -> Any:
        now = other.batches.retrieve(batch.id)
        return now if now.status in ("completed", "failed", "cancelled", "expired") else None

    done = until("the batch ends", ended, args.timeout, 0.5)
    log(f"batch {done.status} through {url}: {done.request_counts}")
    log(f"OK: {check_answers(other, done, args.lines)}; {host} killed, {survivor} finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
