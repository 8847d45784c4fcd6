"""A forest as LLVM IR: each tree written out as nested if/else branches, in line.

`predict(double* rows, i64 count, double* sums)` reads `count` rows of `features`
doubles each (row-major) and writes each row's sums of the trees, `outputs` doubles a
row, without base scores or postprocessing (`forest.Finish` applies those). Compiled by
LLVM through llvmlite (`engine.py`), in process: no C compiler.

Why this shape, measured on the benchmark's model (benchmarks/results/tree-engine.md):

- The trees are written in line in the row loop, not as functions: a call passing a
  row's features spills them to the stack, and letting LLVM inline 100 trees costs its
  optimiser 15 s where code generation alone takes a few.
- Each tree's blocks are laid out depth first (a node, then its left subtree, then its
  right), which halved the time of treelite's node order: the fall-through path is a
  subtree's first child, as in compiled if/else code.
- A node whose children are both leaves is a `select`, not a branch.
- The trees are run in chunks over all rows (34 at a time, as lleaves does), so a
  chunk's code stays in the instruction cache.

A missing value (NaN) takes each node's default branch: the comparison is ordered
(NaN is false) when the default is left, unordered (NaN is true) when it is right. Float
thresholds (XGBoost) compare the value rounded to float, as XGBoost does. Sums run over
the trees in order in double, as LightGBM adds them.
"""

from __future__ import annotations

import struct

import numpy as np

from thresher.trees.forest import LEAF, Forest, Tree

# treelite's operator -> the comparison that sends a row right, (default left, default right).
RIGHT = {3: ("ogt", "ugt"), 2: ("oge", "uge"), 5: ("olt", "ult"), 4: ("ole", "ule")}
CHUNK = 34


def module(forest: Forest) -> str:
    """The IR text of the forest's `predict` function."""
    outputs = forest.finish.outputs
    lines = [
        "define void @predict(ptr noalias nocapture readonly %xs, i64 %rows,"
        " ptr noalias nocapture %out) nounwind {",
        "entry:",
        "  %empty = icmp sle i64 %rows, 0",
        "  br i1 %empty, label %done, label %loop0",
    ]
    firsts = list(range(0, len(forest.trees), CHUNK))
    for c, first in enumerate(firsts):
        last = min(first + CHUNK, len(forest.trees)) - 1
        following = f"loop{c + 1}" if c + 1 < len(firsts) else "done"
        lines += _chunk(forest, c, range(first, last + 1), following, outputs)
    lines += ["done:", "  ret void", "}", "!0 = !{}"]
    return "\n".join(lines)


def _chunk(forest: Forest, c: int, trees: range, following: str, outputs: int) -> list[str]:
    """One loop over all rows that adds trees `trees` to each row's sums."""
    before = "entry" if c == 0 else f"last{c - 1}"
    kind = "float" if forest.float32 else "double"
    lines = [
        f"loop{c}:",
        f"  %i{c} = phi i64 [0, %{before}], [%next{c}, %last{c}]",
    ]
    values = []
    for j in range(forest.features):
        lines += [
            f"  %p{c}_{j} = getelementptr ptr, ptr %xs, i64 {j}",
            f"  %c{c}_{j} = load ptr, ptr %p{c}_{j}, !invariant.load !0",
            f"  %a{c}_{j} = getelementptr double, ptr %c{c}_{j}, i64 %i{c}",
            f"  %d{c}_{j} = load double, ptr %a{c}_{j}",
        ]
        if forest.float32:
            lines.append(f"  %x{c}_{j} = fptrunc double %d{c}_{j} to float")
        values.append(f"%{'x' if forest.float32 else 'd'}{c}_{j}")
    lines.append(f"  %base{c} = mul i64 %i{c}, {outputs}")
    sums = {}
    for o in range(outputs):
        lines += [
            f"  %q{c}_{o}a = add i64 %base{c}, {o}",
            f"  %q{c}_{o} = getelementptr double, ptr %out, i64 %q{c}_{o}a",
        ]
        if c == 0:
            sums[o] = "0.0"
        else:  # the sums so far, in tree order
            lines.append(f"  %l{c}_{o} = load double, ptr %q{c}_{o}")
            sums[o] = f"%l{c}_{o}"
    for k in trees:
        lines.append(f"  br label %t{k}_n0")
        leaf = _tree(k, forest.trees[k], values, kind, lines)
        lines.append(f"  %s{k} = fadd double {sums[forest.outputs[k]]}, {leaf}")
        sums[forest.outputs[k]] = f"%s{k}"
    lines += [f"  br label %last{c}", f"last{c}:"]
    lines += [f"  store double {sums[o]}, ptr %q{c}_{o}" for o in range(outputs)]
    lines += [
        f"  %next{c} = add i64 %i{c}, 1",
        f"  %more{c} = icmp slt i64 %next{c}, %rows",
        f"  br i1 %more{c}, label %loop{c}, label %{following}",
    ]
    return lines


def _tree(k: int, tree: Tree, values: list[str], kind: str, lines: list[str]) -> str:
    """Append tree `k`'s blocks (entered at t{k}_n0, left from t{k}_end); its leaf's value."""
    if tree.node_type[0] == LEAF:
        lines += [f"t{k}_n0:", f"  br label %t{k}_end", f"t{k}_end:"]
        return _literal(tree.leaf_value[0])
    incoming: list[tuple[str, str]] = []
    for node in _depth_first(tree):
        here = f"t{k}_n{node}"
        left, right = int(tree.left[node]), int(tree.right[node])
        threshold = float(tree.threshold[node])
        if kind == "float":
            threshold = float(np.float32(threshold))
        test = RIGHT[int(tree.operator[node])][0 if tree.default_left[node] else 1]
        feature = values[int(tree.feature[node])]
        lines += [
            f"{here}:",
            f"  %t{k}r{node} = fcmp {test} {kind} {feature}, {_literal(threshold)}",
        ]
        if tree.node_type[left] == LEAF and tree.node_type[right] == LEAF:
            chosen = f"%t{k}s{node}"
            lines.append(
                f"  {chosen} = select i1 %t{k}r{node}, double {_literal(tree.leaf_value[right])},"
                f" double {_literal(tree.leaf_value[left])}"
            )
            lines.append(f"  br label %t{k}_end")
            incoming.append((chosen, here))
            continue
        targets = []
        for child in (right, left):
            if tree.node_type[child] == LEAF:
                targets.append(f"t{k}_end")
                incoming.append((_literal(tree.leaf_value[child]), here))
            else:
                targets.append(f"t{k}_n{child}")
        lines.append(f"  br i1 %t{k}r{node}, label %{targets[0]}, label %{targets[1]}")
    pairs = ", ".join(f"[{value}, %{block}]" for value, block in incoming)
    lines += [f"t{k}_end:", f"  %v{k} = phi double {pairs}"]
    return f"%v{k}"


def _depth_first(tree: Tree) -> list[int]:
    """The tree's test nodes, each before its left subtree and that before its right."""
    order, stack = [], [0]
    while stack:
        node = stack.pop()
        if tree.node_type[node] != LEAF:
            order.append(node)
            stack += [int(tree.right[node]), int(tree.left[node])]
    return order


def _literal(value: float) -> str:
    """An exact IR literal: a double's bits in hexadecimal (infinities included)."""
    return f"0x{struct.unpack('<Q', struct.pack('<d', float(value)))[0]:016X}"
