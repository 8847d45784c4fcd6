"""Kafka topics as input: a bounded job over the offsets a consumer group has not read.

    [source]
    format = "kafka"
    uri = "kafka://broker1:9092,broker2:9092/orders,returns"   # servers / topics
    options = { group = "scoring", value = "json" }      # or "avro" (with schema), "text", "bytes"

Planning asks the group's committed offset and the end offset of every partition of the
topics, and freezes each partition's [start, end) in the plan (the manifest's
`source_read` names them): a shard is a run of offsets of one partition, so a resume reads
exactly the planned messages, whatever was produced since. A worker reads its shard with
`assign()` at the shard's first offset (it never joins the group) and stops at its end.

Offsets reach the group exactly once, after the output: a shard's commit records it done
like any other (the plan says which offsets it holds), and only when the job has published
does the coordinator commit each partition's planned end to the group (`published`,
synchronous; never moving a group's offset back). A crash before the group's commit leaves
the job unfinished: its resume publishes again (idempotently) and commits then. So a
message is in the output or the error file once, and the next job starts after it.

Rows are named `partition:offset` (`topic:partition:offset` with several topics) in the
`kafka_id` column unless `source.id_column` names another; `options.metadata` adds
`kafka_topic`, `kafka_partition`, `kafka_offset`, `kafka_timestamp`, `kafka_key` columns.
A message whose value does not decode is a bad record naming `kafka://…/topic/partition`
and its offset (`row`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from thresher.errors import SourceError
from thresher.records import BadRecord, cut_raw
from thresher.sources.base import MIN_SPLIT_ROWS, READ_KEY, Chunk, Plan, Shard, shard_size
from thresher.sources.kafka_values import (
    ID_COLUMN,
    META_PREFIX,
    META_TYPES,
    KafkaSourceOptions,
    ValueDecoder,
    value_schema,
)
from thresher.spec import SourceSection

log = logging.getLogger("thresher.sources.kafka")

Range = tuple[str, int, int, int]  # topic, partition, first offset, end offset (exclusive)


def parse_uri(uri: str) -> tuple[str, tuple[str, ...]]:
    """`kafka://h1:9092,h2:9092/a,b` -> ("h1:9092,h2:9092", ("a", "b"))."""
    scheme, _, rest = uri.partition("://")
    servers, _, topics = rest.partition("/")
    names = tuple(t for t in topics.strip("/").split(",") if t)
    if scheme != "kafka" or not servers or not names:
        raise SourceError(f"source.uri: {uri!r} is not kafka://host:port[,host:port]/topic[,topic]")
    return servers, names


def split_ranges(ranges: Sequence[Range], size: int) -> list[tuple[str, int, int, int]]:
    """Each partition's [start, end) cut into runs of at most `size` offsets, in order.

    >>> split_ranges([("t", 0, 5, 12), ("t", 1, 3, 3)], 4)
    [('t', 0, 5, 9), ('t', 0, 9, 12)]
    """
    return [
        (topic, partition, lo, min(lo + size, end))
        for topic, partition, start, end in ranges
        for lo in range(start, end, size)
    ]


@dataclass(frozen=True)
class KafkaSource:
    servers: str
    topics: tuple[str, ...]
    options: KafkaSourceOptions
    shard_rows: int
    min_shards: int = 1

    def plan(self) -> Plan:
        known = self._ranges()
        ranges = [planned for planned, _, _ in known]
        total = sum(end - start for _, _, start, end in ranges)
        size = shard_size(total, self.shard_rows, self.min_shards, MIN_SPLIT_ROWS)
        shards = [
            Shard(i, f"kafka://{self.servers}/{topic}/{partition}", lo, hi)
            for i, (topic, partition, lo, hi) in enumerate(split_ranges(ranges, size))
        ]
        # The newest messages the group already read, to infer a JSON value's columns
        # from when no new ones are enough (a job with nothing to read keeps its columns).
        earlier = [
            Shard(
                -1, f"kafka://{self.servers}/{t}/{p}", max(low, start - self.options.sample), start
            )
            for (t, p, start, _), low, _ in known
            if start > low
        ]
        values = value_schema(self.options, self._sample([*shards, *earlier]))
        meta = [(META_PREFIX + name, META_TYPES[name]) for name in self.options.metadata]
        fields = [*values, *(pa.field(n, t) for n, t in meta), pa.field(ID_COLUMN, pa.string())]
        taken = [f.name for f in values if f.name in {n for n, _ in meta} | {ID_COLUMN}]
        if taken:
            raise SourceError(
                f"source: the message values have columns named {taken}, as Kafka's own"
            )
        note = {
            "kafka": {
                "servers": self.servers,
                "group": self.options.group,
                "partitions": [list(r) for r in ranges],  # topic, partition, start, end
            }
        }
        # Offsets retention deleted before the group read them: said at planning, kept here.
        lost = [[t, p, c, low] for (t, p, _, _), low, c in known if 0 <= c < low]
        if lost:
            note["kafka"]["deleted_unread"] = lost  # topic, partition, from, to (exclusive)
        metadata = {READ_KEY: json.dumps(note).encode()}
        return Plan(shards=shards, schema=pa.schema(fields, metadata=metadata))

    def reader(self, schema: pa.Schema, columns: list[str]) -> KafkaReader:
        names = {f.name for f in schema} - {ID_COLUMN} - {META_PREFIX + n for n in META_TYPES}
        values = pa.schema([f for f in schema if f.name in names])
        decoder = ValueDecoder(self.options.value, values, self.options.schema_)
        config = tuple(consumer_config(self.servers, self.options).items())
        several = len(self.topics) > 1
        return KafkaReader(config, decoder, columns, schema, several, self.options.timeout_s)

    def published(self, plan: Plan) -> None:
        """Commit each planned partition's end to the group, once the job has published;
        a partition whose group offset is already there or past it is left alone (a
        resume's second call changes nothing)."""
        note = plan.read_note() or {}
        planned = [tuple(r) for r in note.get("kafka", {}).get("partitions", [])]
        wanted = [TopicPartition(t, p, end) for t, p, start, end in planned if end > start]
        if not wanted:
            return
        consumer = Consumer(consumer_config(self.servers, self.options))
        try:
            timeout = self.options.timeout_s
            now = consumer.committed(
                [TopicPartition(w.topic, w.partition) for w in wanted], timeout
            )
            ahead = [w for w, c in zip(wanted, now, strict=True) if c.offset < w.offset]
            if ahead:
                consumer.commit(offsets=ahead, asynchronous=False)
        except KafkaException as exc:
            raise SourceError(
                f"source: the output is published but committing the offsets to group"
                f" {self.options.group!r} failed ({exc}); `thresher resume` the job to commit them"
            ) from None
        finally:
            consumer.close()

    def _ranges(self) -> list[tuple[Range, int, int]]:
        """Every partition's range to read, with the first offset it still keeps and the
        group's committed offset (negative: none)."""
        consumer = Consumer(consumer_config(self.servers, self.options))
        timeout = self.options.timeout_s
        try:
            topics = consumer.list_topics(timeout=timeout).topics
            partitions = []
            for name in self.topics:
                topic = topics.get(name)
                if topic is None or topic.error is not None or not topic.partitions:
                    raise SourceError(f"source.uri: no topic {name!r} on {self.servers}")
                partitions += [TopicPartition(name, p) for p in sorted(topic.partitions)]
            if self.options.offsets is not None:  # exactly these: a trigger's set
                wanted = {(t, p): (lo, hi) for t, p, lo, hi in self.options.offsets}
                return [
                    self._pinned(consumer, tp, wanted[(tp.topic, tp.partition)])
                    for tp in partitions
                    if (tp.topic, tp.partition) in wanted
                ]
            committed = consumer.committed(partitions, timeout=timeout)
            return [self._range(consumer, tp) for tp in committed]
        except KafkaException as exc:
            raise SourceError(f"source.uri: {self.servers}: {exc}") from None
        finally:
            consumer.close()

    def _range(self, consumer: Consumer, tp: TopicPartition) -> tuple[Range, int, int]:
        where = TopicPartition(tp.topic, tp.partition)
        low, high = consumer.get_watermark_offsets(where, timeout=self.options.timeout_s)
        start = (
            tp.offset if tp.offset >= 0 else (low if self.options.initial == "earliest" else high)
        )
        if start < low:
            log.warning(
                "%s partition %d: the group's offset %d is before the first message kept (%d):"
                " offsets %d to %d were deleted unread",
                *(tp.topic, tp.partition, start, low, start, low - 1),
            )
            start = low
        return (tp.topic, tp.partition, start, max(start, high)), low, tp.offset

    def _pinned(
        self, consumer: Consumer, tp: TopicPartition, bounds: tuple[int, int]
    ) -> tuple[Range, int, int]:
        """A partition's given range, its start moved past what retention deleted."""
        start, end = bounds
        low, _ = consumer.get_watermark_offsets(tp, timeout=self.options.timeout_s)
        return (tp.topic, tp.partition, max(start, low), max(start, low, end)), low, start

    def _sample(self, shards: list[Shard]) -> list[bytes]:
        """Up to `options.sample` message values from `shards`, first to last, to infer a
        JSON value's columns from."""
        if self.options.value != "json" or not shards:
            return []
        reader = self.reader(pa.schema([]), [])
        values: list[bytes] = []
        for shard in shards:
            wanted = self.options.sample - len(values)
            for batch in reader.batches(shard, wanted, wanted):
                values += [v for v in (m.value() for m in batch) if v is not None]
            if len(values) >= self.options.sample:
                break
        return values


def consumer_config(servers: str, options: KafkaSourceOptions) -> dict[str, Any]:
    """A consumer that reads what it is assigned and commits only when told to."""
    return {
        "bootstrap.servers": servers,
        "group.id": options.group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        **options.config,
    }


@dataclass(frozen=True)
class KafkaReader:
    """Reads shards (runs of one partition's offsets); picklable."""

    config: tuple[tuple[str, Any], ...]
    decoder: ValueDecoder
    columns: list[str]
    schema: pa.Schema
    several_topics: bool
    idle_s: float = 30.0  # no message and no end for this long: the broker is gone

    def read(self, shard: Shard, rows_per_chunk: int) -> Iterator[Chunk]:
        topic, partition = shard_partition(shard)
        for batch in self.batches(shard, rows_per_chunk, shard.stop - shard.start):
            yield self._chunk(shard, topic, partition, batch)

    def batches(self, shard: Shard, size: int, most: int) -> Iterator[list[Message]]:
        """The shard's messages in offset order, `size` at most at a time and `most` in
        all, as librdkafka hands them over (a whole list per call, not one by one: the
        per-message Python would cost more than the broker's read)."""
        topic, partition = shard_partition(shard)
        consumer = Consumer(dict(self.config))
        try:
            consumer.assign([TopicPartition(topic, partition, shard.start)])
            left, heard = most, time.monotonic()
            while left > 0:
                got = consumer.consume(min(size, left), timeout=1.0)
                batch, done = self._messages(consumer, shard, got)
                if got:
                    heard = time.monotonic()
                elif time.monotonic() - heard > self.idle_s:
                    raise SourceError(
                        f"{shard.path}: no message from the broker for {self.idle_s:g} s,"
                        f" {most - left:,} of the shard's messages read"
                    )
                if batch:
                    left -= len(batch)  # never below 0: consume() was asked for `left`
                    yield batch
                if done or (batch and (batch[-1].offset() or 0) + 1 >= shard.stop):
                    return
        finally:
            consumer.close()

    def _messages(
        self, consumer: Consumer, shard: Shard, got: list[Message]
    ) -> tuple[list[Message], bool]:
        """The messages of `got` that belong to `shard`, and whether the shard is read."""
        if not got:
            return [], False
        last = got[-1]
        within = last.error() is None and (last.offset() or 0) < shard.stop
        # map over the C method: a generator's frame per message cost a tenth of the read
        if within and not any(map(Message.error, got)):
            return got, False  # the usual case: a run of the shard's messages
        batch, done = [], False
        for message in got:
            error, offset = message.error(), message.offset()
            if error is not None:
                done = done or self._end(consumer, shard, error)
            elif offset is not None and offset < shard.stop:
                batch.append(message)
            else:
                done = True
        return batch, done

    def _end(self, consumer: Consumer, shard: Shard, error: KafkaError) -> bool:
        """Whether reading `shard` is over at this event: the partition's end is past the
        shard's (what offsets remain are gaps: compaction, transaction markers)."""
        if error.code() != KafkaError._PARTITION_EOF:
            raise SourceError(f"{shard.path}: {error.str()}")
        topic, partition = shard_partition(shard)
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        if high < shard.stop:
            raise SourceError(
                f"{shard.path}: the partition ends at offset {high}, before the planned"
                f" {shard.stop}: the topic was deleted or recreated since the job was planned"
            )
        return True

    def _chunk(self, shard: Shard, topic: str, partition: int, batch: list[Message]) -> Chunk:
        decoded = self.decoder.decode(list(map(Message.value, batch)))
        kept = batch if len(decoded.good) == len(batch) else [batch[i] for i in decoded.good]
        offsets = _offsets(kept)
        table = decoded.table
        for name in self.columns:
            if name in table.column_names:
                continue
            table = table.append_column(name, self._meta(name, topic, partition, kept, offsets))
        bad = [self._bad(shard, topic, batch[i], error, why) for i, error, why in decoded.bad]
        return Chunk(table=table.select(self.columns), positions=offsets, bad=bad)

    def _meta(
        self, name: str, topic: str, partition: int, kept: list[Message], offsets: np.ndarray
    ) -> pa.Array:
        if name == ID_COLUMN:
            head = f"{topic}:{partition}:" if self.several_topics else f"{partition}:"
            return pc.binary_join_element_wise(head, pa.array(offsets).cast(pa.string()), "")
        field = name.removeprefix(META_PREFIX)
        if field == "offset":
            return pa.array(offsets, pa.int64())
        if field == "partition":
            return pa.array(np.full(len(kept), partition, dtype=np.int32))
        if field == "topic":
            return pa.array([topic] * len(kept), pa.string())
        if field == "timestamp":
            return pa.array([m.timestamp()[1] for m in kept], pa.int64()).cast(META_TYPES[field])
        keys = [m.key() for m in kept]
        return pa.array([None if k is None else k.decode("utf-8", "replace") for k in keys])

    def _bad(self, shard: Shard, topic: str, message: Message, error: str, why: str) -> BadRecord:
        head = f"{topic}:" if self.several_topics else ""
        return BadRecord(
            source=shard.path,
            stage="decode",
            error=error,
            message=why,
            raw=cut_raw(message.value() or b""),
            row=message.offset(),
            id=f"{head}{message.partition()}:{message.offset()}",
        )

    def locate(self, shard: Shard, position: int) -> tuple[Literal["line", "row"], int]:
        """A row's place is its message's offset in the partition."""
        return "row", position


def _offsets(messages: list[Message]) -> np.ndarray:
    """The messages' offsets: a range when they run without a gap (the usual case, one
    look at each end), else each one's."""
    if not messages:
        return np.empty(0, dtype=np.int64)
    first, last = messages[0].offset() or 0, messages[-1].offset() or 0
    if last - first == len(messages) - 1:
        return np.arange(first, last + 1, dtype=np.int64)
    return np.array([m.offset() for m in messages], dtype=np.int64)


def shard_partition(shard: Shard) -> tuple[str, int]:
    """The topic and partition a shard's path (`kafka://servers/topic/partition`) names."""
    _, topic, partition = shard.path.rsplit("/", 2)
    return topic, int(partition)


def kafka_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> KafkaSource:
    """The `kafka` source plug-in: the topics' unread offsets, as runs of offsets."""
    servers, topics = parse_uri(section.uri)
    options = KafkaSourceOptions.model_validate(section.options)
    return KafkaSource(servers, topics, options, section.shard_rows, min_shards)
