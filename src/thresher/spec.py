"""The job spec: what to read, which model, how to batch and run, where to write.

A spec is TOML, YAML or JSON on disk and the same thing as typed objects in Python:

    >>> spec = JobSpec.model_validate({
    ...     "source": {"uri": "customers.parquet", "id_column": "customer_id"},
    ...     "model": {"kind": "sklearn", "uri": "model.skops"},
    ...     "sink": {"uri": "out/"},
    ... })
    >>> spec.batch.size
    'auto'

Relative paths in a spec file are resolved against the file's folder, so a spec and its
data can move together.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from thresher.errors import SpecError, describe_errors
from thresher.media.settings import ImageColumnSection
from thresher.places import (
    FILE_FORMATS,
    QUERY_FORMATS,
    SIDE_FOLDER_SINKS,
    check_output_place,
    infer_format,
    infer_sink_format,
    resolve_option_uris,
    resolve_uri,
    table_format,
)
from thresher.plugins import (
    Kind,
    check_plugin,
    check_sink_mode,
    completion_hooks,
    default_sink_format,
    lookup,
    option_problems,
    sink_modes,
)
from thresher.profiles.gate_settings import PublishSection, gate_needs_profile
from thresher.profiles.settings import MonitorSection
from thresher.sizes import MAX_INT64, parse_bytes

FILE_INPUTS = (*FILE_FORMATS, "images", "documents")  # the sources that take `files`


class Section(BaseModel):
    """A spec section: unknown keys are errors, so a typo never passes silently."""

    # `--set job.name=2024` reads the value as TOML, an int; a text field takes it as text.
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


class JobSection(Section):
    name: str = "job"
    # the service runs higher priorities first; the store keeps it as a 64-bit integer
    priority: int = Field(default=0, ge=-MAX_INT64 - 1, le=MAX_INT64)
    # A scheduled job's schedule and fire time (UTC, ISO 8601), which its manifest records.
    schedule: str | None = None
    nominal_time: str | None = None
    # The HTTP request that submitted it (`x-request-id`), which its log lines carry,
    # and its trace (W3C traceparent), which the job's spans join (`worker/tracing.py`).
    request_id: str | None = Field(default=None, max_length=128)
    traceparent: str | None = Field(default=None, max_length=128)


class SourceSection(Section):
    uri: str
    format: str | None = None  # a registered source (see plugins.py), or inferred from uri
    id_column: str | None = None
    columns: list[str] | None = None
    csv_delimiter: str = Field(default=",", min_length=1, max_length=1)
    shard_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    # A SQL source: the query, the integer column planning splits into ranges, and about
    # how many rows each range (shard) holds.
    query: str | None = None
    key_column: str | None = None
    shard_rows: int = Field(default=1_000_000, ge=1)
    options: dict[str, Any] = Field(default_factory=dict)  # a third-party source's own
    # Folders (or URL prefixes) every input file must really lie under, symlinks followed;
    # empty: anywhere. The service sets its `allowed_roots` here, so the job's planner
    # checks the very files it reads, not only what the submission named.
    allowed_roots: list[str] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)  # exactly these, not what `uri` lists
    images: ImageColumnSection | None = None  # a column of images, fetched or held

    @model_validator(mode="after")
    def _known_source(self) -> SourceSection:
        self._infer_format()
        if self.files and self.format not in FILE_INPUTS:
            raise ValueError(f"files: only the file sources ({', '.join(FILE_INPUTS)}) take them")
        if self.images is not None and self.format in ("images", "documents"):
            raise ValueError(f"images: a {self.format} source reads its files itself")
        assert self.format is not None
        check_plugin(Kind.SOURCE, self.format, self.options)
        return self

    def _infer_format(self) -> SourceSection:
        by_uri = table_format(self.uri)
        if by_uri is not None and self.format in (None, by_uri):
            self.format = by_uri
        if self.format in QUERY_FORMATS:
            return self._check_query(self.format)
        if self.query is not None:
            raise ValueError(f"query: only a SQL source ({', '.join(QUERY_FORMATS)}) takes one")
        if self.format is None:
            inferred = infer_format(self.files[0] if self.files else self.uri)
            if inferred is None:
                formats = ", ".join(FILE_FORMATS)
                raise ValueError(f"format: cannot infer it from {self.uri!r}; set one of {formats}")
            self.format = inferred
        return self

    def _check_query(self, format: str) -> SourceSection:
        if table_format(self.uri) != format:
            raise ValueError(f"uri: a {format} source needs {QUERY_FORMATS[format]}")
        if not self.query or not self.query.strip():
            raise ValueError(f"query: required for a {format} source (SELECT …)")
        if not (self.key_column or self.id_column):
            raise ValueError(f"key_column: required for a {format} source (or set id_column)")
        return self


def _default_outputs() -> list[Literal["prediction", "proba"]]:
    return ["prediction"]


class ModelSection(Section):
    kind: str
    uri: str
    # Strict: only a real `true` loads code-executing formats, never "yes" or 1.
    trust: StrictBool = False
    trusted_types: list[str] = Field(default_factory=list)
    batch_format: Literal["pandas", "numpy", "arrow"] = "pandas"
    outputs: list[Literal["prediction", "proba"]] = Field(default_factory=_default_outputs)
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_options(self) -> ModelSection:
        """Options the adapter does not take are errors; an unknown kind, and the options
        a user's class takes as arguments, are checked before any work from the class's
        source (`models.check_model_section`), not here."""
        problems = option_problems(Kind.MODEL, self.kind, self.options, "options", self.uri)
        if problems:
            raise ValueError("\n".join(problems))  # one problem a line
        return self


class BatchSection(Section):
    size: int | Literal["auto"] = "auto"
    max_size: int = Field(default=65536, ge=1)
    max_memory: int | None = Field(default=None, ge=1, le=MAX_INT64)

    @field_validator("size", mode="before")
    @classmethod
    def _rows_or_auto(cls, size: object) -> object:
        if size == "auto" or (isinstance(size, int) and not isinstance(size, bool) and size >= 1):
            return size
        if isinstance(size, str) and size.strip().isdigit() and int(size) >= 1:
            return int(size)
        raise ValueError(f'must be a positive number of rows or "auto", not {size!r}')

    @field_validator("max_memory", mode="before")
    @classmethod
    def _bytes(cls, value: object) -> object:
        return parse_bytes(value) if isinstance(value, str) else value


class RunSection(Section):
    executor: str = "local"  # a registered executor (see plugins.py)
    workers: int | None = Field(default=None, ge=1)
    # auto: one worker per visible NVIDIA GPU if any, else per core; cuda: GPUs or refuse;
    # cpu: workers per core, GPUs hidden from them (see plan/devices.py)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # auto: CPU workers forked from one process that loaded the model (executors/zygote.py),
    # GPU workers spawned; spawn: every worker spawned, loading its own model
    start_method: Literal["auto", "spawn"] = "auto"
    address: str | None = None  # ray: "auto", "ray://host:10001", or none for a local Ray
    num_cpus: float | None = Field(default=None, gt=0)  # ray: CPUs per actor
    num_gpus: float = Field(default=0.0, ge=0)  # ray: GPUs per actor
    max_attempts: int = Field(default=3, ge=1)
    shard_timeout: float = Field(default=600.0, gt=0)

    @field_validator("executor")
    @classmethod
    def _known_executor(cls, executor: str) -> str:
        check_plugin(Kind.EXECUTOR, executor, {}, prefix="")
        return executor


class SinkSection(Section):
    uri: str
    format: str | None = None  # a registered sink (see plugins.py), or inferred from uri
    # merge: rows whose id the table holds replace its rows, others are added (the sinks
    # that can say so in their plug-in's `modes`: `delta`)
    mode: Literal["overwrite", "append", "merge"] = "overwrite"
    keep_columns: list[str] = Field(default_factory=list)
    force: StrictBool = False
    # SQL and Kafka sinks: the local folder for staged parts, `_errors/` and `_SUCCESS`.
    staging: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)  # a third-party sink's own

    @field_validator("uri", "staging")
    @classmethod
    def _names_a_folder(cls, uri: str | None) -> str | None:
        return None if uri is None else check_output_place(uri)

    @model_validator(mode="after")
    def _known_sink(self) -> SinkSection:
        self._infer_format()
        assert self.format is not None
        check_plugin(Kind.SINK, self.format, self.options)
        if "mode" not in self.model_fields_set:  # its first: a topic's sink only appends
            self.mode = sink_modes(self.format)[0]  # type: ignore[assignment]
        check_sink_mode(self.format, self.mode)
        return self

    def _infer_format(self) -> SinkSection:
        self.format = infer_sink_format(self.uri, self.format)
        if self.staging is not None and self.format not in SIDE_FOLDER_SINKS:
            raise ValueError("staging: only a SQL sink (or a kafka sink) takes one")
        return self


class ErrorsSection(Section):
    on_bad_input: Literal["skip", "fail"] = "skip"
    max_error_rate: float | None = Field(default=None, ge=0.0, le=1.0)


class NotifySection(Section):
    webhook: str | None = None  # the service POSTs a signed message here when the job ends


class JobSpec(Section):
    """A whole job. Only `source`, `model` and `sink` are required."""

    job: JobSection = Field(default_factory=JobSection)
    source: SourceSection
    model: ModelSection
    batch: BatchSection = Field(default_factory=BatchSection)
    run: RunSection = Field(default_factory=RunSection)
    sink: SinkSection
    errors: ErrorsSection = Field(default_factory=ErrorsSection)
    notify: NotifySection = Field(default_factory=NotifySection)
    monitor: MonitorSection = Field(default_factory=MonitorSection)
    publish: PublishSection = Field(default_factory=PublishSection)

    @model_validator(mode="before")
    @classmethod
    def _sink_of_source(cls, data: Any) -> Any:
        return default_sink_format(data)  # a source plug-in may name its sink's format

    @field_validator("sink")
    @classmethod
    def _no_reserved_keep(cls, sink: SinkSection) -> SinkSection:
        clash = sorted({"prediction"} & set(sink.keep_columns))
        if clash:
            raise ValueError(f"keep_columns: {clash[0]!r} would clash with a prediction column")
        return sink

    @model_validator(mode="after")
    def _id_not_in_features(self) -> JobSpec:
        source = self.source
        if source.id_column and source.columns and source.id_column in source.columns:
            raise ValueError(
                f"source.columns: the id column {source.id_column!r} must not be a model input"
            )
        return self

    @model_validator(mode="after")
    def _gate_can_judge(self) -> JobSpec:
        for problem in gate_needs_profile(self.publish, self.monitor.profile):
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _completed_by_plugins(self) -> JobSpec:
        """What the source and sink plug-ins imply, filled in by their own hooks."""
        used = [(Kind.SOURCE, self.source.format), (Kind.SINK, self.sink.format)]
        for complete in completion_hooks(used):
            complete(self)
        return self


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Read a spec file (TOML, YAML or JSON), apply `section.key=value` overrides, validate.

    Raises SpecError listing every problem, each naming its field.
    """
    path = Path(path)
    try:
        raw = _read_mapping(path)
    except (OSError, ValueError) as exc:
        raise SpecError([f"{path}: {exc}"]) from exc
    for item in overrides:
        apply_override(raw, item)
    _resolve_paths(raw, path.parent)
    return parse_spec(raw)


