"""A tenant's job submission, and the full job spec the server builds from it.

A tenant says what to read (an uploaded file, or a server-side path under
`allowed_roots`), which registered model to run, and a few choices about columns, output
format and batching. Everything else — the model's file and kind, the `[run]` section,
where the outputs go — comes from the server, so a submission can never point the server
at code or paths of the tenant's choosing.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from thresher.errors import SourceError, SpecError, describe_errors
from thresher.media.settings import ImageColumnSection
from thresher.notify.urls import check_webhook_url
from thresher.plan.inputs import missing_columns
from thresher.profiles.gate_settings import PublishChecks
from thresher.service.background.isolated import input_columns
from thresher.service.errors import Unprocessable
from thresher.service.limits import MAX_COLUMNS, PRIORITY_LIMIT, LongText, Text
from thresher.service.logs import current_request_id
from thresher.service.policies.catalogs import check_catalog
from thresher.service.policies.inputs import readable_input
from thresher.service.policies.quotas import check_submission
from thresher.service.policies.roots import (
    check_source_files,
    check_under_roots,
)
from thresher.service.table_outputs import TableOutput, table_sink
from thresher.service.uploads import find_file
from thresher.spec import BatchSection, JobSpec, parse_spec
from thresher.store import IdempotencyConflict
from thresher.worker import tracing

if TYPE_CHECKING:
    from thresher.service.state import ServiceState


# The files one submission may list (a trigger's set of new files is one job).
MAX_FILES = 100_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SourceRequest(_Strict):
    """A server-side input under one of `allowed_roots`: a file, directory or glob
    (`uri`), or exactly the files listed (`files`, as a trigger's jobs are made)."""

    uri: LongText | None = Field(
        None, description="An absolute path or URL under the server's allowed_roots."
    )
    files: list[LongText] | None = Field(
        None,
        min_length=1,
        max_length=MAX_FILES,
        description="Exactly these files (absolute paths or URLs under allowed_roots), in order.",
    )
    format: (
        Literal[
            "parquet",
            "csv",
            "jsonl",
            "delta",
            "iceberg",
            "features",
            "images",
            "documents",
            "kafka",
        ]
        | None
    ) = Field(
        None,
        description="Default: from the suffix. `delta`: `uri` is a Delta table; `iceberg`:"
        " `uri` is an Iceberg table's name (namespace.table) in `options.catalog`, a SQL"
        " catalog on a SQLite file under allowed_roots; `images`, `documents`: a file a row.",
    )
    images: ImageColumnSection | None = Field(
        None,
        description="A column of images: each file's bytes, or its path or URL, fetched by"
        " the workers (only under allowed_roots, URL prefixes included).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        max_length=MAX_COLUMNS,
        description="The source's own options, as in a job spec's [source.options]: delta's"
        " version, timestamp and partitions, or `versions` = [first, last] to read only the"
        " rows those versions appended (a table trigger's jobs); iceberg's catalog,"
        " snapshot_id, timestamp, row_filter, or `snapshots` = [first_id, last_id];"
        " features' timestamp and"
        " tables (each table's uri under allowed_roots too).",
    )

    @model_validator(mode="after")
    def _one_input(self) -> SourceRequest:
        if (self.uri is None) == (self.files is None):
            raise ValueError("uri: give exactly one of source.uri and source.files")
        return self


class NotifyRequest(_Strict):
    """Where to tell the tenant that the job ended."""

    webhook: str = Field(description="An http(s) URL; it gets a signed POST when the job ends.")


class JobRequest(_Strict):
    """The body of `POST /v1/jobs`. Exactly one of `input_file_id` and `source`."""

    input_file_id: Text | None = Field(None, description="An id from POST /v1/files.")
    source: SourceRequest | None = None
    model: Text = Field(description="The name of a model registered on the server.")
    columns: list[Text] | None = Field(
        None,
        max_length=MAX_COLUMNS,
        description="The model's input columns (default: all but id and keep columns).",
    )
    id_column: Text | None = Field(None, description="Copied into every result and error row.")
    keep_columns: list[Text] = Field(
        default_factory=list,
        max_length=MAX_COLUMNS,
        description="Input columns copied beside the predictions.",
    )
    output_format: Literal["jsonl", "csv", "parquet"] = "jsonl"
    output_table: TableOutput | None = Field(
        None,
        description="Write the predictions to this Delta or Iceberg table (under allowed_roots)"
        " instead of the results download; the job's status says the version it made.",
    )
    output_topic: Text | None = Field(
        None,
        description="Also send each prediction to this Kafka topic (kafka://host:port/topic,"
        " under allowed_roots) as a JSON message keyed by id_column, once, when the job"
        " publishes; the results download stays (stored as Parquet).",
    )
    priority: int = Field(
        0,
        ge=-PRIORITY_LIMIT,
        le=PRIORITY_LIMIT,
        description="Higher runs first; equal priorities run oldest first.",
    )
    workers: int | None = Field(
        None,
        ge=1,
        description="Worker slots to ask for (default: the server's [run] workers, else"
        " every slot); the job starts with what is free, down to the server's minimum.",
    )
    name: Text = Field("api", max_length=200, description="A name for listings and logs.")
    notify: NotifyRequest | None = None
    batch: BatchSection | None = Field(None, description="size (rows or 'auto'), max_size.")
    publish_checks: PublishChecks | None = Field(
        None,
        description="The job's `[publish] checks`: rows_out_ratio, max_error_rate,"
        " max_null_share, no_drift. A job that fails one is held until approved or rejected.",
    )

    @model_validator(mode="after")
    def _one_input(self) -> JobRequest:
        if (self.input_file_id is None) == (self.source is None):
            raise ValueError("input_file_id: give exactly one of input_file_id and source")
        return self

    @model_validator(mode="after")
    def _one_output(self) -> JobRequest:
        if self.output_table is not None and self.output_topic is not None:
            raise ValueError("output_table: give at most one of output_table and output_topic")
        return self

    @model_validator(mode="after")
    def _no_code_of_tenants(self) -> JobRequest:
        # A custom check is a Python function the server would import and call: code a
        # tenant must not choose. The other checks are data.
        if self.publish_checks is not None and self.publish_checks.custom:
            raise ValueError("publish_checks.custom: not on a shared server; use the others")
        return self


def parse_request(body: dict[str, Any]) -> JobRequest:
    """Validate a submission's JSON; Unprocessable names each bad field."""
    try:
        return JobRequest.model_validate(body)
    except ValidationError as exc:
        raise Unprocessable(describe_errors(exc, JobRequest)) from None


def submit_job(
    state: ServiceState,
    tenant: str,
    body: dict[str, Any],
    idempotency_key: str | None = None,
    tick: tuple[str, datetime] | None = None,
    *,
    model_options: dict[str, Any] | None = None,
    source_options: dict[str, Any] | None = None,
) -> str:
    """Validate a job submission (the JSON body of `POST /v1/jobs`: `input_file_id`,
    `source.uri` or `source.files`, `model` by registered name, optional `columns`,
    `id_column`, `keep_columns`, `output_format` or `output_table`, `priority`, `workers`,
    `notify`, `batch`,
    `publish_checks`,
    `name`), build the whole job spec on the server's side, and queue it. Returns the job
    id; with an `idempotency_key` the tenant's earlier job with that key, if any, instead (422 when
    that job was submitted with a different body). `tick` is the (schedule, fire time) of
    a scheduled job, recorded in its spec and manifest. `model_options` are added to the
    registered model's options (the batch worker asks an encoder for token counts), and
    `source_options` set `[source]` keys (the batch worker's shard size).

    Raises `Unprocessable` (422) for a body that does not make a job (naming each
    field), `NotFound` (404) for an input file the tenant does not own, `Forbidden`
    (403) or `BadRequest` (400) for a `source.uri` or one of `source.files` the server
    will not read, `TooManyRequests` (429) for a tenant over one of its limits
    (`policies/quotas.py`) — all `thresher.service.errors.ServiceError`s.
    """
    from thresher.coordinator.job import new_job_id

    job_id = new_job_id()
    store = state.store
    request = parse_request(body)  # limits before the input is read: a refusal is cheap
    check_submission(store, tenant, state.config.limits(tenant), request.priority, request.workers)
    spec = build_spec(state, tenant, body, job_id)
    if model_options:
        options = {**spec.model.options, **model_options}
        spec = spec.model_copy(update={"model": spec.model.model_copy(update={"options": options})})
    if source_options:
        spec = spec.model_copy(update={"source": spec.source.model_copy(update=source_options)})
    spec = _with_origin(spec, tick)
    try:
        queued = store.queue_job(job_id, spec, tenant, idempotency_key, request_digest(body))
    except IdempotencyConflict as exc:
        raise Unprocessable(
            [f"Idempotency-Key: {exc}, with another request; use a new key for a new job"]
        ) from None
    state.jobs_waiting.set()
    return queued


def _with_origin(spec: JobSpec, tick: tuple[str, datetime] | None) -> JobSpec:
    """The spec with where it came from: the request (its log lines carry its id) and,
    for a scheduled job, the schedule and fire time its manifest records."""
    origin: dict[str, Any] = {"request_id": current_request_id()}
    origin["traceparent"] = tracing.current_traceparent()  # the request's span: the job joins
    if tick is not None:
        schedule, nominal = tick
        origin |= {"schedule": schedule, "nominal_time": nominal.isoformat()}
    return spec.model_copy(update={"job": spec.job.model_copy(update=origin)})


def request_digest(body: dict[str, Any]) -> str:
    """The sha256 of a submission as the server reads it (defaults filled in, keys in
    order), so the same request sent again has the same digest however it is spelled."""
    canonical = parse_request(body).model_dump_json()
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def build_spec(state: ServiceState, tenant: str, body: dict[str, Any], job_id: str) -> JobSpec:
    """The whole job spec for a tenant's submission, its output in `outputs/<job_id>/`."""
    request = parse_request(body)
    model = state.config.models.get(request.model)
    if model is None:
        known = ", ".join(sorted(state.config.models)) or "none"
        raise Unprocessable([f"model: no model named {request.model!r} (registered: {known})"])
    if request.notify is not None:
        try:
            check_webhook_url(request.notify.webhook, state.config.webhook_allow_private)
        except ValueError as exc:
            raise Unprocessable([str(exc)]) from None
    raw: dict[str, Any] = {
        "job": {"name": request.name, "priority": request.priority},
        "source": _source(state, tenant, request),
        "model": model.model_dump(mode="json"),
        "run": _run_section(state, request),
        "sink": _sink(state, request, job_id),
    }
    if request.batch is not None:
        raw["batch"] = request.batch.model_dump(mode="json")
    if request.notify is not None:
        raw["notify"] = request.notify.model_dump(mode="json")
    if request.publish_checks is not None:
        raw["publish"] = {"checks": request.publish_checks.model_dump(mode="json")}
    try:
        spec = parse_spec(raw)
    except SpecError as exc:
        raise Unprocessable(exc.problems) from None
    _check_columns(spec, request)
    return spec


def _sink(state: ServiceState, request: JobRequest, job_id: str) -> dict[str, Any]:
    """The job's output folder; with an `output_topic`, the Kafka sink's staging folder
    (it keeps the job's output there as Parquet, for the download); with an
    `output_table`, the table (`table_outputs.py`)."""
    if request.output_table is not None:
        roots = list(state.config.allowed_roots)
        return table_sink(request.output_table, request.keep_columns, roots)
    folder = f"{state.output_dir(job_id)}/"
    sink = {"uri": folder, "format": request.output_format, "keep_columns": request.keep_columns}
    if request.output_topic is not None:
        check_under_roots(request.output_topic, state.config.allowed_roots, "output_topic")
        sink |= {"uri": request.output_topic, "format": "kafka", "staging": folder}
    return sink


def _run_section(state: ServiceState, request: JobRequest) -> dict[str, Any]:
    """The server's `[run]`, with the worker slots the request asks for (at most the
    machine's capacity)."""
    run = state.config.run.model_dump(mode="json")
    cpu = state.config.capacity.cpu
    if request.workers is not None:
        if request.workers > cpu:
            raise Unprocessable([f"workers: {request.workers} is more than this server's {cpu}"
                                 " worker slots (capacity.cpu)"])  # fmt: skip
        run["workers"] = request.workers
    return run


def _check_columns(spec: JobSpec, request: JobRequest) -> None:
    """The columns the request names, checked against its input's schema (read in a
    child process): 422 naming the first few that are missing."""
    try:
        have = input_columns(spec.source)
    except SourceError as exc:
        raise Unprocessable([str(exc)]) from None
    if have is None:
        return  # the input took too long to read: the job's planner checks instead
    wanted = {
        "id_column": [request.id_column] if request.id_column else [],
        "keep_columns": request.keep_columns,
        "columns": request.columns or [],
    }
    problems = missing_columns(have, wanted)
    if problems:
        raise Unprocessable(problems)


def _source(state: ServiceState, tenant: str, request: JobRequest) -> dict[str, Any]:
    if request.input_file_id is not None:
        upload = find_file(state.store, tenant, request.input_file_id)
        source: dict[str, Any] = {"uri": upload.path, "format": upload.format}
        source["allowed_roots"] = [upload.path]
    elif request.source is not None and request.source.files is not None:
        files = check_source_files(request.source.files, state.config.allowed_roots)
        source = {"uri": _folder(files), "files": files, "format": request.source.format}
        source["allowed_roots"] = list(state.config.allowed_roots)
    elif request.source is not None and request.source.format == "iceberg":
        check_catalog(request.source.options.get("catalog"), state.config.allowed_roots)
        roots = list(state.config.allowed_roots)  # the table's files: confined when planned
        source = {"uri": request.source.uri, "format": "iceberg", "allowed_roots": roots}
    else:
        assert request.source is not None and request.source.uri is not None
        uri, roots = readable_input(state, tenant, request.source.uri)
        source = {"uri": uri, "format": request.source.format, "allowed_roots": roots}
    if request.source is not None and request.source.options:
        source["options"] = _source_options(state, request.source)
    if request.source is not None and request.source.images is not None:
        source["images"] = request.source.images.model_dump()
    source["id_column"] = request.id_column
    source["columns"] = request.columns
    return source


def _source_options(state: ServiceState, source: SourceRequest) -> dict[str, Any]:
    """The source's options, each path they name (a feature table's `uri`) under
    `allowed_roots` as the source's own; the plug-in's options model checks the rest
    when the spec is parsed (422 naming source.options.<key>)."""
    options = dict(source.options)
    tables = options.get("tables")
    if source.format == "features" and isinstance(tables, list):
        for at, table in enumerate(tables):
            uri = table.get("uri") if isinstance(table, dict) else None
            if isinstance(uri, str):
                where = f"source.options.tables.{at}.uri"
                check_under_roots(uri, state.config.allowed_roots, where)
    return options


def _folder(files: list[str]) -> str:
    """The folder (or URL prefix) of the first listed file, for the job's messages."""
    return files[0].rsplit("/", 1)[0] + "/"
