"""The `kafka` source beside the JSONL source on the same records: plan and read every
shard through thresher's own source (what a worker does before the model), best of 3.

    bash scripts/kafka.sh                      # a broker; prints its address
    THRESHER_TEST_KAFKA=127.0.0.1:59092 PYTHONPATH=src \\
        python benchmarks/kafka_source.py --out benchmarks/results/kafka-source.md

Produces `--messages` (default 1,000,000) small JSON objects (an id, four numbers, a
short text) to new topics of 3 partitions, writes the same lines to a JSONL file, and
reports each source's rows/s and their ratio (kafka / jsonl) in one run. The goal is
>= 0.8. `--end-to-end` also times `thresher run` on each (start-up included).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from thresher.sources import open_source
from thresher.spec import SourceSection

THRESHER = str(Path(sys.executable).parent / "thresher")
COLUMNS = ["id", "a", "b", "c", "d", "name"]
# librdkafka's mock cluster (scripts/kafka.sh where Apache Kafka's jars cannot be fetched)
# drops a partition's oldest messages past a few MB (here from about 60,000 records on), so
# the records are spread over as many topics as keep each partition under this.
PER_PARTITION = 40_000


def record(i: int) -> bytes:
    row = {"id": i, "a": i % 7 * 0.5, "b": i % 13 * 0.25, "c": -(i % 5), "d": 1.0 / (i + 1)}
    return json.dumps({**row, "name": f"n{i % 97}"}, separators=(",", ":")).encode()


def make_inputs(address: str, messages: int, root: Path) -> tuple[list[str], Path]:
    """New topics of `messages` records over 3 partitions each, at most PER_PARTITION in
    a partition, and a JSONL file of the same records."""
    from confluent_kafka import Producer

    run = secrets.token_hex(4)
    topics = [f"bench-{run}-{t}" for t in range(-(-messages // (3 * PER_PARTITION)))]
    producer = Producer({"bootstrap.servers": address, "linger.ms": 50, "batch.size": 1 << 20})
    path = root / f"bench-{run}.jsonl"
    with path.open("wb") as lines:
        for i in range(messages):
            value = record(i)
            lines.write(value + b"\n")
            while True:
                try:
                    topic = topics[i // (3 * PER_PARTITION)]
                    producer.produce(topic, value=value, partition=i % 3)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.05)
            if i % 50_000 == 0:
                producer.poll(0)
    assert producer.flush(120) == 0
    return topics, path


def read_all(section: SourceSection, messages: int) -> float:
    """Seconds to plan and read every shard (best of 3)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        source = open_source(section)
        plan = source.plan()
        reader = source.reader(plan.schema, COLUMNS)
        rows = sum(c.table.num_rows for s in plan.shards for c in reader.read(s, 65_536))
        best = min(best, time.perf_counter() - start)
        assert rows == messages, rows
    return best


MODEL = """
class Scorer:
    def predict(self, batch):
        return {"score": batch["a"] + batch["b"]}
"""


def run_job(source_toml: str, root: Path) -> float:
    """Seconds `thresher run` takes (start-up included) to score every record with a
    trivial model into Parquet, 2 workers (best of 2; a new group and output each time)."""
    (root / "model.py").write_text(MODEL)
    best = float("inf")
    for attempt in range(2):
        group = f"bench-{secrets.token_hex(4)}"
        spec = root / "job.toml"
        spec.write_text(
            f'[source]\n{source_toml.replace("GROUP", group)}\nid_column = "id"\n'
            '[model]\nkind = "python"\nuri = "model.py:Scorer"\nbatch_format = "numpy"\n'
            f'[run]\nworkers = 2\n[sink]\nuri = "out-{group}-{attempt}/"\nformat = "parquet"\n'
        )
        env = {**os.environ, "THRESHER_STORE": f"sqlite:///{root / 'store.db'}"}
        start = time.perf_counter()
        subprocess.run([THRESHER, "run", str(spec)], env=env, check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, help="append the figures to this Markdown file")
    parser.add_argument(
        "--end-to-end", action="store_true", help="also time `thresher run` on each source"
    )
    args = parser.parse_args()
    address = os.environ["THRESHER_TEST_KAFKA"]
    root = Path(tempfile.mkdtemp(prefix="thresher-kafka-bench-"))
    started = time.perf_counter()
    topics, path = make_inputs(address, args.messages, root)
    produced = time.perf_counter() - started
    # A group of its own each run: nothing committed, so every run reads every message.
    kafka = SourceSection(
        uri=f"kafka://{address}/{','.join(topics)}",
        format="kafka",
        id_column="id",
        options={"group": f"bench-{secrets.token_hex(4)}"},
    )
    jsonl = SourceSection(uri=str(path), id_column="id")
    seconds = {"jsonl": read_all(jsonl, args.messages), "kafka": read_all(kafka, args.messages)}
    rates = {name: args.messages / s for name, s in seconds.items()}
    ratio = rates["kafka"] / rates["jsonl"]
    lines = [
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores,"
        f" {args.messages:,} messages in {len(topics)} topics of 3 partitions (produced in"
        f" {produced:.1f} s), broker {address}",
        "",
        "| source | seconds (best of 3) | rows/s |",
        "|---|---:|---:|",
        *(f"| {n} | {seconds[n]:.2f} | {rates[n]:,.0f} |" for n in ("jsonl", "kafka")),
        "",
        f"kafka / jsonl throughput: **{ratio:.2f}** (goal >= 0.8)",
        "",
    ]
    if args.end_to_end:
        uri = f"kafka://{address}/{','.join(topics)}"
        kafka_toml = f'format = "kafka"\nuri = "{uri}"\noptions = {{ group = "GROUP" }}'
        runs = {"jsonl": run_job(f'uri = "{path}"', root), "kafka": run_job(kafka_toml, root)}
        lines += [
            "| `thresher run`, 2 workers, trivial model | seconds (best of 2) | rows/s |",
            "|---|---:|---:|",
            *(f"| {n} | {runs[n]:.2f} | {args.messages / runs[n]:,.0f} |" for n in runs),
            "",
            f"end to end, kafka / jsonl throughput: **{runs['jsonl'] / runs['kafka']:.2f}**",
            "",
        ]
    print("\n".join(lines))
    if args.out:
        with args.out.open("a") as out:
            out.write("\n".join(lines) + "\n")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
