"""Actuals, late, joined by id: labels that arrive days after a job, in parts, matched to
the job's predictions exactly and idempotently.

Adding a part:

1. Its digest — the sha256 of its ids and labels as text — is looked up first: a part
   added before changes nothing and is reported as such.
2. Its ids are made the job's id type (a CSV's "007" is the id 7 of an integer id
   column), then text; an id that appears again later in the part is `repeated` (the
   first label counts).
3. The job's published output is streamed part by part, and each output id is looked up
   among the part's ids in Arrow (`index_in`): memory grows with the actuals, not with
   the output. An id the job never predicted is `unknown` — counted, and shown.
4. The matched ids go to the store with their label and the prediction (and class
   probabilities) they were joined to, in one transaction; an id labelled by an earlier
   part keeps its first label and counts as `repeated`.

Labels are kept as text in the type of the job's `prediction` column when they convert
to it (a label 1.0 for an integer prediction is "1"), so a label and a prediction of one
class compare equal.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from thresher.errors import MonitorError
from thresher.monitor.labels import (
    LabelledIds,
    from_records,
    from_table,
    read_file,
    read_query,
)
from thresher.monitor.part_reader import PartLimits
from thresher.store import JobRecord, JobState, NewPart, PartRecord, PredictionInfo, Store

__all__ = [
    "ActualsPart",
    "PartFile",
    "add_actuals",
    "add_file_part",
    "joinable",
    "part_digest",
    "read_part",
]

FILE_SINKS = ("parquet", "csv", "jsonl")
UNKNOWN_SHOWN = 10  # unknown ids a result lists
DEFAULT_PREDICTION = "prediction"  # the output column a job's prediction is, unless named


@dataclass(frozen=True)
class ActualsPart:
    """What adding one part of actuals did. `new` is False when the same part (by
    digest) was added before: nothing changed, and the counts are the first time's.
    `labelled`, `predicted` and `coverage` are the job's, after this part."""

    job_id: str
    source: str
    digest: str
    added_at: str
    new: bool
    rows_read: int
    matched: int
    unknown: int
    repeated: int
    unknown_ids: tuple[str, ...]
    labelled: int
    predicted: int
    coverage: float | None  # labelled ÷ predicted; None when the job predicted none

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def add_actuals(
    store: Store, job_id: str, part: LabelledIds, prediction_column: str | None = None
) -> ActualsPart:
    """Join `part`'s labels to job `job_id`'s predictions by id and keep them. The
    prediction is the output's `prediction_column` (default: the job's `[monitor]
    prediction_column`, itself `prediction` by default); an output of class
    probabilities alone (`proba_<class>`) predicts the likeliest class.

    >>> from thresher.monitor.labels import read_file
    >>> part = read_file("labels.csv", "customer_id", "churned")      # doctest: +SKIP
    >>> added = add_actuals(open_store(), "20261130-020304-a1b2c3", part)  # doctest: +SKIP
    >>> added.matched, added.unknown, added.repeated                 # doctest: +SKIP
    (9812, 3, 0)
    """
    job = store.job(job_id)
    id_column = joinable(job)
    digest = part_digest(part)
    known = store.actuals.part(job_id, digest)
    if known is not None:
        return _result(store, known, new=False, unknown_ids=())
    outputs = _outputs(job, id_column, prediction_column or job.spec.monitor.prediction_column)
    first = next(outputs, None)
    if first is None:
        raise MonitorError(f"job {job_id} has no published output at {job.spec.sink.uri}")
    ids = _as_type(part.ids, first.schema.field(id_column).type)
    positions = _first_positions(ids)
    distinct = ids.take(positions)
    labels = _as_type(part.labels, first.schema.field("prediction").type).take(positions)
    found, predictions, probas, info = _lookup(_chain(first, outputs), id_column, distinct)
    joined = pa.table(
        {
            "record_id": distinct.take(found),
            "label": labels.take(found),
            "prediction": predictions,
            "proba": probas,
        }
    )
    matched = np.zeros(len(distinct), dtype=bool)
    matched[found] = True
    unknown_ids = distinct.filter(pa.array(~matched)).slice(0, UNKNOWN_SHOWN).to_pylist()
    new = NewPart(
        digest=digest,
        source=part.source,
        joined=joined,
        unknown=int((~matched).sum()),
        repeated=len(ids) - len(distinct),
        info=info,
    )
    record, added = store.actuals.add(job_id, new)
    return _result(store, record, new=added, unknown_ids=tuple(unknown_ids) if added else ())


