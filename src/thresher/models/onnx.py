"""ONNX graphs on onnxruntime: safe to load (a graph holds no code), fast on CPU and GPU.

Inputs: a graph with one input gets the whole feature matrix, in the dtype the input
declares. A graph with several inputs (skl2onnx pipelines over named columns) gets each
feature column as an `(rows, 1)` array, matched by name.

Outputs: the first graph output is `prediction`. A classifier's probability output
(named `probabilities` / `output_probability` by skl2onnx, or any ZipMap output)
becomes `proba_<class>` columns when `proba` is in `model.outputs` and is not computed
otherwise. A probability tensor does not carry its class labels, so its columns are
`proba_0`, `proba_1`, … unless `model.options.classes` lists the labels; a ZipMap output
names them itself. Every other output becomes a column named after it.

Options: `device = "cpu"` keeps a CUDA build on the CPU; `device = "cuda"` requires CUDA.
`spinning = true` lets intra-op threads spin while they wait for the next batch: on a
machine of the job's own that saves a little per batch; on one whose cores are shared
(with the worker's reader and writer threads, with other workers) the spinning
takes their cores, so by default the threads sleep (benchmarks/results/onnx-spinning.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.arrays import to_matrix
from thresher.errors import ModelLoadError, ModelOutputError
from thresher.models.base import Column, LoadContext, Model
from thresher.models.images import image_options, tensor_model
from thresher.models.outputs import as_column, proba_columns, proba_names, safe_name
from thresher.spec import ModelSection

INPUT_DTYPES: dict[str, type] = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
    "tensor(string)": np.object_,
}
PROBA_OUTPUT_NAMES = frozenset({"probabilities", "output_probability", "probability"})


@dataclass(frozen=True)
class Feed:
    """One graph input: fed the whole feature matrix (`column` None) or one column."""

    input: str
    column: str | None
    dtype: type


@dataclass(frozen=True)
class Fetch:
    """One graph output that is run, and the column (or `proba_*` columns) it becomes."""

    output: str
    column: str
    is_proba: bool = False


def load_onnx(spec: ModelSection, context: LoadContext) -> Model:
    """Open an InferenceSession on `spec.uri` using `context.threads` threads.

    Raises ModelLoadError when the file is missing, the graph's inputs cannot be fed
    from the job's features, or `proba` is asked of a graph with no probability output.
    """
    import onnxruntime as ort

    if not Path(spec.uri).is_file():
        raise ModelLoadError(f"model.uri: {spec.uri} is not a file; point it at a .onnx file")
    options = ort.SessionOptions()
    options.intra_op_num_threads = context.threads
    # Batches arrive one at a time, so parallel branches would only steal the cores that
    # intra-op threads (and the other workers) already use.
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    spinning = bool(spec.options.get("spinning", False))
    options.add_session_config_entry("session.intra_op.allow_spinning", str(int(spinning)))
    providers = _providers(ort.get_available_providers(), spec.options.get("device"))
    session = ort.InferenceSession(spec.uri, sess_options=options, providers=providers)
    image = image_options(spec.options)
    if image is not None:
        column = spec.options.get("image_column")
        return tensor_model(session_runner(session), image, context.threads, column)
    feeds = plan_feeds(session.get_inputs(), context.features)
    fetches = plan_fetches(session.get_outputs(), spec.outputs)
    classes = spec.options.get("classes")
    return OnnxModel(session, feeds, fetches, list(classes) if classes is not None else None)


def session_runner(session: Any) -> Callable[[np.ndarray], Any]:
    """A one-input graph as a function of a float32 batch: its first output, or every
    output by name when it has several."""
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if len(inputs) != 1:
        names = [node.name for node in inputs]
        raise ModelLoadError(f"model.uri: an image model takes one input; the graph has {names}")
    name = inputs[0].name

    def run(batch: np.ndarray) -> Any:
        results = session.run(None, {name: batch})
        if len(results) == 1:
            return results[0]
        return {safe_name(node.name): value for node, value in zip(outputs, results, strict=True)}

    return run


class OnnxModel:
    """A loaded session; `predict` turns each Arrow batch into its output columns."""

    def __init__(
        self, session: Any, feeds: list[Feed], fetches: list[Fetch], classes: list[Any] | None
    ) -> None:
        self._session = session
        self._feeds = feeds
        self._fetches = fetches
        self._output_names = [fetch.output for fetch in fetches]
        self._classes = classes

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """Output columns for one batch of feature rows."""
        inputs = {
            feed.input: to_matrix(
                batch if feed.column is None else batch.select([feed.column]), feed.dtype
            )
            for feed in self._feeds
        }
        results = self._session.run(self._output_names, inputs)
        columns: dict[str, Column] = {}
        for fetch, value in zip(self._fetches, results, strict=True):
            if fetch.is_proba:
                columns.update(self._proba(value))
            else:
                columns[fetch.column] = as_column(value, fetch.output)
        return columns

    def _proba(self, value: Any) -> dict[str, np.ndarray]:
        if isinstance(value, list):  # ZipMap: one {class: probability} dict per row
            labels = list(value[0]) if value else list(self._classes or [])
            matrix = np.array([[row[label] for label in labels] for row in value], dtype=np.float32)
            return proba_columns(proba_names(labels), matrix.reshape(len(value), len(labels)))
        matrix = np.asarray(value)
        labels = self._classes if self._classes is not None else list(range(matrix.shape[-1]))
        if matrix.ndim != 2 or matrix.shape[1] != len(labels):
            raise ModelOutputError(
                f"the probability output has shape {matrix.shape}, but model.options.classes"
                f" names {len(labels)} classes"
            )
        return proba_columns(proba_names(labels), matrix)


def plan_feeds(inputs: Sequence[Any], features: Sequence[str]) -> list[Feed]:
    """How each graph input (onnxruntime NodeArg) is fed from the feature columns."""
    dtypes = [_input_dtype(node) for node in inputs]
    if len(inputs) == 1:
        node = inputs[0]
        width = node.shape[-1] if len(node.shape) == 2 else None
        if features and isinstance(width, int) and width != len(features):
            raise ModelLoadError(
                f"source.columns: the graph input {node.name!r} takes {width} features, but"
                f" the job gives it {len(features)} ({', '.join(features)})"
            )
        return [Feed(node.name, None, dtypes[0])]
    names = [node.name for node in inputs]
    given = set(features)  # a set: a model of 50,000 inputs must not check in n^2
    missing = [name for name in names if name not in given]
    if missing:
        raise ModelLoadError(
            f"source.columns: the graph has inputs {names}, fed one column each by name, but"
            f" the job's features lack {missing}"
        )
    return [Feed(name, name, dtype) for name, dtype in zip(names, dtypes, strict=True)]


def plan_fetches(outputs: Sequence[Any], wanted: Sequence[str]) -> list[Fetch]:
    """Which graph outputs (onnxruntime NodeArgs) to run, and the columns they become."""
    fetches = [Fetch(outputs[0].name, "prediction")] if "prediction" in wanted else []
    proba = [node for node in outputs[1:] if _is_proba(node)]
    if "proba" in wanted:
        if not proba:
            found = ", ".join(node.name for node in outputs)
            raise ModelLoadError(
                f"model.outputs: 'proba' asks for class probabilities, but the graph has no"
                f" probability output (it has {found}); remove 'proba'"
            )
        fetches.append(Fetch(proba[0].name, "proba", is_proba=True))
    skipped = {node.name for node in proba}
    fetches += [
        Fetch(node.name, safe_name(node.name)) for node in outputs[1:] if node.name not in skipped
    ]
    return fetches


def _is_proba(node: Any) -> bool:
    return node.name in PROBA_OUTPUT_NAMES or str(node.type).startswith("seq(map(")


def _input_dtype(node: Any) -> type:
    dtype = INPUT_DTYPES.get(node.type)
    if dtype is None:
        raise ModelLoadError(
            f"model.uri: the graph input {node.name!r} takes {node.type}; thresher feeds"
            f" {', '.join(INPUT_DTYPES)}"
        )
    return dtype


def _providers(available: Sequence[str], device: Any) -> list[str]:
    if device != "cpu" and "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if device == "cuda":
        raise ModelLoadError(
            "model.options.device: 'cuda' needs onnxruntime's CUDA provider, which this"
            " install lacks; install onnxruntime-gpu or set device = 'cpu'"
        )
    return ["CPUExecutionProvider"]
