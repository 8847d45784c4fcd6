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
from string import Template
from typing import Any

import numpy as np

# A tree's reachable leaves are one 64-bit word per row, or a 32-bit one (twice the rows
# per vector) when every tree has at most 32 leaves.
MAX_LEAVES, NARROW_LEAVES = 64, 32

# One kernel per vector width, each compiled for the instructions it needs and chosen
# when the library runs by what the CPU has (x86-64 only: elsewhere the if/else code).
# Lanes match the register: 8 doubles in AVX-512's, 4 in AVX2's; more lanes than the
# register holds measured 3-5x slower.
KERNELS = (("score_avx512", 8, "avx512f,avx512dq"), ("score_avx2", 4, "avx2"))

KERNEL = Template(r"""
typedef double ${name}_values __attribute__((vector_size(${lanes} * 8)));
typedef int64_t ${name}_bits __attribute__((vector_size(${lanes} * 8)));

/* The sums of the trees for rows start .. start + count - 1 (count <= ${lanes}), each
 * row's QS_OUTPUTS sums one after the other. `reachable` holds QS_TREES vectors. */
__attribute__((target("${target}")))
static void ${name}(const double* const* columns, int64_t stride, int64_t start,
                    int64_t count, void* scratch, THRESHER_LEAF* sums) {
  ${name}_bits* reachable = scratch;
  for (int32_t t = 0; t < QS_TREES; ++t) reachable[t] = ~(${name}_bits){0};
  for (int32_t f = 0; f < QS_FEATURES; ++f) {
    if (qs_first[f] == qs_first[f + 1] && qs_missing_first[f] == qs_missing_first[f + 1])
      continue; /* no tree tests this feature */
    ${name}_values x;
    double top = -INFINITY;
    int missing = 0;
    for (int32_t lane = 0; lane < ${lanes}; ++lane) {
      const double value =
          lane < count ? (double)(THRESHER_VALUE)columns[f][(start + lane) * stride] : -INFINITY;
      x[lane] = value;
      missing |= isnan(value);
      top = value > top ? value : top;
    }
    for (int32_t n = qs_first[f]; n < qs_first[f + 1] && top > qs_threshold[n]; ++n)
      reachable[qs_tree[n]] &= ~((x > qs_threshold[n]) & (int64_t)qs_gone[n]);
    if (missing) {
      const ${name}_bits nan = x != x;
      for (int32_t n = qs_missing_first[f]; n < qs_missing_first[f + 1]; ++n)
        reachable[qs_missing_tree[n]] &= ~(nan & (int64_t)qs_missing_gone[n]);
    }
  }
  for (int64_t k = 0; k < count * QS_OUTPUTS; ++k) sums[k] = 0;
  for (int32_t t = 0; t < QS_TREES; ++t) {
    const THRESHER_LEAF* leaf = qs_leaf + qs_leaf_first[t];
    for (int64_t lane = 0; lane < count; ++lane)
      sums[lane * QS_OUTPUTS + qs_output[t]] +=
          leaf[__builtin_ctzll((uint64_t)reachable[t][lane])];
  }
}
""")

