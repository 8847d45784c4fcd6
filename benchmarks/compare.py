"""Are the systems' outputs the same? Same ids, predictions allclose (embeddings atol 1e-4).

The hand-written optimum is the reference. thresher promises input order, so its ids must
match in order; the peers (Ray Data, Daft, Spark) do not, so their rows are sorted by id
first; the per-row loop covers the first rows only. An embedding is a fixed-size list
(thresher, the baselines, Daft) or a list of equal lengths (Spark writes `array<float>`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

EMBEDDING_ATOL = 1e-4


class OutputMismatch(AssertionError):
    """Two systems disagree on the same input: the benchmark's figures mean nothing."""


def read_output(out: Path, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids, values) from every Parquet file in `out`, in file-name order."""
    files = sorted(out.glob("*.parquet"))
    if not files:
        raise OutputMismatch(f"{out}: no Parquet output")
    table = pq.read_table(files, columns=["id", column])
    ids = table.column("id").to_numpy()
    values = table.column(column).combine_chunks()
    if isinstance(values.type, pa.FixedSizeListType):
        width = values.type.list_size
        return ids, values.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
        lengths = np.unique(pc.list_value_length(values).to_numpy(zero_copy_only=False))
        if len(lengths) > 1:
            raise OutputMismatch(f"{out}: {column} lists of lengths {lengths.tolist()}")
        width = int(lengths[0]) if len(lengths) else 0
        return ids, values.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    return ids, values.to_numpy(zero_copy_only=False)


def check_same(name: str, reference: Path, other: Path, column: str, ordered: bool = True) -> None:
    """Raise OutputMismatch unless `other` holds the reference's rows (or its first rows)."""
    ref_ids, ref_values = read_output(reference, column)
    ids, values = read_output(other, column)
    if not ordered:
        order = np.argsort(ids, kind="stable")
        ids, values = ids[order], values[order]
    if len(ids) < len(ref_ids):  # a sample: the first rows
        ref_ids, ref_values = ref_ids[: len(ids)], ref_values[: len(ids)]
    if not np.array_equal(ids, ref_ids):
        raise OutputMismatch(f"{name}: ids differ from the reference (missing, extra or reordered)")
    if values.shape != ref_values.shape:
        raise OutputMismatch(f"{name}: output shape {values.shape}, expected {ref_values.shape}")
    if np.issubdtype(ref_values.dtype, np.floating):
        atol = EMBEDDING_ATOL if ref_values.ndim == 2 else 1e-8
        close = np.isclose(values, ref_values, rtol=1e-5, atol=atol)
    else:
        close = values == ref_values
    if not close.all():
        bad = np.argwhere(~close)
        row = int(bad[0][0])
        raise OutputMismatch(
            f"{name}: {len(np.unique(bad[:, 0])):,} rows differ from the reference; first at id"
            f" {ids[row]}: {values[row]!r} vs {ref_values[row]!r}"
        )
