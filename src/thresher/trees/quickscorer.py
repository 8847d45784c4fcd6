"""A tree ensemble as QuickScorer tables, scored several rows at a time in vector registers.

tl2cgen's if/else code walks each tree from its root: a LightGBM row of 100 trees of 31
leaves takes ~1,000 branches the CPU cannot predict, and mispredictions are most of its
2 us. QuickScorer (Lucchese et al., SIGIR 2015) reorders the work by feature instead of
by tree. Number each tree's leaves left to right, and give each tree a bit set of the
leaves a row can still reach, all set at first. A test node whose test a row fails (the
row goes right) rules out the leaves of its left subtree: clear their bits. Once every
failed node has cleared its bits, a tree's exit leaf is its lowest set bit. Which nodes
fail is found without branching on trees: a row fails a `value <= threshold` node exactly
when its value is above the threshold, so with each feature's nodes sorted by threshold
the failed ones are a prefix of that feature's list.

Here several rows share a walk, each bit set a vector of one lane per row: a node clears
its bits in the lanes whose value is above its threshold, and a feature's walk stops at
the first threshold no lane is above. With AVX-512, 16 rows at a time in 32-bit lanes for
trees of at most 32 leaves (LightGBM's default), else 8 in 64-bit lanes; with AVX2, 4. On
the benchmark's model (100 trees of 31 leaves) 0.4 us a row, 5x the if/else code; 2x
with AVX2. Without AVX2 there is no gain, and the library scores rows with the if/else
code; so it does for models this
form cannot hold (see `unfit`).

The tables are read from treelite's model through its field accessors (`Ensemble`):
exact arrays, where its JSON dump writes an infinite threshold as nothing.

A missing value (NaN) takes each node's default branch: a row fails the nodes whose
default is right, listed per feature apart from the thresholds.

Outputs are tl2cgen's: the same value type for the comparisons, the trees summed in the
same order in the same type, then the same base scores and postprocessor (tl2cgen's own
`postprocess`, compiled into the same library). Bit for bit for double leaves (LightGBM);
float leaves (XGBoost) are summed from their exact values, where tl2cgen's code adds
shortest decimal forms in double, so sums may differ in the last bit of a float.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from thresher.trees.kernels import KERNEL, KERNELS, NARROW, NONE, SCORE

# A tree's reachable leaves are one 64-bit word per row, or a 32-bit one (twice the rows
# per vector) when every tree has at most 32 leaves.
MAX_LEAVES, NARROW_LEAVES = 64, 32

# treelite's codes (treelite/enum/operator.h, tree_node_type.h, typeinfo.h).
LEAF, NUMERICAL = 0, 1
LESS, LESS_OR_EQUAL = 2, 3
OPERATORS = {0: "none", 1: "==", 2: "<", 3: "<=", 4: ">", 5: ">="}
FLOAT32, FLOAT64 = 2, 3


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
class Ensemble:
    """What the tables are made of: the trees, and how their leaves add up."""

    trees: list[Tree]
    features: int
    float32: bool  # thresholds (and so the compared values) are float32
    outputs: list[int]  # the output each tree adds to: target * classes + class
    base_scores: list[float]
    averaged: bool  # the trees' mean, not their sum (random forests)
    vector_leaves: bool
    double_leaves: bool  # leaf values (and so the sums) are float64


def from_treelite(model: Any) -> Ensemble:
    """The ensemble in a `treelite.Model`."""
    header = model.get_header_accessor()

    def field(name: str) -> np.ndarray:
        return np.array(header.get_field(name))  # a copy: treelite lends its own memory

    classes = int(field("num_class").max())
    trees = []
    for index in range(model.num_tree):
        tree = model.get_tree_accessor(index)
        arrays = {
            name: np.array(tree.get_field(source))  # copies, as above
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
        trees.append(Tree(**arrays))
    targets, klasses = field("target_id"), field("class_id")
    return Ensemble(
        trees=trees,
        features=int(field("num_feature")[0]),
        float32=int(field("threshold_type")[0]) == FLOAT32,
        outputs=[
            int(t) * classes + int(k) if t >= 0 and k >= 0 else -1
            for t, k in zip(targets, klasses, strict=True)
        ],
        base_scores=[float(b) for b in field("base_scores")],
        averaged=bool(field("average_tree_output")[0]),
        vector_leaves=tuple(field("leaf_vector_shape")) != (1, 1),
        double_leaves=int(field("leaf_output_type")[0]) == FLOAT64,
    )


def unfit(model: Ensemble) -> str | None:
    """Why the model cannot be scored as QuickScorer tables, or None."""
    return next(_misfits(model), None)


def _misfits(model: Ensemble) -> Iterator[str]:
    if model.averaged:
        yield "its trees are averaged (a random forest)"
    if model.vector_leaves:
        yield "its leaves hold vectors"
    if not model.trees:
        yield "it has no trees"
    if model.outputs and min(model.outputs) < 0:
        yield "a tree adds to every output"
    for tree in model.trees:
        leaves = int(np.count_nonzero(tree.node_type == LEAF))
        if leaves > MAX_LEAVES:
            yield f"a tree has {leaves} leaves (at most {MAX_LEAVES})"
        tests = tree.node_type != LEAF
        if np.any(tree.node_type[tests] != NUMERICAL):
            yield "it has categorical splits"
        for code in set(tree.operator[tests].tolist()) - {LESS, LESS_OR_EQUAL}:
            yield f"a split compares with {OPERATORS.get(code, code)!r}"


def source(model: Ensemble) -> str:
    """C source of the model's tables and kernels (or of no kernel, if `unfit`), to build
    with tl2cgen's code for the same model: it uses its header and `postprocess`."""
    if unfit(model):
        return NONE
    tables = _Tables.of(model)
    most_leaves = max(np.diff([*tables.leaf_first, len(tables.leaves)]))
    narrow = model.double_leaves and most_leaves <= NARROW_LEAVES
    kernels = (
        KERNEL.substitute(name=name, lanes=lanes, target=target) for name, lanes, target in KERNELS
    )
    lines = [
        "#include <stdint.h>",
        "#include <stdlib.h>",
        "#include <math.h>",
        '#include "header.h"',
        f"#define QS_TREES {len(model.trees)}",
        f"#define QS_FEATURES {model.features}",
        "#define QS_OUTPUTS (N_TARGET * MAX_N_CLASS)",
        "#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))",
        "#define QS_KERNELS 1",
        "#else",
        "#define QS_KERNELS 0",
        "#endif",
        f"#define QS_NARROW {int(narrow)}",
        "#if QS_KERNELS",
        "#include <immintrin.h>",
        "#endif",
        *tables.arrays(model),
        "#if QS_KERNELS",
        *kernels,
        "#endif",
        "#if QS_KERNELS && QS_NARROW",
        NARROW,
        "#endif",
        SCORE,
    ]
    return "\n".join(lines)


