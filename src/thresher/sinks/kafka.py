"""A Kafka topic as output: each prediction a JSON message, keyed by its input's key, on
the topic once, and only once the job has published.

    [sink]
    uri = "kafka://broker1:9092/scores"        # format = "kafka" is implied
    options = { key = "customer_id" }           # see kafka_settings.py for every option

Workers stage each shard as a Parquet part in a local side folder (`sink.staging`, else
`$XDG_DATA_HOME/thresher/kafka/<topic>-<hash>/`), as a SQL sink's do; a commit moves it
into the job's pending folder, so nothing reaches the topic while the job runs, is held
by the publish gate, fails or is cancelled. Publishing sends the parts in input order
(`kafka_produce.py`: each part exactly once, through crashes, in a transaction when the
broker allows), then moves them into the side folder, which keeps the latest job's output
as Parquet — what `read_output` gives back for downloads, `JobResult.to_arrow` and
the monitor — beside its `_errors/` and `_SUCCESS`. The topic holds every job's messages.

Every message has headers `thresher-job`, `thresher-shard` and `thresher-row`: where it
came from, for a consumer that wants to know.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, KafkaException

from thresher.errors import SinkError
from thresher.sinks.files import FilePartTarget, check_directory
from thresher.sinks.kafka_produce import TopicWriter
from thresher.sinks.kafka_settings import KafkaSinkOptions, parse_topic_uri
from thresher.sinks.parts import PartLayout, StagedPart, commit_file
from thresher.sinks.publish import (
    MARKER,
    PENDING,
    SUCCESS,
    PendingOutput,
    discard_pending,
    error_layout,
    read_published_errors,
    recover,
    remove_staging,
    write_json,
)
from thresher.sources.files import filesystem
from thresher.spec import SinkSection

LEDGER = "_kafka"  # each part's ledger file (`kafka_produce.py`)


@dataclass
class KafkaSink:
    servers: str
    topic: str
    options: KafkaSinkOptions
    side_dir: str
    force: bool = False
    job_id: str = field(default="", init=False)
    retry_round: int | None = field(default=None, init=False)
    layout: PartLayout | None = field(default=None, init=False)
    _round_writer: TopicWriter | None = field(default=None, init=False, repr=False)

    @property
    def location(self) -> str:
        return f"kafka://{self.servers}/{self.topic}"

    def start(
        self, job_id: str, shard_count: int, resume: bool, retry_round: int | None = None
    ) -> str:
        """A retry round's parts go to the topic as each commits (`part-00003.r1.parquet`
        in the side folder): they add to the shard's messages, as a round adds rows."""
        self.job_id, self.retry_round = job_id, retry_round
        width = max(5, len(str(max(shard_count - 1, 0))))
        suffix = ".parquet" if retry_round is None else f".r{retry_round}.parquet"
        self.layout = PartLayout(self.side_dir, "part-", suffix, width)
        fs, side = filesystem(self.side_dir)
        fs.makedirs(side, exist_ok=True)
        if resume or retry_round is not None:
            remove_staging(fs, side)
        else:
            check_directory(fs, side, self.force, self.side_dir, "sink.staging")
            if not fs.exists(f"{side}/{MARKER}"):
                write_json(fs, f"{side}/{MARKER}", {"format": "kafka", "topic": self.location})
            self._check_topic()
            PendingOutput(self.side_dir, job_id).create()
        recover(self.side_dir, skip=job_id, first=self._send_job)  # publishes cut short
        return self._errors().root

    def written_paths(self) -> list[str]:
        return [self.side_dir]

    def part_target(self) -> FilePartTarget:
        return FilePartTarget(self._layout(), self._errors(), "parquet")

    def commit(self, output: StagedPart | None, errors: StagedPart | None) -> None:
        """A job's parts wait in its pending folder; a retry round's go to the topic."""
        layout, side = self._layout(), self.side_dir.rstrip("/")
        if output is not None and self.retry_round is None:
            name = layout.final(output.shard).removeprefix(f"{side}/")
            PendingOutput(self.side_dir, self.job_id).commit(output, name)
        elif output is not None:
            commit_file(output, layout)
            if output.path is not None:
                ledger = f"{side}/{LEDGER}/{self.job_id}.r{self.retry_round}"
                self._writer_for_round().produce_part(
                    layout.final(output.shard), output.shard, ledger
                )
        if errors is not None and self.retry_round is None:
            name = self._errors().final(errors.shard).removeprefix(f"{side}/")
            PendingOutput(self.side_dir, self.job_id).commit(errors, name)
        elif errors is not None:
            commit_file(errors, self._errors())

    def finish(self, manifest: dict[str, Any]) -> None:
        fs, side = filesystem(self.side_dir)
        remove_staging(fs, side)
        manifest = {**manifest, "topic": self.location}
        if self.retry_round is not None:
            self._close_round()
            write_json(fs, f"{side}/{SUCCESS}", manifest)
            ledger = f"{side}/{LEDGER}/{self.job_id}.r{self.retry_round}"
            if fs.exists(ledger):
                fs.rm(ledger, recursive=True)
            return
        pending = PendingOutput(self.side_dir, self.job_id)
        if not pending.published():
            # overwrite: the side folder keeps only the latest job's parts
            pending.publish(manifest, overwrite=True, first=self._send_job)

    def _send_job(self, job_id: str, record: dict[str, Any]) -> None:
        """Every output part of job `job_id` onto the topic, in input order, each once
        (run again after a crash, it sends only what is missing)."""
        folder = f"{self.side_dir.rstrip('/')}/{PENDING}/{job_id}"
        fs, _ = filesystem(folder)
        writer = TopicWriter(self.servers, self.topic, self.options, job_id)
        try:
            for name in record["names"]:
                if name.startswith("part-") and name.endswith(".parquet"):
                    path = f"{folder}/{name}"
                    if fs.exists(filesystem(path)[1]):
                        writer.produce_part(path, _shard_of(name), f"{folder}/{LEDGER}")
        finally:
            writer.close()

    def discard(self, job_id: str) -> None:
        """A rejected held job: nothing of it reached the topic; its parts go."""
        discard_pending(self.side_dir, job_id)

    def abort(self) -> None:
        self._close_round()
        fs, side = filesystem(self.side_dir)
        remove_staging(fs, side)

    def read_output(self) -> Iterator[pa.Table]:
        """The latest published job's output (and its retry rounds'), from the side
        folder, part by part in input order; the topic has every job's."""
        fs, side = filesystem(self.side_dir)
        for path in sorted(fs.glob(f"{side}/part-*.parquet")):
            with fs.open(path, "rb") as f:
                yield pq.ParquetFile(f).read()

    def read_errors(self, shard: int | None = None) -> Iterator[dict[str, Any]]:
        part = None if shard is None else self._errors().final(shard)
        return read_published_errors(self.side_dir, part)

    def _check_topic(self) -> None:
        """The topic must exist: thresher does not choose a topic's partitions."""
        consumer = Consumer({"bootstrap.servers": self.servers, "group.id": "thresher.check"})
        try:
            topics = consumer.list_topics(self.topic, self.options.timeout_s).topics
        except KafkaException as exc:
            raise SinkError(f"sink.uri: {self.location}: {exc.args[0].str()}") from None
        finally:
            consumer.close()
        found = topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            raise SinkError(
                f"sink.uri: no topic {self.topic!r} on {self.servers}; create it first"
                " (its partitions and retention are yours to choose)"
            )

    def _writer_for_round(self) -> TopicWriter:
        if self._round_writer is None:
            key = f"{self.job_id}.r{self.retry_round}"
            self._round_writer = TopicWriter(self.servers, self.topic, self.options, key)
        return self._round_writer

    def _close_round(self) -> None:
        if self._round_writer is not None:
            self._round_writer.close()
            self._round_writer = None

    def _errors(self) -> PartLayout:
        return error_layout(self.side_dir, self._layout())

    def _layout(self) -> PartLayout:
        if self.layout is None:
            raise SinkError("the sink was not started")
        return self.layout


def _shard_of(name: str) -> int:
    """`part-00003.parquet` -> 3."""
    return int(name.removeprefix("part-").split(".", 1)[0])


def kafka_sink(section: SinkSection) -> KafkaSink:
    """The `kafka` sink plug-in: `kafka://servers/topic`."""
    try:
        servers, topic = parse_topic_uri(section.uri)
    except ValueError as exc:
        raise SinkError(f"sink.{exc}") from None
    return KafkaSink(
        servers=servers,
        topic=topic,
        options=KafkaSinkOptions(**section.options),
        side_dir=section.staging or default_side_dir(servers, topic),
        force=section.force,
    )


def default_side_dir(servers: str, topic: str) -> str:
    """`~/.local/share/thresher/kafka/<topic>-<hash>`, stable for one servers/topic."""
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    digest = hashlib.sha256(f"{servers}/{topic}".encode()).hexdigest()[:8]
    return str(data_home / "thresher" / "kafka" / f"{topic}-{digest}")
