"""The `kafka` source's logic, with no broker: its uri, offset runs, options and value
decoding (tests/integration/test_kafka.py reads a live broker)."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pytest

from thresher.errors import SourceError, SpecError
from thresher.sources.base import Shard
from thresher.sources.kafka import (
    KafkaReader,
    consumer_config,
    parse_uri,
    shard_partition,
    split_ranges,
)
from thresher.sources.kafka_values import (
    ID_COLUMN,
    KafkaSourceOptions,
    ValueDecoder,
    avro_arrow_type,
    value_schema,
)
from thresher.spec import parse_spec

pytestmark = pytest.mark.unit


def test_the_uri_names_servers_and_topics() -> None:
    assert parse_uri("kafka://h1:9092,h2:9092/a,b") == ("h1:9092,h2:9092", ("a", "b"))
    assert parse_uri("kafka://h:1/orders/") == ("h:1", ("orders",))
    for bad in ("kafka://h:1", "kafka:///t", "http://h:1/t", "kafka://h:1/,"):
        with pytest.raises(SourceError, match=r"source\.uri"):
            parse_uri(bad)


def test_partitions_are_cut_into_runs_of_offsets() -> None:
    ranges = [("t", 0, 10, 25), ("t", 1, 7, 7), ("u", 2, 0, 3)]
    assert split_ranges(ranges, 10) == [("t", 0, 10, 20), ("t", 0, 20, 25), ("u", 2, 0, 3)]
    runs = split_ranges([("t", 0, 0, 1_000_003)], 1_000)
    assert runs[-1] == ("t", 0, 1_000_000, 1_000_003) and len(runs) == 1_001
    assert shard_partition(Shard(0, "kafka://h:1,h:2/my.topic-x/12", 0, 5)) == ("my.topic-x", 12)


def _spec(**options: Any) -> dict[str, Any]:
    return {
        "source": {"format": "kafka", "uri": "kafka://h:1/t", "options": options},
        "model": {"kind": "python", "uri": "model.py:Scorer"},
        "sink": {"uri": "out/"},
    }


def test_options_are_checked_and_the_id_defaults_to_partition_offset() -> None:
    spec = parse_spec(_spec(group="g"))
    assert spec.source.id_column == ID_COLUMN
    assert (
        parse_spec(
            {**_spec(group="g"), "source": {**_spec(group="g")["source"], "id_column": "n"}}
        ).source.id_column
        == "n"
    )
    named = _spec(group="g")
    named["source"]["id_column"] = "kafka_offset"
    named["sink"]["keep_columns"] = ["kafka_timestamp", "kafka_key", "n"]
    spec = parse_spec(named)
    assert spec.source.options["metadata"] == ["offset", "timestamp", "key"]
    assert parse_spec(spec.model_dump()).source.options["metadata"] == [
        "offset",
        "timestamp",
        "key",
    ]
    avro = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    assert parse_spec(_spec(group="g", value="avro", schema=avro)).source.options["schema"] == avro
    for options, field in [
        ({}, "group"),
        ({"group": "g", "value": "avro"}, "schema"),
        ({"group": "g", "schema": {"type": "long"}}, "schema"),
        ({"group": "g", "grup": 1}, "grup"),
        ({"group": "g", "metadata": ["headers"]}, "metadata"),
    ]:
        with pytest.raises(SpecError, match=field):
            parse_spec(_spec(**options))


def test_json_bad_messages_are_isolated_by_halving() -> None:
    schema = pa.schema([("n", pa.int64()), ("s", pa.string())])
    values: list[bytes | None] = [json.dumps({"n": i, "s": f"v{i}"}).encode() for i in range(64)]
    values[5] = b'{"n": 1.5}'  # not an int64
    values[40] = b"{broken"
    values[41] = None  # a tombstone
    values[50] = b'{\n  "n": 50,\n  "s": "pretty"\n}'  # newlines between tokens are fine
    values[51] = b'"just a string"'
    values[52] = b'{"n": 52, "s": "\xff"}'
    decoded = ValueDecoder("json", schema).decode(values)
    assert [i for i, _, _ in decoded.bad] == [5, 40, 41, 51, 52]
    assert decoded.good == [i for i in range(64) if i not in (5, 40, 41, 51, 52)]
    assert decoded.table.column("n").to_pylist() == decoded.good
    assert decoded.table.column("s").to_pylist()[decoded.good.index(50)] == "pretty"
    errors = {i: e for i, e, _ in decoded.bad}
    assert errors[41] == "NullValue" and errors[52] == "UnicodeDecodeError"


def test_json_columns_are_inferred_from_the_good_messages_of_a_sample() -> None:
    options = KafkaSourceOptions(group="g")
    sample = [b'{"a": 1, "b": "x"}', b"nope", b'{"a": 2,\n "b": "y"}', b"[1]"]
    assert value_schema(options, sample) == pa.schema([("a", pa.int64()), ("b", pa.string())])
    assert value_schema(options, [b"nope"]) == pa.schema([])


def test_text_and_bytes_values() -> None:
    text = ValueDecoder("text", pa.schema([("value", pa.string())]))
    decoded = text.decode([b"a", b"\xff", None, "é".encode()])
    assert decoded.table.column("value").to_pylist() == ["a", None, "é"]
    assert decoded.good == [0, 2, 3] and decoded.bad[0][:2] == (1, "UnicodeDecodeError")
    raw = ValueDecoder("bytes", pa.schema([("value", pa.binary())])).decode([b"\xff", None])
    assert raw.table.column("value").to_pylist() == [b"\xff", None] and not raw.bad


def test_avro_values_and_their_arrow_types() -> None:
    import fastavro

    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "n", "type": "long"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
            {"name": "w", "type": ["null", "double"]},
        ],
    }
    arrow = avro_arrow_type(schema)
    assert arrow == pa.struct(
        [
            ("n", pa.int64()),
            ("tags", pa.list_(pa.string())),
            ("kind", pa.string()),
            ("w", pa.float64()),
        ]
    )
    with pytest.raises(ValueError, match="unions"):
        avro_arrow_type(["int", "string"])
    options = KafkaSourceOptions.model_validate({"group": "g", "value": "avro", "schema": schema})
    decoder = ValueDecoder("avro", value_schema(options, []), schema)
    out = io.BytesIO()
    fastavro.schemaless_writer(
        out, fastavro.parse_schema(schema), {"n": 3, "tags": ["x"], "kind": "B", "w": None}
    )
    decoded = decoder.decode([out.getvalue(), b"\x01", None])
    assert decoded.table.to_pylist() == [{"n": 3, "tags": ["x"], "kind": "B", "w": None}]
    assert [i for i, _, _ in decoded.bad] == [1, 2]


def test_a_broker_that_never_answers_fails_the_shard_after_the_idle_time() -> None:
    options = KafkaSourceOptions(group="g", config={"log_level": 0})
    config = tuple(consumer_config("127.0.0.1:1", options).items())  # nothing listens there
    decoder = ValueDecoder("text", pa.schema([("value", pa.string())]))
    reader = KafkaReader(config, decoder, ["value"], decoder.schema, False, idle_s=1.5)
    with pytest.raises(SourceError, match=r"no message from the broker for 1\.5 s, 0 of"):
        list(reader.read(Shard(0, "kafka://127.0.0.1:1/t/0", 0, 10), 100))