# Trees of at most 32 leaves with double leaves (LightGBM's default of 31): 16 rows at a
# time, a 32-bit bit set per row, and the leaves gathered 8 at a time. 1.4x the 8-row
# kernel on the benchmark's model. In AVX-512 intrinsics: 16 doubles fill two registers,
# which the vector extensions above compile badly (more lanes than a register, 3-5x
# slower), and they have no vector count of trailing zeros.
NARROW = r"""
__attribute__((target("avx512f,avx512dq,avx512cd")))
static void score_narrow(const double* const* columns, int64_t stride, int64_t start,
                         int64_t count, void* scratch, double* sums) {
  __m512i* reachable = scratch;
  for (int32_t t = 0; t < QS_TREES; ++t) reachable[t] = _mm512_set1_epi32(-1);
  const __m512d floor = _mm512_set1_pd(-INFINITY);
  for (int32_t f = 0; f < QS_FEATURES; ++f) {
    if (qs_first[f] == qs_first[f + 1] && qs_missing_first[f] == qs_missing_first[f + 1])
      continue; /* no tree tests this feature */
    __m512d low, high; /* rows 0-7, rows 8-15 */
    if (count == 16 && stride == 1 && sizeof(THRESHER_VALUE) == sizeof(double)) {
      low = _mm512_loadu_pd(columns[f] + start);
      high = _mm512_loadu_pd(columns[f] + start + 8);
    } else {
      double lanes[16];
      for (int32_t lane = 0; lane < 16; ++lane)
        lanes[lane] =
            lane < count ? (double)(THRESHER_VALUE)columns[f][(start + lane) * stride] : -INFINITY;
      low = _mm512_loadu_pd(lanes);
      high = _mm512_loadu_pd(lanes + 8);
    }
    const __mmask8 nan_low = _mm512_cmp_pd_mask(low, low, _CMP_UNORD_Q);
    const __mmask8 nan_high = _mm512_cmp_pd_mask(high, high, _CMP_UNORD_Q);
    const __mmask16 nan = (__mmask16)(nan_low | (nan_high << 8));
    const double top = _mm512_reduce_max_pd(_mm512_max_pd(
        _mm512_mask_blend_pd(nan_low, low, floor), _mm512_mask_blend_pd(nan_high, high, floor)));
    for (int32_t n = qs_first[f]; n < qs_first[f + 1] && top > qs_threshold[n]; ++n) {
      const __m512d threshold = _mm512_set1_pd(qs_threshold[n]);
      const __mmask16 above =
          (__mmask16)(_mm512_cmp_pd_mask(low, threshold, _CMP_GT_OQ) |
                      (_mm512_cmp_pd_mask(high, threshold, _CMP_GT_OQ) << 8));
      __m512i* bits = reachable + qs_tree[n];
      *bits = _mm512_mask_andnot_epi32(*bits, above, _mm512_set1_epi32((int32_t)qs_gone[n]), *bits);
    }
    if (nan) {
      for (int32_t n = qs_missing_first[f]; n < qs_missing_first[f + 1]; ++n) {
        __m512i* bits = reachable + qs_missing_tree[n];
        const __m512i gone = _mm512_set1_epi32((int32_t)qs_missing_gone[n]);
        *bits = _mm512_mask_andnot_epi32(*bits, nan, gone, *bits);
      }
    }
  }
  __m512d* totals = (__m512d*)(reachable + QS_TREES); /* two per output: rows 0-7, 8-15 */
  for (int32_t k = 0; k < 2 * QS_OUTPUTS; ++k) totals[k] = _mm512_setzero_pd();
  const __m512i last = _mm512_set1_epi32(31);
  for (int32_t t = 0; t < QS_TREES; ++t) {
    /* the exit leaf, the lowest set bit: 31 - the leading zeros of that bit alone */
    const __m512i bits = reachable[t];
    const __m512i lowest = _mm512_and_si512(bits, _mm512_sub_epi32(_mm512_setzero_si512(), bits));
    const __m512i leaf = _mm512_sub_epi32(last, _mm512_lzcnt_epi32(lowest));
    const double* values = qs_leaf + qs_leaf_first[t];
    __m512d* total = totals + 2 * qs_output[t];
    total[0] = _mm512_add_pd(
        total[0], _mm512_i32gather_pd(_mm512_castsi512_si256(leaf), values, 8));
    total[1] = _mm512_add_pd(
        total[1], _mm512_i32gather_pd(_mm512_extracti64x4_epi64(leaf, 1), values, 8));
  }
  for (int32_t k = 0; k < QS_OUTPUTS; ++k) {
    double lanes[16];
    _mm512_storeu_pd(lanes, totals[2 * k]);
    _mm512_storeu_pd(lanes + 8, totals[2 * k + 1]);
    for (int64_t lane = 0; lane < count; ++lane) sums[lane * QS_OUTPUTS + k] = lanes[lane];
  }
}
"""

