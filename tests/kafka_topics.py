"""Topics made in a test on the test broker (THRESHER_TEST_KAFKA, from scripts/kafka.sh).

Each test produces to topics of its own (a random name), so tests never share offsets.
Messages go to partitions 0..n-1 in turn; a broker that makes more partitions (the mock
cluster makes 4) leaves the rest empty, which the source must plan as nothing to read.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

BadEvery = Callable[[int], bool]
# A fast model: the job is bound by reading and writing, which is what these tests check.
# (`SLEEP` seconds a batch: a fault test's job slow enough for its kills to land mid-run).
MODEL = """
import time

class Scorer:
    def predict(self, batch):
        time.sleep(SLEEP)
        return {"score": batch["x"] * 2.0}
"""


def broker() -> str:
    """The test broker's address; a missing broker fails in CI and skips elsewhere."""
    address = os.environ.get("THRESHER_TEST_KAFKA")
    if not address:
        reason = "THRESHER_TEST_KAFKA is unset; `bash scripts/kafka.sh` starts a broker"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (in CI the Kafka tests must run: use scripts/test.sh)")
        pytest.skip(reason)
    return address


def new_topic() -> str:
    return f"t-{secrets.token_hex(5)}"


def value(i: int) -> bytes:
    return json.dumps({"n": i, "x": float(i % 97) / 10.0, "label": f"m{i}"}).encode()


def produce(
    address: str,
    topic: str,
    count: int,
    *,
    partitions: int = 3,
    bad: BadEvery = lambda i: False,
    first: int = 0,
) -> dict[int, list[int]]:
    """`count` JSON messages numbered from `first` (`bad(n)`: not JSON), message n to
    partition n % partitions; returns each partition's message numbers in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": address, "linger.ms": 20})
    placed: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for n in range(first, first + count):
        payload = b"{not json " + str(n).encode() if bad(n) else value(n)
        producer.produce(topic, value=payload, key=str(n).encode(), partition=n % partitions)
        placed[n % partitions].append(n)
        if n % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "messages were left unsent"
    return placed


def committed(address: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset of every partition of `topic` it committed one for
    (a partition the tests leave empty has none; the mock cluster makes 4 partitions, a
    real broker here 3)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": address, "group.id": group})
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        offsets = consumer.committed([TopicPartition(topic, p) for p in sorted(parts)], 30)
        return {tp.partition: tp.offset for tp in offsets if tp.offset >= 0}
    finally:
        consumer.close()


def ends(address: str, topic: str) -> dict[int, int]:
    """The end offset of every partition that holds messages."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": address, "group.id": "thresher-tests-ends"})
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in parts}
        return {p: end for p, end in high.items() if end > 0}
    finally:
        consumer.close()


def write_job(
    root: Path,
    address: str,
    topic: str,
    workers: int = 2,
    *,
    sleep: float = 0,
    sink: str | None = None,
) -> Path:
    """A job spec (and its model) reading `topic` with group `g-<topic>` into `out/`, or
    into the `[sink]` section `sink` gives."""
    (root / "model.py").write_text(MODEL.replace("SLEEP", repr(sleep)))
    spec = root / "job.toml"
    spec.write_text(
        f'[source]\nformat = "kafka"\nuri = "kafka://{address}/{topic}"\nshard_rows = 10000\n'
        f'options = {{ group = "g-{topic}" }}\n'
        '[model]\nkind = "python"\nuri = "model.py:Scorer"\nbatch_format = "numpy"\n'
        f"[batch]\nsize = 2000\n[run]\nworkers = {workers}\nshard_timeout = 120\n"
        + (
            sink
            or '[sink]\nuri = "out/"\nformat = "parquet"\nmode = "append"\n'
            'keep_columns = ["n", "kafka_timestamp"]\n'
        )
    )
    return spec


def check_once(out: Path, placed: dict[int, list[int]], numbers: range) -> None:
    """Every message numbered in `numbers` is in exactly one output row or error line."""
    output = pq.read_table(sorted(out.glob("part-*.parquet")))
    seen = Counter(output.column("n").to_pylist())
    by_id = {f"{p}:{o}": n for p, ns in placed.items() for o, n in enumerate(ns)}
    assert all(
        by_id[i] == n
        for i, n in zip(
            output.column("kafka_id").to_pylist(), output.column("n").to_pylist(), strict=True
        )
    )
    for part in sorted((out / "_errors").glob("*.jsonl")):
        seen.update(by_id[json.loads(line)["id"]] for line in part.read_text().splitlines())
    assert seen == Counter(numbers), "a message is missing or repeated"


def read_topic(
    address: str, topic: str
) -> list[tuple[bytes | None, dict[str, Any], dict[str, bytes]]]:
    """Every message a read_committed consumer finds on `topic`, now: (key, the JSON
    value, the headers)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": "thresher-tests-read",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    found = []
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in parts}
        reading = {p for p, end in high.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in reading])
        deadline = time.monotonic() + 60
        while reading:
            assert time.monotonic() < deadline, f"no end reading {topic}"
            for message in consumer.consume(1_000, 0.5):
                if message.error() is not None:
                    reading.discard(message.partition())
                    continue
                headers = dict(message.headers() or [])
                found.append((message.key(), json.loads(message.value()), headers))
    finally:
        consumer.close()
    return found