def parse_spec(raw: Mapping[str, Any]) -> JobSpec:
    """Validate a spec given as a mapping; raise SpecError naming each bad field."""
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(describe_errors(exc, JobSpec)) from None


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Apply one `section.key=value` to a raw spec; the value is read as TOML when it can be."""
    key, sep, text = item.partition("=")
    parts = key.strip().split(".")
    if not sep or len(parts) < 2 or not all(parts):
        raise SpecError([f"--set {item}: expected section.key=value"])
    try:
        value: Any = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    node = raw
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise SpecError([f"--set {item}: {part} is not a section"])
        node = child
    node[parts[-1]] = value


def _names_table(section: str, format: Any) -> bool:
    """Whether the section's plug-in reads its uri as a table's name (`Plugin.table_uri`)."""
    if section == "model" or not isinstance(format, str):
        return False
    plugin = lookup(Kind(section), format)
    return plugin is not None and plugin.table_uri


def _read_mapping(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    if suffix == ".toml":
        data: Any = tomllib.loads(text)
    elif suffix in (".yaml", ".yml"):
        import yaml  # here, not at the top: 20 ms of every start, for YAML specs only

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(str(exc)) from exc
    elif suffix == ".json":
        data = json.loads(text)
    else:
        raise ValueError("a job spec must end in .toml, .yaml, .yml or .json")
    if not isinstance(data, dict):
        raise ValueError("a job spec must be a mapping of sections")
    return data


def _resolve_paths(raw: dict[str, Any], base: Path) -> None:
    """Make relative local paths in uri fields relative to the spec file's folder: a
    section's own (unless its plug-in's uri names a table in a catalog), and any `uri`
    or `warehouse` in its plug-in's options (a features source's tables, a catalog)."""
    for section in ("source", "model", "sink"):
        node = raw.get(section)
        if (
            isinstance(node, dict)
            and isinstance(node.get("uri"), str)
            and not _names_table(section, node.get("format"))
        ):
            node["uri"] = resolve_uri(node["uri"], base)
        if isinstance(node, dict) and isinstance(node.get("options"), dict):
            resolve_option_uris(node["options"], base)
    sink = raw.get("sink")
    if isinstance(sink, dict) and isinstance(sink.get("staging"), str):
        sink["staging"] = resolve_uri(sink["staging"], base)
