"""What travels between the coordinator and its workers: setup, tasks, results, events.

Everything here is a small frozen dataclass and picklable, so any executor (local
processes, Ray actors) can carry it. Workers never see job state, only these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from thresher.errors import BadInputError, ModelOutputError
from thresher.models.base import LoadContext
from thresher.sinks.base import PartTarget
from thresher.sinks.parts import StagedPart
from thresher.sources.base import Shard, ShardReader
from thresher.spec import BatchSection, ModelSection


@dataclass(frozen=True)
class ProfileSetup:
    """How a worker profiles its shards (`[monitor]`): the share of rows its quantile
    sketches see, the same for every shard of the job, and the segment column."""

    sample_rate: float
    segment_by: str | None = None


@dataclass(frozen=True)
class WorkerSetup:
    """Everything a worker needs before its first shard; sent once per worker."""

    reader: ShardReader
    model: ModelSection
    context: LoadContext
    id_column: str | None
    keep_columns: tuple[str, ...]
    batch: BatchSection
    parts: PartTarget
    on_bad_input: Literal["skip", "fail"]
    profile: ProfileSetup | None = None  # None: `[monitor] profile = false`
    trace: str | None = None  # the job span's traceparent, its shards' spans' parent


@dataclass(frozen=True)
class ShardTask:
    """One attempt at one shard. `attempt` is unique per try and names its staging files."""

    shard: Shard
    attempt: str
    number: int = 1


@dataclass(frozen=True)
class RetryTask:
    """One attempt at a shard's rejected rows in a retry round: `rows` are the rows to
    predict again, each as (line (text) or row (Parquet) number, place among its line's
    rows: 0 but for a reader with `ManyRowsPerLine`), `kept` the shard's other bad
    records (JSON lines), which go into its new error part as they were."""

    shard: Shard
    attempt: str
    number: int
    rows: frozenset[tuple[int, int]]
    kept: tuple[str, ...] = ()


Task = ShardTask | RetryTask


@dataclass(frozen=True)
class ShardResult:
    """A finished attempt: its staged output and error parts, and its counts."""

    shard: int
    attempt: str
    part: StagedPart
    errors: StagedPart
    rows_in: int
    rows_out: int
    rows_error: int
    seconds: float
    batch_size: int = 0  # the model batch size the worker ended the shard with
    native: bool | None = None  # the model ran its native path (None: it has no choice)
    profile: str | None = None  # the shard's profile (JSON), committed with it


# Errors a retry cannot fix: the same input or model fails the same way on any worker.
NOT_RETRYABLE = (BadInputError, ModelOutputError)


# Events, worker -> coordinator.


@dataclass(frozen=True)
class Progress:
    shard: int
    rows: int


@dataclass(frozen=True)
class ShardDone:
    result: ShardResult


@dataclass(frozen=True)
class ShardFailed:
    """An attempt failed. `retry` is False when trying again cannot help (bad input with
    `on_bad_input = "fail"`, a model that returns the wrong number of rows)."""

    task: Task
    error: str
    message: str
    retry: bool


@dataclass(frozen=True)
class WorkerBroken:
    """A worker could not start (the model does not load): the job cannot go on."""

    error: str
    message: str


Event = Progress | ShardDone | ShardFailed | WorkerBroken
