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
        from thresher.sources.kafka import partition_ends
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


def _to(version: TableVersion) -> Ends:
    return {k: int(v) for k, v in json.loads(version.id)["to"].items()}
