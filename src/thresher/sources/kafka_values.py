"""A Kafka message's value as columns: JSON objects, Avro records, UTF-8 text or bytes.

The `kafka` source's options live here too, beside what they choose, so a spec checks
without importing the Kafka client. Decoding a chunk never raises on a bad message: it
returns the good rows as a table and the bad ones by their place in the chunk, with why,
so the reader can name each by topic, partition and offset.
"""

from __future__ import annotations

import io
import json
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field, model_validator

from thresher.plugins import Options
from thresher.sources.jsonl import JsonlFormat

# What a message carries besides its value, as columns a job may ask for (`metadata`).
META_TYPES: dict[str, pa.DataType] = {
    "topic": pa.string(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("ms", tz="UTC"),
    "key": pa.string(),
}
META_PREFIX = "kafka_"
ID_COLUMN = "kafka_id"  # "partition:offset" (one topic) or "topic:partition:offset"


class KafkaSourceOptions(Options):
    """`source.options` of the `kafka` source."""

    group: str = Field(min_length=1)  # the consumer group whose offsets the job moves on
    value: Literal["json", "avro", "text", "bytes"] = "json"
    schema_: dict[str, Any] | str | None = Field(default=None, alias="schema")  # Avro's
    # Where a partition the group never committed starts: its first or its next message.
    initial: Literal["earliest", "latest"] = "earliest"
    # Message fields read as `kafka_<name>` columns (topic, partition, offset, timestamp, key).
    metadata: list[Literal["topic", "partition", "offset", "timestamp", "key"]] = Field(
        default_factory=list
    )
    sample: int = Field(default=1_000, ge=1)  # JSON: messages the schema is inferred from
    # Further librdkafka settings (security.protocol, sasl.*, …), as the client names them.
    config: dict[str, str | int | float | bool] = Field(default_factory=dict)
    # For metadata, offsets and commits, and a shard's read waiting for a message.
    timeout_s: float = Field(default=30.0, gt=0)
    # Exactly these offsets, [topic, partition, from, to) each, instead of the group's
    # committed position to the partitions' ends (a continuous consumer's set).
    offsets: list[tuple[str, int, int, int]] | None = None
    # A continuous consumer (`table = "kafka"` trigger) makes a set once this many
    # messages gathered, or the oldest waited this long.
    gather_messages: int = Field(default=1_000, ge=1)
    gather_seconds: float = Field(default=60.0, gt=0)

    @model_validator(mode="after")
    def _schema_for_avro(self) -> KafkaSourceOptions:
        if (self.value == "avro") != (self.schema_ is not None):
            raise ValueError(
                "schema: an Avro schema is required with value = 'avro', and only then"
            )
        if self.schema_ is not None:
            avro_schema(self.schema_)  # a schema fastavro refuses is a spec error
        return self


def complete_kafka_spec(spec: Any) -> None:
    """A Kafka job's rows are named by partition and offset unless `source.id_column`
    names another column; a message field the id or `sink.keep_columns` names
    (`kafka_offset`, `kafka_timestamp`, …) is read without being listed in
    `options.metadata` (the `completes` hook of the `kafka` source)."""
    source = spec.source
    if source.id_column is None:
        source.id_column = ID_COLUMN
    listed = list(source.options.get("metadata", []))
    for name in [source.id_column, *spec.sink.keep_columns]:
        field = name.removeprefix(META_PREFIX)
        if name.startswith(META_PREFIX) and field in META_TYPES and field not in listed:
            listed.append(field)
    if listed:
        source.options["metadata"] = listed


def avro_schema(schema: dict[str, Any] | str) -> Any:
    """The Avro schema parsed by fastavro (a JSON text or its object)."""
    import fastavro

    raw = json.loads(schema) if isinstance(schema, str) else schema
    try:
        return fastavro.parse_schema(raw)
    except Exception as exc:  # fastavro's schema errors have no common base
        raise ValueError(f"schema: not an Avro schema fastavro reads: {exc}") from None


AVRO_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
    "enum": pa.string(),
    "fixed": pa.binary(),
}


def avro_arrow_type(schema: Any) -> pa.DataType:
    """The Arrow type of an Avro type: primitives, records (structs), arrays, maps, enums
    (text), fixed (bytes) and unions of one type with null (nullable)."""
    if isinstance(schema, list):
        kinds = [s for s in schema if s != "null"]
        if len(kinds) != 1:
            raise ValueError(f"schema: only unions of one type with null are read ({schema})")
        return avro_arrow_type(kinds[0])
    if not isinstance(schema, dict):
        if schema not in AVRO_PRIMITIVES or schema in ("enum", "fixed"):
            raise ValueError(f"schema: Avro type {schema!r} is not read")
        return AVRO_PRIMITIVES[schema]
    kind = schema["type"]
    if kind == "record":
        return pa.struct([(f["name"], avro_arrow_type(f["type"])) for f in schema["fields"]])
    if kind == "array":
        return pa.list_(avro_arrow_type(schema["items"]))
    if kind == "map":
        return pa.map_(pa.string(), avro_arrow_type(schema["values"]))
    return AVRO_PRIMITIVES[kind] if kind in ("enum", "fixed") else avro_arrow_type(kind)