@dataclass
class _Tables:
    """The QuickScorer tables of a model: each feature's test nodes sorted by threshold,
    the nodes whose missing value goes right, and every tree's leaves."""

    nodes: list[list[tuple[float, int, int]]]
    missing: list[list[tuple[int, int]]]
    leaves: list[float]
    leaf_first: list[int]

    @classmethod
    def of(cls, model: Ensemble) -> _Tables:
        tables = cls(
            [[] for _ in range(model.features)], [[] for _ in range(model.features)], [], []
        )
        for index, tree in enumerate(model.trees):
            tables.leaf_first.append(len(tables.leaves))
            for node, first, last in _tests_with_left_leaves(tree, tables.leaves):
                gone = (1 << (last + 1)) - (1 << first)  # the leaves of its left subtree
                feature = int(tree.feature[node])
                threshold = _right_above(
                    float(tree.threshold[node]), int(tree.operator[node]), model.float32
                )
                tables.nodes[feature].append((threshold, index, gone))
                if not tree.default_left[node]:
                    tables.missing[feature].append((index, gone))
        for tests in tables.nodes:
            tests.sort(key=lambda test: test[0])
        return tables

    def arrays(self, model: Ensemble) -> list[str]:
        """The tables as C arrays."""
        nodes, missing = self.nodes, self.missing
        return [
            _array("double", "qs_threshold", [_hex(t) for tests in nodes for t, _, _ in tests]),
            _array("int32_t", "qs_tree", [str(tree) for tests in nodes for _, tree, _ in tests]),
            _array("uint64_t", "qs_gone", [f"{g:#x}ULL" for tests in nodes for *_, g in tests]),
            _array("int32_t", "qs_first", _offsets(nodes)),
            _array("int32_t", "qs_missing_tree", [str(t) for tests in missing for t, _ in tests]),
            _array(
                "uint64_t", "qs_missing_gone", [f"{g:#x}ULL" for tests in missing for _, g in tests]
            ),
            _array("int32_t", "qs_missing_first", _offsets(missing)),
            _array("THRESHER_LEAF", "qs_leaf", [_hex(value) for value in self.leaves]),
            _array("int32_t", "qs_leaf_first", [str(first) for first in self.leaf_first]),
            _array("int32_t", "qs_output", [str(output) for output in model.outputs]),
            _array("double", "qs_base", [_hex(base) for base in model.base_scores]),
        ]


def _tests_with_left_leaves(tree: Tree, leaves: list[float]) -> list[tuple[int, int, int]]:
    """The tree's test nodes, each with the first and last number of the leaves of its left
    subtree; appends the tree's leaf values to `leaves`, numbered left to right."""
    span: dict[int, tuple[int, int]] = {}
    preorder, stack, numbered = [], [0], 0
    while stack:  # left before right: leaves come out left to right
        node = stack.pop()
        preorder.append(node)
        if tree.node_type[node] == LEAF:
            span[node] = (numbered, numbered)
            numbered += 1
            leaves.append(float(tree.leaf_value[node]))
        else:
            stack += [int(tree.right[node]), int(tree.left[node])]
    tests = []
    for node in reversed(preorder):  # children before their parents
        if tree.node_type[node] == LEAF:
            continue
        left, right = span[int(tree.left[node])], span[int(tree.right[node])]
        span[node] = (left[0], right[1])
        tests.append((node, *left))
    return tests


def _right_above(threshold: float, operator: int, float32: bool) -> float:
    """The threshold a value must be above to go right: `value <= t` goes left exactly when
    it is not above t; `value < t` exactly when it is not above the number before t in the
    model's value type (the kernel compares values rounded to that type)."""
    if operator == LESS_OR_EQUAL:
        return float(np.float32(threshold)) if float32 else threshold
    if float32:
        return float(np.nextafter(np.float32(threshold), np.float32(-np.inf)))
    return math.nextafter(threshold, -math.inf)


def _offsets(groups: list[list[Any]]) -> list[str]:
    """Where each feature's entries start in the flat table, and one past the last."""
    offsets = [0]
    for group in groups:
        offsets.append(offsets[-1] + len(group))
    return [str(offset) for offset in offsets]


def _hex(value: float) -> str:
    """An exact C literal (hexadecimal float), infinities included."""
    if math.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return value.hex()


def _array(kind: str, name: str, values: list[str]) -> str:
    body = ",".join(values) or "0"  # C has no empty arrays; the count tables say it is empty
    return f"static const {kind} {name}[] = {{{body}}};"
