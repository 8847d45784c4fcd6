"""A tree ensemble as plain arrays, read from treelite's model, and how its sums become outputs.

treelite reads XGBoost and LightGBM files into one form; its field accessors give each
tree's node arrays exactly (its JSON dump writes an infinite threshold as nothing). What
turns the trees' sums into the model's outputs (base scores, averaging, a sigmoid or a
softmax) is kept apart as `Finish`, plain JSON, so a cached compiled forest runs without
treelite or the model's library imported at all.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

Frontend = Literal["lightgbm", "xgboost"]

# treelite's codes (treelite/enum/operator.h, tree_node_type.h, typeinfo.h).
LEAF, NUMERICAL = 0, 1
OPERATORS = {0: "none", 1: "==", 2: "<", 3: "<=", 4: ">", 5: ">="}
FLOAT32 = 2


@dataclass(frozen=True)
class Tree:
    """One tree's node arrays, as treelite keeps them; node 0 is the root."""

    node_type: np.ndarray
    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    operator: np.ndarray
    default_left: np.ndarray
    leaf_value: np.ndarray


@dataclass(frozen=True)
class Finish:
    """How the trees' sums become the model's outputs (treelite's header, as GTIL and
    the libraries apply it): the mean instead of the sum, base scores, a postprocessor."""

    outputs: int
    averaged: bool
    trees_per_output: list[int]
    base_scores: list[float]
    postprocessor: str
    sigmoid_alpha: float
    ratio_c: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def apply(self, sums: np.ndarray) -> np.ndarray:
        """The outputs from `sums` (rows x outputs, changed in place)."""
        if self.averaged:
            sums /= np.maximum(np.asarray(self.trees_per_output, dtype=np.float64), 1.0)
        sums += np.asarray(self.base_scores, dtype=np.float64)
        return _POSTPROCESS[self.postprocessor](sums, self.sigmoid_alpha, self.ratio_c)


def _softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=1, keepdims=True))


# treelite's postprocessors, as GTIL applies them (alpha: sigmoid_alpha, c: ratio_c).
_POSTPROCESS: dict[str, Callable[[np.ndarray, float, float], np.ndarray]] = {
    "identity": lambda x, alpha, c: x,
    "identity_multiclass": lambda x, alpha, c: x,
    "sigmoid": lambda x, alpha, c: np.asarray(1.0 / (1.0 + np.exp(-alpha * x))),
    "multiclass_ova": lambda x, alpha, c: np.asarray(1.0 / (1.0 + np.exp(-alpha * x))),
    "softmax": lambda x, alpha, c: _softmax(x),
    "exponential": lambda x, alpha, c: np.exp(x),
    "exponential_standard_ratio": lambda x, alpha, c: np.exp2(-x / c),
    "logarithm_one_plus_exp": lambda x, alpha, c: np.log1p(np.exp(x)),
    "signed_square": lambda x, alpha, c: np.sign(x) * x * x,
    "hinge": lambda x, alpha, c: (x > 0).astype(np.float64),
}
POSTPROCESSORS = frozenset(_POSTPROCESS)


@dataclass(frozen=True)
class Forest:
    """The trees, the output each adds to, and how their sums are finished."""

    trees: list[Tree]
    features: int
    float32: bool  # thresholds (and so the compared values) are float32
    outputs: list[int]  # the output each tree adds to: target * classes + class
    finish: Finish
    vector_leaves: bool


def from_treelite(model: Any) -> Forest:
    """The forest in a `treelite.Model`."""
    header = model.get_header_accessor()

    def field(name: str) -> np.ndarray:
        return np.array(header.get_field(name))  # a copy: treelite lends its own memory

    classes = int(field("num_class").max())
    trees = [_tree(model.get_tree_accessor(index)) for index in range(model.num_tree)]
    targets, klasses = field("target_id"), field("class_id")
    outputs = [
        int(t) * classes + int(k) if t >= 0 and k >= 0 else -1
        for t, k in zip(targets, klasses, strict=True)
    ]
    width = int(field("num_target")[0]) * classes
    finish = Finish(
        outputs=width,
        averaged=bool(field("average_tree_output")[0]),
        trees_per_output=[outputs.count(o) for o in range(width)],
        base_scores=[float(b) for b in field("base_scores")][:width],
        postprocessor=str(header.get_field("postprocessor")),
        sigmoid_alpha=float(field("sigmoid_alpha")[0]),
        ratio_c=float(field("ratio_c")[0]),
    )
    return Forest(
        trees=trees,
        features=int(field("num_feature")[0]),
        float32=int(field("threshold_type")[0]) == FLOAT32,
        outputs=outputs,
        finish=finish,
        vector_leaves=tuple(field("leaf_vector_shape")) != (1, 1),
    )


def _tree(accessor: Any) -> Tree:
    return Tree(
        **{
            name: np.array(accessor.get_field(source))  # copies, as above
            for name, source in [
                ("node_type", "node_type"),
                ("left", "cleft"),
                ("right", "cright"),
                ("feature", "split_index"),
                ("threshold", "threshold"),
                ("operator", "cmp"),
                ("default_left", "default_left"),
                ("leaf_value", "leaf_value"),
            ]
        }
    )


def unfit(forest: Forest) -> str | None:
    """Why the forest cannot be compiled here, or None."""
    return next(_misfits(forest), None)


def _misfits(forest: Forest) -> Iterator[str]:
    if forest.vector_leaves:
        yield "its leaves hold vectors"
    if not forest.trees:
        yield "it has no trees"
    if forest.outputs and min(forest.outputs) < 0:
        yield "a tree adds to every output"
    if forest.finish.postprocessor not in POSTPROCESSORS:
        yield f"its postprocessor {forest.finish.postprocessor!r} is not known here"
    if len(forest.finish.base_scores) != forest.finish.outputs:
        yield "its base scores do not match its outputs"
    for tree in forest.trees:
        tests = tree.node_type != LEAF
        if np.any(tree.node_type[tests] != NUMERICAL):
            yield "it has categorical splits"
        for code in set(tree.operator[tests].tolist()) - {2, 3, 4, 5}:
            yield f"a split compares with {OPERATORS.get(code, code)!r}"


class ReadError(Exception):
    """treelite cannot read the model file (or is not installed): one line."""


def read(path: Path, frontend: Frontend) -> Forest:
    """The forest in the booster file at `path`, read by treelite."""
    try:
        import treelite
    except ImportError:
        raise ReadError("treelite is not installed (pip install 'thresher[boosters]')") from None
    try:
        with _quiet():
            if frontend == "lightgbm":
                model = treelite.frontend.load_lightgbm_model(str(path))
            else:  # newer files carry fields this treelite does not know: the probe checks
                model = treelite.frontend.load_xgboost_model(str(path), allow_unknown_field=True)
            return from_treelite(model)
    except Exception as exc:  # treelite cannot read the file, say
        raise ReadError(first_line(exc)) from None


def first_line(error: Exception) -> str:
    """The message of a C++ error, without its stack trace and source excerpt."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return next((line for line in lines if "rror" in line), lines[0] if lines else repr(error))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence treelite while it reads: its C++ code logs to file descriptor 2, its
    Python callbacks print and warn. Failures still raise. Only while a model loads,
    before the worker starts any thread that could want the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            os.dup2(devnull.fileno(), 2)
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)
