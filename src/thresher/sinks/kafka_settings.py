"""The `kafka` sink's options and what a spec writing to a topic implies, beside each
other so a spec checks without importing the Kafka client.

    [sink]
    format = "kafka"                                  # implied by a kafka:// uri
    uri = "kafka://broker1:9092/scores"               # servers / one topic
    options = { key = "customer_id" }                 # the column that keys each message

A topic only appends, so the sink's one mode is `append`. Each message's key is the
output column `options.key` names: by default a Kafka source's own message key (so a
prediction lands on the partition its input came from, in order with it), else the
source's `id_column`; a job with neither sends messages without a key.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from thresher.plugins import Options

# The column a Kafka source reads a message's key into (`sources/kafka_values.py`).
SOURCE_KEY = "kafka_key"


class KafkaSinkOptions(Options):
    """`sink.options` of the `kafka` sink."""

    key: str | None = None  # the output column whose value is each message's key
    # Each part in a Kafka transaction, so read_committed consumers see a part whole or
    # not at all; false for a broker that refuses transactions (the idempotent producer
    # and the sink's ledger still put every row on the topic once).
    transactional: bool = True
    # Further librdkafka settings (security.protocol, sasl.*, compression.type, …).
    config: dict[str, str | int | float | bool] = Field(default_factory=dict)
    timeout_s: float = Field(default=30.0, gt=0)  # metadata, offsets, a part's delivery


def parse_topic_uri(uri: str) -> tuple[str, str]:
    """`kafka://h1:9092,h2:9092/scores` -> ("h1:9092,h2:9092", "scores"); ValueError
    when the uri names no servers or not exactly one topic."""
    scheme, _, rest = uri.partition("://")
    servers, _, topic = rest.partition("/")
    topic = topic.strip("/")
    if scheme != "kafka" or not servers or not topic or "," in topic or "/" in topic:
        raise ValueError(f"uri: {uri!r} is not kafka://host:port[,host:port]/topic")
    return servers, topic


def complete_kafka_sink_spec(spec: Any) -> None:
    """Fill in `sink.options.key`, and make the output carry it (the `completes` hook of
    the `kafka` sink). A Kafka source's key column is read for it."""
    sink, source = spec.sink, spec.source
    try:
        parse_topic_uri(sink.uri)
    except ValueError as exc:
        raise ValueError(f"sink.{exc}") from None
    key = sink.options.get("key")
    if key is None and source.format == "kafka":
        key = SOURCE_KEY
    elif key is None:
        key = source.id_column
    if key is None:
        return
    sink.options["key"] = key
    if key != source.id_column and key not in sink.keep_columns:
        sink.keep_columns.append(key)
    if source.format == "kafka" and key == SOURCE_KEY:
        metadata = list(source.options.get("metadata", []))
        if "key" not in metadata:
            source.options["metadata"] = [*metadata, "key"]