@dataclass
class Decoded:
    """A chunk's values decoded: the good rows' table, their places in the chunk, and the
    bad ones as (place, error type, message)."""

    table: pa.Table
    good: list[int]
    bad: list[tuple[int, str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class ValueDecoder:
    """Decodes message values into the value columns of `schema`; picklable."""

    kind: str
    schema: pa.Schema  # the value's columns (json, avro) or one `value` column
    avro: dict[str, Any] | str | None = None

    def decode(self, values: list[bytes | None]) -> Decoded:
        if self.kind == "json":
            return self._json(values)
        if self.kind == "avro":
            return self._avro(values)
        return self._plain(values)

    def _json(self, values: list[bytes | None]) -> Decoded:
        if None not in values:  # the usual case: no tombstones, no places to map
            return self._json_texts(typing.cast(list[bytes], values))
        nulls = [
            (i, "NullValue", "the message has no value") for i, v in enumerate(values) if v is None
        ]
        places = [i for i, v in enumerate(values) if v is not None]
        decoded = self._json_texts([values[i] or b"" for i in places])
        bad = nulls + [(places[i], e, m) for i, e, m in decoded.bad]
        return Decoded(decoded.table, [places[i] for i in decoded.good], sorted(bad))

    def _json_texts(self, texts: list[bytes]) -> Decoded:
        tables: list[pa.Table] = []
        good: list[int] = []
        bad = self._json_part(texts, list(range(len(texts))), tables, good)
        if not tables:
            return Decoded(self.schema.empty_table(), good, bad)
        return Decoded(tables[0] if len(tables) == 1 else pa.concat_tables(tables), good, bad)

    def _json_part(
        self, texts: list[bytes], part: list[int], tables: list[pa.Table], good: list[int]
    ) -> list[tuple[int, str, str]]:
        """Parse `part` of `texts` as one block; when Arrow refuses it, halve it until the
        bad messages stand alone (a few parses per bad message, not one per message)."""
        if not part:
            return []
        block = b"\n".join(texts if len(part) == len(texts) else [texts[i] for i in part])
        if block.count(b"\n") != len(part) - 1:
            # Newlines between JSON tokens are spaces; inside a string they are invalid
            # either way, so the message keeps its verdict on one line.
            block = b"\n".join(texts[i].replace(b"\n", b" ").replace(b"\r", b" ") for i in part)
        try:
            table = JsonlFormat().parse(block, self.schema)
        except (pa.ArrowInvalid, UnicodeDecodeError, RecursionError, ValueError) as exc:
            if len(part) == 1:
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                return [(part[0], type(exc).__name__, message or type(exc).__name__)]
            half = len(part) // 2
            return self._json_part(texts, part[:half], tables, good) + self._json_part(
                texts, part[half:], tables, good
            )
        tables.append(table.select(self.schema.names))
        good.extend(part)
        return []

    def _avro(self, values: list[bytes | None]) -> Decoded:
        import fastavro

        assert self.avro is not None
        parsed = avro_schema(self.avro)
        records, good, bad = [], [], []
        for i, value in enumerate(values):
            try:
                if value is None:
                    raise ValueError("the message has no value")
                records.append(fastavro.schemaless_reader(io.BytesIO(value), parsed, None))
                good.append(i)
            except Exception as exc:  # fastavro raises what the bytes make it raise
                bad.append((i, type(exc).__name__, str(exc) or "not a record of the schema"))
        rows = [r if isinstance(r, dict) else {"value": r} for r in records]
        return Decoded(pa.Table.from_pylist(rows, schema=self.schema), good, bad)

    def _plain(self, values: list[bytes | None]) -> Decoded:
        array = pa.array(values, pa.binary())
        if self.kind == "bytes":
            return Decoded(pa.table([array], schema=self.schema), list(range(len(values))))
        try:
            return Decoded(
                pa.table([array.cast(pa.string())], schema=self.schema), list(range(len(values)))
            )
        except pa.ArrowInvalid:
            pass
        good, bad = [], []
        for i, value in enumerate(values):
            try:
                (value or b"").decode("utf-8")
                good.append(i)
            except UnicodeDecodeError as exc:
                bad.append((i, "UnicodeDecodeError", f"invalid UTF-8: {exc.reason}"))
        column = array.take(pa.array(good, pa.int64())).cast(pa.string())
        return Decoded(pa.table([column], schema=self.schema), good, bad)


def value_schema(options: KafkaSourceOptions, sample: list[bytes]) -> pa.Schema:
    """The value's columns: inferred from `sample` for JSON (its messages that parse),
    from the Avro schema, or one `value` column of text or bytes."""
    if options.value == "text":
        return pa.schema([("value", pa.string())])
    if options.value == "bytes":
        return pa.schema([("value", pa.binary())])
    if options.value == "avro":
        assert options.schema_ is not None
        raw = json.loads(options.schema_) if isinstance(options.schema_, str) else options.schema_
        arrow = avro_arrow_type(raw)
        return pa.schema(arrow) if pa.types.is_struct(arrow) else pa.schema([("value", arrow)])
    objects = []
    for message in sample:
        try:
            if isinstance(json.loads(message), dict):
                objects.append(message.replace(b"\n", b" "))
        except ValueError:
            continue  # a bad message: the reader reports it
    if not objects:
        return pa.schema([])
    return JsonlFormat().infer(b"\n".join(objects), None)
