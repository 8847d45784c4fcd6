"""One committed part onto a Kafka topic, exactly once, through crashes at any moment.

A topic cannot rename a part into place or roll one back, so each part keeps a small
ledger file in the sink's side folder:

1. `<shard>.json` is written with every partition's end offset *before* the first
   message is sent (`{"from": {...}}`); its absence means nothing of the part was sent.
2. the part's rows are produced, each with headers naming the job, the shard and the row
   (`thresher-job`, `thresher-shard`, `thresher-row`), by an idempotent producer (no
   duplicates from the client's own retries), inside a transaction when the sink is
   transactional;
3. once every message is delivered (and the transaction committed), the file says
   `"done": true`.

A part found started but not done was cut short by a crash. Its transactional producer
(one `transactional.id` per job) fences the dead one, and the broker aborts what that had
sent; then the rows the topic holds for the part are read from the recorded offsets and
only the missing ones are sent. So with or without transactions, each row is on the
topic once: a read_committed consumer never sees an aborted message, and without
transactions the rows sent before the crash stay and are not sent again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from thresher.errors import SinkError
from thresher.faults import armed, crash_point
from thresher.sinks.kafka_settings import KafkaSinkOptions
from thresher.sinks.publish import write_json
from thresher.sources.files import filesystem

JOB, SHARD, ROW = "thresher-job", "thresher-shard", "thresher-row"
BATCH_ROWS = 16_384


@dataclass
class TopicWriter:
    """Produces committed parts to `topic`, one producer per job (`job_key`)."""

    servers: str
    topic: str
    options: KafkaSinkOptions
    job_key: str
    _producer: Producer | None = field(default=None, init=False, repr=False)
    _failed: list[str] = field(default_factory=list, init=False, repr=False)

    def produce_part(self, path: str, shard: int, ledger: str) -> int:
        """Put the Parquet part at `path` (shard `shard`) on the topic once; `ledger` is
        the folder of the job's ledger files. Returns the rows sent now."""
        fs, entry_path = filesystem(f"{ledger}/{shard:05d}.json")
        entry = _read(fs, entry_path)
        if entry.get("done"):
            return 0
        producer = self._open()  # fences and aborts a dead producer's transaction first
        present: set[int] = set()
        if entry:
            present = self._rows_on_topic(entry["from"], shard)
        else:
            fs.makedirs(entry_path.rsplit("/", 1)[0], exist_ok=True)
            write_json(fs, entry_path, {"from": self._end_offsets()})
        sent = self._send(producer, path, shard, present)
        write_json(fs, entry_path, {**_read(fs, entry_path), "done": True, "sent": sent})
        return sent

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.options.timeout_s)
            self._producer = None

    def _open(self) -> Producer:
        if self._producer is None:
            config: dict[str, Any] = {
                "bootstrap.servers": self.servers,
                "enable.idempotence": True,
                "linger.ms": 20,
                "queue.buffering.max.messages": 1_000_000,
                "error_cb": self._error,
                **self.options.config,
            }
            if self.options.transactional:
                config["transactional.id"] = f"thresher.{self.topic}.{self.job_key}"
            producer = Producer(config)
            if self.options.transactional:
                try:
                    producer.init_transactions(self.options.timeout_s)
                except KafkaException as exc:
                    raise SinkError(
                        f"sink.options.transactional: {self.servers} refused a transaction"
                        f" ({exc.args[0].str()}); set transactional = false to publish with"
                        " the idempotent producer alone"
                    ) from None
            self._producer = producer
        return self._producer

    def _send(self, producer: Producer, path: str, shard: int, present: set[int]) -> int:
        """Every row of the part not in `present`, delivered (and committed) or raised;
        a failed transaction is aborted."""
        transactional = self.options.transactional
        if transactional:
            producer.begin_transaction()
        try:
            sent = self._deliver(producer, path, shard, present)
            if transactional:
                producer.commit_transaction(self.options.timeout_s)
        except BaseException as exc:
            if transactional:
                with suppress(KafkaException):  # else the next producer fences it
                    producer.abort_transaction(self.options.timeout_s)
            if isinstance(exc, KafkaException):
                raise self._failure(exc.args[0].str()) from None
            raise
        crash_point("kafka_part_sent", shard)
        return sent

    def _deliver(self, producer: Producer, path: str, shard: int, present: set[int]) -> int:
        self._failed.clear()
        # the row count (a second read of the footer) only for a test that kills here
        half = _rows(path) // 2 if armed("kafka_mid_part", shard) else -1
        sent = 0
        for row, key, value in _messages(path, self.options.key):
            if row in present:
                continue
            headers: list[tuple[str, str | bytes | None]] = [
                (JOB, self.job_key),
                (SHARD, str(shard)),
                (ROW, str(row)),
            ]
            while True:
                try:
                    producer.produce(
                        self.topic, value, key, headers=headers, on_delivery=self._delivered
                    )
                    break
                except BufferError:  # the client's queue is full: let it deliver some
                    producer.poll(0.1)
            sent += 1
            if row == half:
                producer.flush(self.options.timeout_s)  # half on the broker, then die
                crash_point("kafka_mid_part", shard)
        left = producer.flush(self.options.timeout_s)
        if left or self._failed:
            raise self._failure(self._failed[0] if self._failed else f"{left} not delivered")
        return sent

    def _failure(self, why: str) -> SinkError:
        return SinkError(f"sink.uri: kafka://{self.servers}/{self.topic}: {why}")

    def _rows_on_topic(self, start: dict[str, int], shard: int) -> set[int]:
        """The rows of this job's shard `shard` that a read_committed consumer finds on the
        topic from the offsets recorded before the part was first sent."""
        consumer = self._consumer()
        found: set[int] = set()
        try:
            wanted = [TopicPartition(self.topic, int(p), o) for p, o in start.items()]
            ends = {tp.partition: self._high(consumer, tp.partition) for tp in wanted}
            reading = {tp.partition for tp in wanted if tp.offset < ends[tp.partition]}
            consumer.assign([tp for tp in wanted if tp.partition in reading])
            waited_since = time.monotonic()
            while reading:
                # consume waits for all 1,000 or the timeout: ask often, give up at ours
                messages = consumer.consume(1_000, 0.5)
                if messages:
                    waited_since = time.monotonic()
                elif time.monotonic() - waited_since > self.options.timeout_s:
                    raise self._failure("no answer while reading back a part a crash cut short")
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise KafkaException(error)
                        reading.discard(message.partition())
                        continue
                    partition, offset = int(message.partition() or 0), int(message.offset() or 0)
                    headers = dict(message.headers() or [])
                    if (headers.get(JOB), headers.get(SHARD)) == (
                        self.job_key.encode(),
                        str(shard).encode(),
                    ):
                        found.add(int(headers.get(ROW) or b"-1"))
                    if offset + 1 >= ends[partition]:
                        reading.discard(partition)
        except KafkaException as exc:
            raise self._failure(exc.args[0].str()) from None
        finally:
            consumer.close()
        return found

    def _end_offsets(self) -> dict[str, int]:
        consumer = self._consumer()
        try:
            topic = consumer.list_topics(self.topic, self.options.timeout_s).topics[self.topic]
            return {str(p): self._high(consumer, p) for p in sorted(topic.partitions)}
        except KafkaException as exc:
            raise self._failure(exc.args[0].str()) from None
        finally:
            consumer.close()

    def _high(self, consumer: Consumer, partition: int) -> int:
        where = TopicPartition(self.topic, partition)
        return int(consumer.get_watermark_offsets(where, self.options.timeout_s)[1])

    def _consumer(self) -> Consumer:
        return Consumer(
            {
                "bootstrap.servers": self.servers,
                "group.id": f"thresher.{self.topic}.{self.job_key}.check",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                **{k: v for k, v in self.options.config.items() if _shared(k)},
            }
        )

    def _delivered(self, error: KafkaError | None, _message: Any) -> None:
        if error is not None and not self._failed:
            self._failed.append(error.str())

    def _error(self, error: KafkaError) -> None:
        if error.fatal() and not self._failed:
            self._failed.append(error.str())