# Scores all rows and returns 1, or returns 0 when this CPU has no kernel (the caller then
# runs the if/else code). Base scores and postprocessor as tl2cgen's `predict` applies them.
SCORE = r"""
int32_t thresher_lanes(void) {
#if QS_KERNELS
  __builtin_cpu_init();
  const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  if (QS_NARROW && avx512 && __builtin_cpu_supports("avx512cd")) return 16;
  if (avx512) return 8;
  if (__builtin_cpu_supports("avx2")) return 4;
#endif
  return 0;
}

int thresher_quickscore(const double* const* columns, int64_t stride, int64_t rows,
                        double* out) {
#if QS_KERNELS
  const int32_t lanes = thresher_lanes();
  if (lanes == 0) return 0;
  /* QS_TREES bit-set vectors, and the narrow kernel's two sum vectors per output */
  void* scratch = aligned_alloc(64, 64 * (QS_TREES + 2 * QS_OUTPUTS));
  if (scratch == NULL) return 0;
  THRESHER_LEAF sums[16 * QS_OUTPUTS];
  for (int64_t start = 0; start < rows; start += lanes) {
    const int64_t count = rows - start < lanes ? rows - start : lanes;
#if QS_NARROW
    if (lanes == 16) {
      score_narrow(columns, stride, start, count, scratch, (double*)sums);
    } else
#endif
    if (lanes == 8) {
      score_avx512(columns, stride, start, count, scratch, sums);
    } else {
      score_avx2(columns, stride, start, count, scratch, sums);
    }
    for (int64_t row = 0; row < count; ++row) {
      THRESHER_LEAF* result = sums + row * QS_OUTPUTS;
      for (int32_t k = 0; k < QS_OUTPUTS; ++k) result[k] += qs_base[k];
      postprocess(result);
      for (int32_t k = 0; k < QS_OUTPUTS; ++k)
        out[(start + row) * QS_OUTPUTS + k] = (double)result[k];
    }
  }
  free(scratch);
  return 1;
#else
  (void)columns, (void)stride, (void)rows, (void)out;
  return 0;
#endif
}
"""

# What a model this form cannot hold compiles to: no kernel, the if/else code scores.
NONE = r"""
#include "header.h"

int32_t thresher_lanes(void) { return 0; }

int thresher_quickscore(const double* const* columns, int64_t stride, int64_t rows,
                        double* out) {
  (void)columns, (void)stride, (void)rows, (void)out;
  return 0;
}
"""


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
    nodes: list[list[tuple[float, int, int]]] = [[] for _ in range(model.features)]
    missing: list[list[tuple[int, int]]] = [[] for _ in range(model.features)]
    leaves: list[float] = []
    leaf_first: list[int] = []
    for index, tree in enumerate(model.trees):
        leaf_first.append(len(leaves))
        for node, first, last in _tests_with_left_leaves(tree, leaves):
            gone = (1 << (last + 1)) - (1 << first)  # the leaves of its left subtree
            feature = int(tree.feature[node])
            threshold = _right_above(
                float(tree.threshold[node]), int(tree.operator[node]), model.float32
            )
            nodes[feature].append((threshold, index, gone))
            if not tree.default_left[node]:
                missing[feature].append((index, gone))
    for tests in nodes:
        tests.sort(key=lambda test: test[0])
    most_leaves = max(np.diff([*leaf_first, len(leaves)]))
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
        _array("double", "qs_threshold", [_hex(t) for tests in nodes for t, _, _ in tests]),
        _array("int32_t", "qs_tree", [str(tree) for tests in nodes for _, tree, _ in tests]),
        _array("uint64_t", "qs_gone", [f"{gone:#x}ULL" for tests in nodes for *_, gone in tests]),
        _array("int32_t", "qs_first", _offsets(nodes)),
        _array("int32_t", "qs_missing_tree", [str(tree) for tests in missing for tree, _ in tests]),
        _array(
            "uint64_t", "qs_missing_gone", [f"{g:#x}ULL" for tests in missing for _, g in tests]
        ),
        _array("int32_t", "qs_missing_first", _offsets(missing)),
        _array("THRESHER_LEAF", "qs_leaf", [_hex(value) for value in leaves]),
        _array("int32_t", "qs_leaf_first", [str(first) for first in leaf_first]),
        _array("int32_t", "qs_output", [str(output) for output in model.outputs]),
        _array("double", "qs_base", [_hex(base) for base in model.base_scores]),
        "#if QS_KERNELS",
        *kernels,
        "#endif",
        "#if QS_KERNELS && QS_NARROW",
        NARROW,
        "#endif",
        SCORE,
    ]
    return "\n".join(lines)


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