@dataclass(frozen=True)
class PartFile:
    """A file holding a part of actuals, and how to read it: its id column (None: the
    job's), its label column, the name messages give it, and the caps on its size."""

    uri: str
    id_column: str | None
    label_column: str
    shown: str
    limits: PartLimits
    prediction_column: str | None = None  # None: the job's [monitor] prediction_column


def add_file_part(store_url: str, job_id: str, file: PartFile) -> ActualsPart:
    """Read `file` and add it to job `job_id` in the store at `store_url`: what the
    service runs in a child process (`service/background/isolated.py`) for a tenant's
    uploaded file, so its parsing and its memory are never the server's."""
    from thresher.faults import crash_point
    from thresher.store import open_store

    crash_point("read_upload")
    store = open_store(store_url)
    try:
        id_column = file.id_column or joinable(store.job(job_id))
        part = read_file(file.uri, id_column, file.label_column, file.shown, file.limits)
        return add_actuals(store, job_id, part, file.prediction_column)
    finally:
        store.db.close()


def read_part(
    store: Store,
    job_id: str,
    data: str | pa.Table | list[dict[str, Any]],
    *,
    label_column: str = "label",
    id_column: str | None = None,
    query: str | None = None,
) -> LabelledIds:
    """A part from `data`: a file (by suffix), a database URL with `query`, a Table, or
    `{"id", "label"}` records; `id_column` defaults to job `job_id`'s id column."""
    if isinstance(data, list):
        return from_records(data)
    column = id_column or joinable(store.job(job_id))
    if isinstance(data, pa.Table):
        return from_table(data, "table", column, label_column)
    if query is not None:
        return read_query(query, data, column, label_column)
    return read_file(str(data), column, label_column)


def joinable(job: JobRecord) -> str:
    """The job's id column, if its predictions can take actuals; else MonitorError."""
    if job.spec.source.id_column is None:
        raise MonitorError(
            f"job {job.id} has no id column (source.id_column), so labels cannot be joined "
            "to its predictions; run the job with source.id_column set"
        )
    if job.state != JobState.SUCCEEDED:
        raise MonitorError(
            f"job {job.id} is {job.state.value}; actuals join to the predictions of a succeeded job"
        )
    if job.spec.sink.format in FILE_SINKS and job.spec.sink.mode == "overwrite":
        from thresher.sinks.publish import published_by

        owner = published_by(job.spec.sink.uri)
        if owner is not None and owner != job.id:
            raise MonitorError(
                f"{job.spec.sink.uri} now holds job {owner}'s output: job {job.id}'s "
                "predictions were replaced before its actuals came (give each run its own "
                "output, such as a {date} in a schedule's sink uri)"
            )
    return job.spec.source.id_column


def part_digest(part: LabelledIds) -> str:
    """The sha256 of the part's ids and labels as text, in row order: one content, one
    digest, whatever file or query brought it."""
    digest = hashlib.sha256()
    for values in (part.ids, part.labels):
        text = pc.cast(values, pa.string())
        _, offset_buffer, data = text.buffers()
        offsets = np.frombuffer(offset_buffer, np.int32)[text.offset : text.offset + len(text) + 1]
        digest.update(np.diff(offsets).astype("<i8").tobytes())
        digest.update(b"" if data is None else memoryview(data)[offsets[0] : offsets[-1]])
    return digest.hexdigest()


def _result(
    store: Store, record: PartRecord, new: bool, unknown_ids: tuple[str, ...]
) -> ActualsPart:
    labelled, predicted = store.actuals.labelled(record.job_id), record.info.predicted
    return ActualsPart(
        job_id=record.job_id,
        source=record.source,
        digest=record.digest,
        added_at=record.added_at,
        new=new,
        rows_read=record.rows_read,
        matched=record.matched,
        unknown=record.unknown,
        repeated=record.repeated,
        unknown_ids=unknown_ids,
        labelled=labelled,
        predicted=predicted,
        coverage=labelled / predicted if predicted else None,
    )


def _outputs(job: JobRecord, id_column: str, column: str) -> Iterator[pa.Table]:
    """The job's published output, part by part, cut to the id, the prediction (its
    `column`, named `prediction` here) and the class probabilities."""
    for table in _published(job):
        if id_column not in table.column_names:
            raise MonitorError(f"job {job.id}'s output has no id column {id_column!r}")
        probas = proba_columns(table.schema)
        if column in table.column_names:
            prediction = table.column(column)
        elif probas and column == DEFAULT_PREDICTION:
            prediction = _likeliest(table, probas)
        else:
            raise MonitorError(
                f"job {job.id}'s output has no {column!r} column (it has "
                f"{', '.join(table.column_names)}); name the column that holds the"
                " prediction with [monitor] prediction_column or --prediction-column"
            )
        if pa.types.is_nested(prediction.type):
            raise MonitorError(
                f"job {job.id}'s prediction {column!r} is {prediction.type}; quality needs"
                " one value"
            )
        columns = {id_column: table.column(id_column), "prediction": prediction}
        yield pa.table(columns | {name: table.column(name) for name in probas})


