"""One batch through the model: bad rows isolated, outputs checked, output rows assembled.

A batch whose predict raises is split in halves until each failing row stands alone, so a
single row the model rejects costs about 2·log2(batch) extra calls and the other rows of
its batch still get their predictions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from thresher.arrays import from_numpy
from thresher.errors import ModelOutputError
from thresher.models.base import Column, Model
from thresher.worker.autobatch import BatchTuner


@dataclass
class Predicted:
    """The rows that got predictions (`rows`: their indices in the batch) and those that
    did not (`failed`: index -> (error type, message))."""

    rows: np.ndarray
    columns: dict[str, pa.Array]
    failed: dict[int, tuple[str, str]] = field(default_factory=dict)
    whole: bool = True  # the batch ran in one model call (none split, none failed)


def predict_isolating(
    model: Model, features: pa.Table, model_name: str, tuner: BatchTuner | None = None
) -> Predicted:
    """Predict every row that the model accepts; isolate the ones that make it raise.
    Out of memory splits the batch too (and tells the tuner), but fails no row."""
    calls = _Bisection(model, model_name, tuner)
    calls.run(features, 0)
    segments, failed = calls.segments, calls.failed
    rows = np.concatenate(
        [np.arange(lo, lo + _length(cols), dtype=np.int64) for lo, cols in segments]
        or [np.empty(0, dtype=np.int64)]
    )
    columns = _concat([c for _, c in segments])
    predicted = Predicted(rows, columns, failed, whole=len(segments) == 1 and not failed)
    _flag_non_finite(predicted)
    return predicted


@dataclass
class _Bisection:
    """The model calls for one batch: outputs by offset, and the rows it rejected.

    A class rather than a nested function that calls itself: such a closure is a reference
    cycle, and it kept every batch (its input and outputs) alive until Python's rare full
    collection, hundreds of MiB per worker."""

    model: Model
    model_name: str
    tuner: BatchTuner | None
    segments: list[tuple[int, dict[str, pa.Array]]] = field(default_factory=list)
    failed: dict[int, tuple[str, str]] = field(default_factory=dict)

    def run(self, part: pa.Table, offset: int) -> None:
        if part.num_rows == 0:
            return
        try:
            outputs = self.model.predict(part)
        except Exception as exc:
            out_of_memory = is_out_of_memory(exc)
            if out_of_memory and part.num_rows == 1:
                raise  # not the row's fault: fail the attempt, a retry may have memory
            if out_of_memory and self.tuner is not None:
                self.tuner.back_off(part.num_rows)
            if not out_of_memory and part.num_rows == 1:
                self.failed[offset] = (type(exc).__name__, str(exc) or type(exc).__name__)
                return
            half = part.num_rows // 2
            self.run(part.slice(0, half), offset)
            self.run(part.slice(half), offset + half)
            return
        self.segments.append((offset, check_outputs(outputs, part.num_rows, self.model_name)))


def is_out_of_memory(exc: BaseException) -> bool:
    """MemoryError, or an accelerator's own (torch.cuda.OutOfMemoryError and kin)."""
    return isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"


def check_outputs(outputs: Mapping[str, Column], rows: int, model_name: str) -> dict[str, pa.Array]:
    """Output columns as Arrow arrays, each exactly `rows` long, or a ModelOutputError."""
    if not outputs:
        raise ModelOutputError(f"model {model_name} returned no output columns")
    checked: dict[str, pa.Array] = {}
    for name, values in outputs.items():
        array = _to_arrow(values, name, model_name)
        if len(array) != rows:
            raise ModelOutputError(
                f"model {model_name} returned {len(array)} values for column {name!r} "
                f"but the batch has {rows} rows; predictions must line up with input rows"
            )
        checked[name] = array
    if "prediction" in checked:  # the main output first, whatever order the model used
        checked = {"prediction": checked.pop("prediction"), **checked}
    return checked


def _to_arrow(values: Column, name: str, model_name: str) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    array = np.asarray(values)
    if array.ndim == 2:
        flat = from_numpy(np.ascontiguousarray(array).reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, array.shape[1])
    if array.ndim != 1:
        raise ModelOutputError(f"model {model_name}: column {name!r} has shape {array.shape}")
    return from_numpy(array)


def _flag_non_finite(predicted: Predicted) -> None:
    """A NaN or infinite prediction is a failed row, not silently invalid JSON downstream."""
    bad = np.zeros(len(predicted.rows), dtype=bool)
    culprit: dict[int, str] = {}  # row position -> the first non-finite column
    for name, array in predicted.columns.items():
        values = array.flatten() if pa.types.is_fixed_size_list(array.type) else array
        if not pa.types.is_floating(values.type):
            continue
        checked = pc.is_finite(values)
        if checked.null_count == 0 and checked.false_count == 0:
            continue  # all finite: the usual case, and no conversion to NumPy
        finite = checked.to_numpy(zero_copy_only=False)
        if pa.types.is_fixed_size_list(array.type):
            width = array.type.list_size
            finite = finite.reshape(-1, width).all(axis=1) if width else finite
        for where in np.flatnonzero(~finite & ~bad).tolist():
            culprit[where] = name
        bad |= ~finite
    if not bad.any():
        return
    for where, name in culprit.items():
        predicted.failed[int(predicted.rows[where])] = (
            "NonFinitePrediction",
            f"column {name!r} is NaN or infinite",
        )
    keep = pa.array(~bad)
    predicted.rows = predicted.rows[~bad]
    predicted.columns = {k: v.filter(keep) for k, v in predicted.columns.items()}


def _length(columns: dict[str, pa.Array]) -> int:
    return len(next(iter(columns.values())))


def _concat(segments: list[dict[str, pa.Array]]) -> dict[str, pa.Array]:
    if not segments:
        return {}
    if len(segments) == 1:
        return segments[0]
    return {name: pa.concat_arrays([s[name] for s in segments]) for name in segments[0]}
