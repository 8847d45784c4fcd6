"""Kafka for real: the `kafka` source against a live broker (scripts/kafka.sh).

`scripts/test.sh` exports the broker's address as THRESHER_TEST_KAFKA; without it these
tests skip locally and fail in CI. Each test uses topics and a consumer group of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kafka_topics import broker, check_once, committed, ends, new_topic, produce, write_job
from thresher.errors import SourceError
from thresher.sources import open_source
from thresher.spec import SourceSection
from thresher.testing import check_source

pytestmark = pytest.mark.integration

THRESHER = str(Path(sys.executable).parent / "thresher")


def section(address: str, topic: str, **options: Any) -> SourceSection:
    return SourceSection(
        uri=f"kafka://{address}/{topic}",
        format="kafka",
        options={"group": f"g-{topic}", **options},
        shard_rows=1_000,
    )


def test_the_source_keeps_the_contract_and_names_bad_messages() -> None:
    address, topic = broker(), new_topic()
    placed = produce(address, topic, 5_000, bad=lambda n: n % 1_000 == 7)
    source = open_source(section(address, topic, metadata=["key", "offset", "partition"]))
    plan = check_source(source, rows_per_chunk=700)
    assert {s.stop - s.start for s in plan.shards} <= {1_000, 667, 666}
    reader = source.reader(plan.schema, plan.schema.names)
    rows: list[dict[str, Any]] = []
    bad = []
    for shard in plan.shards:
        for chunk in reader.read(shard, 700):
            rows += chunk.table.to_pylist()
            bad += chunk.bad
    assert sorted(int(r["kafka_key"]) for r in rows) == [n for n in range(5_000) if n % 1_000 != 7]
    for row in rows:  # the id is partition:offset, and the message is the one there
        assert row["kafka_id"] == f"{row['kafka_partition']}:{row['kafka_offset']}"
        assert placed[row["kafka_partition"]][row["kafka_offset"]] == row["n"]
    assert len(bad) == 5
    for record in bad:
        partition = int(record.source.rsplit("/", 1)[1])
        assert record.source == f"kafka://{address}/{topic}/{partition}"
        assert placed[partition][record.row] % 1_000 == 7  # the offset names the message
        assert record.id == f"{partition}:{record.row}" and record.raw.startswith("{not json")
    note = plan.read_note()
    assert note and note["kafka"]["group"] == f"g-{topic}"


def test_published_commits_the_planned_ends_once_and_never_back() -> None:
    address, topic = broker(), new_topic()
    produce(address, topic, 300)
    source = open_source(section(address, topic))
    plan = source.plan()
    produce(address, topic, 30, first=300)  # after planning: not this job's
    source.published(plan)  # type: ignore[attr-defined]
    assert committed(address, f"g-{topic}", topic) == {0: 100, 1: 100, 2: 100}
    source.published(plan)  # type: ignore[attr-defined]  # a resume's second call
    assert committed(address, f"g-{topic}", topic)[0] == 100
    later = open_source(section(address, topic)).plan()
    assert [(s.start, s.stop) for s in later.shards] == [(100, 110)] * 3
    open_source(section(address, topic)).published(later)  # type: ignore[attr-defined]
    source.published(plan)  # type: ignore[attr-defined]  # an old plan: never backwards
    assert committed(address, f"g-{topic}", topic)[1] == 110
    # Nothing new: no shards, and the JSON columns come from the messages already read.
    idle = open_source(section(address, topic)).plan()
    assert idle.shards == [] and idle.schema.names == plan.schema.names


def test_messages_deleted_unread_are_said_and_recorded(caplog: pytest.LogCaptureFixture) -> None:
    """Retention deleted messages the group had not read: the job starts at the first one
    kept, says so at WARNING, and the plan's note (the manifest's `source_read`) keeps
    which offsets. The mock cluster drops a partition's oldest messages past a few MB
    (some 100,000 small ones); a real broker keeps them, and there this test skips."""
    from confluent_kafka import Consumer, TopicPartition

    address, topic = broker(), new_topic()
    produce(address, topic, 100, partitions=1)
    source = open_source(section(address, topic))
    source.published(source.plan())  # type: ignore[attr-defined]
    produce(address, topic, 130_000, partitions=1, first=100)
    consumer = Consumer({"bootstrap.servers": address, "group.id": "thresher-tests-low"})
    low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), 30)
    consumer.close()
    if low <= 100:
        pytest.skip("this broker deleted nothing")
    plan = open_source(section(address, topic)).plan()
    assert plan.shards[0].start == low
    assert (plan.read_note() or {})["kafka"]["deleted_unread"] == [[topic, 0, 100, low]]
    assert f"offsets 100 to {low - 1} were deleted unread" in caplog.text


def test_several_topics_name_their_rows_by_topic_too() -> None:
    address, first, second = broker(), new_topic(), new_topic()
    produce(address, first, 40)
    produce(address, second, 50, partitions=1)
    source = open_source(
        SourceSection(
            uri=f"kafka://{address}/{first},{second}",
            format="kafka",
            options={"group": f"g-{first}", "metadata": ["topic"]},
        )
    )
    plan = check_source(source)
    reader = source.reader(plan.schema, ["kafka_id", "kafka_topic", "n"])
    rows = [r for s in plan.shards for c in reader.read(s, 1_000) for r in c.table.to_pylist()]
    assert len(rows) == 90 and len({r["kafka_id"] for r in rows}) == 90
    assert {r["kafka_id"].rsplit(":", 2)[0] for r in rows} == {first, second}
    assert all(r["kafka_id"].startswith(r["kafka_topic"] + ":") for r in rows)
    source.published(plan)  # type: ignore[attr-defined]
    assert committed(address, f"g-{first}", second) == {0: 50}


@pytest.mark.parametrize("kind", ["text", "bytes", "avro"])
def test_text_bytes_and_avro_values(kind: str) -> None:
    import io

    import fastavro

    address, topic = broker(), new_topic()
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "n", "type": "long"}, {"name": "tag", "type": ["null", "string"]}],
    }
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": address})
    for n in range(20):
        if kind == "avro":
            out = io.BytesIO()
            fastavro.schemaless_writer(out, fastavro.parse_schema(schema), {"n": n, "tag": None})
            payload = out.getvalue() if n != 5 else b"\xff"
        else:
            payload = f"hé {n}".encode() if n != 5 else b"\xff\xfe"
        producer.produce(topic, value=payload, partition=0)
    producer.flush(30)
    options: dict[str, Any] = {"value": kind}
    if kind == "avro":
        options["schema"] = json.dumps(schema)
    source = open_source(section(address, topic, **options))
    plan = check_source(source)
    chunks = [
        c for s in plan.shards for c in source.reader(plan.schema, plan.schema.names).read(s, 100)
    ]
    rows = [r for c in chunks for r in c.table.to_pylist()]
    bad = [b for c in chunks for b in c.bad]
    if kind == "bytes":
        assert len(rows) == 20 and rows[5]["value"] == b"\xff\xfe" and not bad
        return
    assert len(rows) == 19 and [b.row for b in bad] == [5]
    assert rows[0] == (
        {"n": 0, "tag": None, "kafka_id": "0:0"}
        if kind == "avro"
        else {"value": "hé 0", "kafka_id": "0:0"}
    )


def test_a_missing_topic_is_a_source_error() -> None:
    address = broker()
    source = open_source(
        section(address, "no-such-topic", config={"allow.auto.create.topics": False})
    )
    with pytest.raises(SourceError, match="no-such-topic"):
        source.plan()


def test_a_job_reads_100k_messages_once_and_moves_the_group(tmp_path: Path) -> None:
    """100,000 messages over 3 partitions through the real CLI: each in one output row or
    one error line, the group's offsets at the ends; a second job reads only what came
    after."""
    address, topic = broker(), new_topic()
    placed = produce(address, topic, 100_000, bad=lambda n: n % 9_973 == 1)
    spec = write_job(tmp_path, address, topic)
    env = {**os.environ, "THRESHER_STORE": f"sqlite:///{tmp_path / 'store.db'}"}
    run = subprocess.run(
        [THRESHER, "run", str(spec)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    check_once(tmp_path / "out", placed, range(100_000))
    assert committed(address, f"g-{topic}", topic) == ends(address, topic)
    read = json.loads((tmp_path / "out" / "_SUCCESS").read_text())["source_read"]["kafka"]
    stamps = pq.read_table(
        sorted((tmp_path / "out").glob("part-*.parquet")), columns=["kafka_timestamp"]
    )
    assert stamps.column(0).null_count == 0  # kept, though options.metadata lists nothing
    held = [r for r in read["partitions"] if r[3]]  # a partition left empty plans [0, 0)
    assert held == [[topic, p, 0, end] for p, end in sorted(ends(address, topic).items())]
    later = produce(address, topic, 60, first=100_000)
    run = subprocess.run(
        [THRESHER, "run", str(spec)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    # An appending sink: the second job added just the 60 messages that came after.
    check_once(tmp_path / "out", {p: placed[p] + later[p] for p in placed}, range(100_060))
    assert committed(address, f"g-{topic}", topic) == ends(address, topic)


def test_a_held_job_moves_the_group_only_when_approved(tmp_path: Path) -> None:
    """A job its publish checks hold leaves the group where it was (its messages are read
    again by nobody else meanwhile, and published by nobody); `thresher approve` publishes
    it and then commits the group's offsets, as a passing job's finish does."""
    address, topic = broker(), new_topic()
    produce(address, topic, 300, bad=lambda n: n % 50 == 7)  # 6 bad: a 2% error rate
    spec = write_job(tmp_path, address, topic)
    spec.write_text(spec.read_text() + "[publish.checks]\nmax_error_rate = 0.01\n")
    env = {**os.environ, "THRESHER_STORE": f"sqlite:///{tmp_path / 'store.db'}"}

    def thresher(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [THRESHER, *args], check=False, env=env, capture_output=True, text=True, timeout=300
        )

    held = thresher("run", str(spec), "--json")
    assert held.returncode == 1, held.stderr[-2000:]
    ended = json.loads(held.stdout.strip().splitlines()[-1])
    assert ended["state"] == "held", ended
    assert committed(address, f"g-{topic}", topic) == {}  # not published: not committed
    approved = thresher("approve", ended["job_id"])
    assert approved.returncode == 0, approved.stderr[-2000:]
    assert committed(address, f"g-{topic}", topic) == {
        p: e for p, e in ends(address, topic).items() if e
    }
    assert pq.read_table(tmp_path / "out").num_rows == 294