def _likeliest(table: pa.Table, probas: list[str]) -> pa.Array:
    """The class of each row's highest `proba_<class>` column (its name's suffix), for
    an output of class probabilities alone."""
    classes = np.array([name.removeprefix("proba_") for name in probas])
    matrix = np.column_stack([table.column(n).to_numpy(zero_copy_only=False) for n in probas])
    return pa.array(classes[np.argmax(matrix, axis=1)], pa.string())


def _published(job: JobRecord) -> Iterator[pa.Table]:
    """The job's own published output: in an append-mode folder, its own parts only
    (`part-<job id>-…`), not the other runs' beside them."""
    from thresher.sinks import open_sink
    from thresher.sinks.files import FileSink
    from thresher.sinks.parts import read_part

    sink = open_sink(job.spec.sink)
    if not (isinstance(sink, FileSink) and job.spec.sink.mode == "append"):
        yield from sink.read_output()
        return
    for url in sink.published_parts():
        if url.rsplit("/", 1)[-1].startswith(f"part-{job.id}-"):
            yield read_part(url, sink.file_format)


def proba_columns(schema: pa.Schema) -> list[str]:
    """The `proba_<class>` columns, in the output's order (the model's class order)."""
    return [name for name in schema.names if name.startswith("proba_")]


def _chain(first: pa.Table, rest: Iterator[pa.Table]) -> Iterator[pa.Table]:
    yield first
    yield from rest


def _lookup(
    outputs: Iterator[pa.Table], id_column: str, distinct: pa.Array
) -> tuple[np.ndarray, pa.Array, pa.Array, PredictionInfo]:
    """For each of `distinct`'s ids the output has: its place in `distinct`, the
    prediction and the probabilities (text), the first time the output has the id."""
    places: list[pa.Array] = []
    predictions: list[pa.Array] = []
    probas: list[pa.Array] = []
    rows, kind, columns = 0, pa.null(), list[str]()
    for table in outputs:
        rows += table.num_rows
        kind, columns = table.schema.field("prediction").type, proba_columns(table.schema)
        place = pc.index_in(table.column(id_column).cast(pa.string()), value_set=distinct)
        hit = pc.is_valid(place)
        places.append(place.filter(hit).combine_chunks().cast(pa.int64()))
        predictions.append(_text(table.column("prediction").filter(hit)))
        probas.append(_proba_text(table.filter(hit), columns))
    place_all = np.concatenate([p.to_numpy() for p in places]) if places else np.array([], int)
    found, first = np.unique(place_all, return_index=True)
    taken = pa.array(first, pa.int64())
    prediction = pa.concat_arrays(predictions).take(taken)
    proba = pa.concat_arrays(probas).take(taken)
    return found, prediction, proba, PredictionInfo(rows, str(kind), tuple(columns))


def _first_positions(ids: pa.Array) -> pa.Array:
    """The row of each id's first appearance, in row order."""
    table = pa.table({"id": ids, "row": pa.array(np.arange(len(ids)))})
    first = table.group_by("id", use_threads=False).aggregate([("row", "min")])
    rows = first.column("row_min")
    return pc.take(rows, pc.sort_indices(rows)).combine_chunks()


def _as_type(values: pa.Array, target: pa.DataType) -> pa.Array:
    """`values` as text, each converted to `target` first where it converts (so they
    compare with the output's values, themselves as text); the rest kept as they are,
    to match nothing of the job's."""
    if values.type == target:
        return _text(values)
    if pa.types.is_integer(target) and pa.types.is_string(values.type):
        # One text id that is no integer ("8.0", "x7") must not keep "007" from being 7.
        whole = pc.match_substring_regex(pc.utf8_trim_whitespace(values), r"^[+-]?[0-9]+$")
        with suppress(pa.ArrowInvalid):
            numbers = _text(pc.cast(pc.if_else(whole, values, "0"), target))
            return pc.if_else(whole, numbers, values)
    with suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
        values = pc.cast(values, target, safe=True)
    return _text(values)


def _text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    text = pc.cast(values, pa.string())
    return text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text


def _proba_text(table: pa.Table, columns: list[str]) -> pa.Array:
    """Each row's class probabilities, comma-separated in `columns` order; null without."""
    if not columns:
        return pa.nulls(table.num_rows, pa.string())
    texts = [_text(table.column(c)) for c in columns]
    return texts[0] if len(texts) == 1 else pc.binary_join_element_wise(*texts, ",")