def _messages(path: str, key_column: str | None) -> Iterator[tuple[int, bytes | None, bytes]]:
    """(row, key, JSON value) of every row of a Parquet part, in order."""
    fs, local = filesystem(path)
    row = 0
    with fs.open(local, "rb") as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS):
            table = pa.Table.from_batches([batch])
            keys = table.column(key_column).to_pylist() if key_column else None
            for index, record in enumerate(table.to_pylist()):
                key = None if keys is None else _key_bytes(keys[index])
                yield row, key, orjson.dumps(record, default=_plain)
                row += 1


def _rows(path: str) -> int:
    fs, local = filesystem(path)
    with fs.open(local, "rb") as f:
        return int(pq.ParquetFile(f).metadata.num_rows)


def _key_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def _plain(value: Any) -> Any:
    """What orjson does not write itself: bytes as text (or hex), decimals as text."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.hex()
    return str(value)


def _shared(setting: str) -> bool:
    """librdkafka settings a consumer takes too: connection and security."""
    return setting.startswith(("security.", "sasl.", "ssl.", "client.", "socket."))


def _read(fs: Any, path: str) -> dict[str, Any]:
    if not fs.exists(path):
        return {}
    with fs.open(path, "r") as f:
        return json.load(f)  # type: ignore[no-any-return]
