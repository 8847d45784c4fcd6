"""The model contract: load once per worker, then predict batch after batch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

import numpy as np
import pyarrow as pa

from thresher.records import Stage
from thresher.spec import ModelSection

Column: TypeAlias = np.ndarray | pa.Array | pa.ChunkedArray


class Model(Protocol):
    """A loaded model. `predict` gets only the feature columns, in the spec's order, and
    returns named output columns with exactly one value per input row."""

    def predict(self, batch: pa.Table) -> Mapping[str, Column]: ...


@runtime_checkable
class SortsByLength(Protocol):
    """Optional: a model whose cost grows with each row's length (text models pad every
    row of a batch to its longest one).

    `sort_key` returns one number per row, its length in the model's own units (tokens
    for a text model). The engine may order a shard's rows by it before slicing batches,
    so each batch holds rows of similar length and pads little, and puts the outputs
    back in input order. A Model without it is run in input order. Under
    `batch.size = "auto"`, batches are then cut by a budget of padded tokens (rows times
    the longest), which the worker tunes; a model with `batches_itself = True` (an LLM
    engine that packs rows by its own token budget) is handed rows instead.

        >>> isinstance(model, SortsByLength) and model.sort_key(batch)  # doctest: +SKIP
        array([ 7, 31, 12])
    """

    def sort_key(self, batch: pa.Table) -> np.ndarray: ...


# A chunk's rows that `prepare` could not use: row -> (stage, error type, message).
Failures: TypeAlias = dict[int, tuple[Stage, str, str]]


@runtime_checkable
class PreparesRows(Protocol):
    """Optional: a model whose inputs need work before batching that is no part of the
    model call (images decoded, resized and normalised: media/). The worker calls
    `prepare` on each chunk as it is read, on the reading thread, a chunk ahead of the
    model, with the chunk's whole table; it returns the table with the inputs prepared,
    less the rows that failed, and why each failed. A failed row is one bad record with
    its stage (`decode`, `preprocess`); the others go on to `predict`."""

    def prepare(self, table: pa.Table) -> tuple[pa.Table, Failures]: ...


@runtime_checkable
class RunsNative(Protocol):
    """Optional: a model with a fast native path and a slower one to fall back on (tree
    models compiled by LLVM, or run by their library's own predict). `native` says which
    one this load runs; the job's manifest records it (`"native"`), and the slower path is
    announced once at WARNING when the model loads."""

    native: bool


def runs_native(model: Model) -> bool | None:
    """Whether `model` runs its native path; None when it has no such choice."""
    return model.native if isinstance(model, RunsNative) else None


class ModelLoader(Protocol):
    """What a `kind` names: turns the `[model]` section into a loaded Model."""

    def __call__(self, spec: ModelSection, context: LoadContext) -> Model: ...


@dataclass(frozen=True)
class LoadContext:
    """What a loader may need besides its section: the feature names and its thread budget."""

    features: tuple[str, ...]
    threads: int = 1
