"""A continuous consumer of Kafka topics, as a table trigger (`table = "kafka"`): a set
is the messages that gathered since the last one — once `gather_messages` of them have
arrived, or the oldest has waited `gather_seconds` (the founding documents' "1,000
records or a timer") — and its job reads exactly those offsets.

    [triggers.events]
    watch = "kafka://127.0.0.1:9092/events"
    table = "kafka"
    poll_seconds = 1
    tenant = "acme"

    [triggers.events.job]
    model = "churn"
    source = { options = { group = "scorer", gather_messages = 1000, gather_seconds = 60 } }

A version is the topics' partition ends at a look: its number their sum (it only grows),
its id the offsets it covers, `from` each partition's end in the version before it (the
group's committed offset for the first) `to` its end now. The trigger ledger takes each
version once, across restarts and servers on one store, so every message is in exactly
one set's job; the job commits the group's offsets after it publishes. How long the
oldest message has waited is counted from when this server first saw it (a restarted
server waits up to `gather_seconds` again).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from thresher.triggers.versions import TableVersion, VersionRun

__all__ = ["KafkaWatch"]

Ends = dict[str, int]  # "topic/partition" -> offset


class KafkaWatch:
    """Kafka topics' new messages as versions (confluent-kafka: the `kafka` extra)."""

    format = "kafka"
    pins: tuple[str, ...] = ("offsets",)
    is_path: bool = True  # a URL: confined to allowed_roots like a folder's
    example = TableVersion(0, json.dumps({"from": {}, "to": {}}))

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int], float] = {}  # (topics, after) -> first seen
        self._lock = threading.Lock()

    def versions_after(
        self, table: str, after: TableVersion | None, options: Mapping[str, Any]
    ) -> list[TableVersion]:
        from thresher.sources.kafka_values import KafkaSourceOptions

        settings = KafkaSourceOptions.model_validate(options)
        starts, ends = partition_ends(table, settings, None if after is None else _to(after))
        new = sum(ends[k] - starts.get(k, 0) for k in ends)
        if new <= 0:
            return []
        key = (table, -1 if after is None else after.number)
        with self._lock:
            first = self._seen.setdefault(key, time.monotonic())
        waited = time.monotonic() - first
        if new < settings.gather_messages and waited < settings.gather_seconds:
            return []
        with self._lock:
            self._seen.pop(key, None)
        covered = {"from": starts, "to": ends}
        return [TableVersion(sum(ends.values()), json.dumps(covered, sort_keys=True))]

    def source_options(self, run: VersionRun) -> dict[str, Any]:
        starts = json.loads(run.versions[0].id)["from"]
        ends = _to(run.versions[-1])
        offsets = []
        for key, end in sorted(ends.items()):
            topic, _, partition = key.rpartition("/")
            offsets.append([topic, int(partition), int(starts.get(key, end)), int(end)])
        return {"offsets": offsets}


def partition_ends(uri: str, options: Any, after: Ends | None) -> tuple[Ends, Ends]:
    """Where each partition of the topics at `uri` ("topic/partition" keys) starts and
    ends now: from `after` (the previous set's ends), else the group's committed offset
    (or `options.initial` where it has none), to the partition's end."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from thresher.errors import SourceError
    from thresher.sources.kafka import consumer_config, parse_uri

    servers, topics = parse_uri(uri)
    consumer = Consumer(consumer_config(servers, options))
    timeout = options.timeout_s
    try:
        listed = consumer.list_topics(timeout=timeout).topics
        partitions = [
            TopicPartition(name, p)
            for name in topics
            if name in listed and listed[name].error is None
            for p in sorted(listed[name].partitions)
        ]
        committed = consumer.committed(partitions, timeout=timeout) if after is None else []
        starts: dict[str, int] = {}
        ends: dict[str, int] = {}
        for tp in partitions:
            key = f"{tp.topic}/{tp.partition}"
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout)
            ends[key] = high
            if after is not None:
                starts[key] = after.get(key, low)
            else:
                offset = next(c.offset for c in committed if c.partition == tp.partition
                              and c.topic == tp.topic)  # fmt: skip
                initial = low if options.initial == "earliest" else high
                starts[key] = offset if offset >= 0 else initial
        return starts, ends
    except KafkaException as exc:
        raise SourceError(f"watch: {servers}: {exc}") from None
    finally:
        consumer.close()


def _to(version: TableVersion) -> Ends:
    return {k: int(v) for k, v in json.loads(version.id)["to"].items()}
