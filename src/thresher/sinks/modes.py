"""What `sink.mode = "merge"` asks of a job, for the table sinks that write it (their
plug-in's `completes` hook): rows are matched on an output column, the source's
`id_column` unless `sink.options.merge_on` names another of the columns the output
carries (a `keep_columns` one). Imports no table library, so validating a spec stays
cheap.

    >>> from thresher.spec import parse_spec
    >>> spec = parse_spec({"source": {"uri": "in.parquet", "id_column": "id"},
    ...     "model": {"kind": "python", "uri": "m.py:M"},
    ...     "sink": {"uri": "out/scores", "format": "delta", "mode": "merge"}})
    >>> spec.sink.options["merge_on"]
    'id'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from thresher.errors import SinkError

if TYPE_CHECKING:
    from thresher.spec import JobSpec

__all__ = ["check_unique_keys", "complete_merge_spec", "read_keys"]


def complete_merge_spec(spec: JobSpec) -> None:
    """Fill in `sink.options.merge_on` of a merge job, or raise ValueError naming the
    field that keeps it from merging (no id column, a key the output does not carry)."""
    sink, id_column = spec.sink, spec.source.id_column
    key = sink.options.get("merge_on")
    if sink.mode != "merge":
        if key is not None:
            raise ValueError('sink.options.merge_on: only sink.mode = "merge" uses it')
        return
    if key is None and not id_column:
        raise ValueError(
            'source.id_column: sink.mode = "merge" replaces rows by id; name the id column'
            " (or set sink.options.merge_on to a keep_columns column)"
        )
    key = key or id_column
    if key not in (id_column, *sink.keep_columns):
        raise ValueError(
            f"sink.options.merge_on: {key!r} is not a column the output carries; use"
            " source.id_column or one of sink.keep_columns"
        )
    sink.options["merge_on"] = key


def check_unique_keys(parts: Sequence[str], fs: Any, key: str, shown: str) -> None:
    """Raise SinkError naming a `key` value that more than one row of the Parquet files
    `parts` holds, or rows that have none (only the key column is read): a merge takes
    each key once."""
    import pyarrow.compute as pc

    keys = read_keys(parts, fs, key)
    if keys is None:
        return
    if keys.null_count:
        raise SinkError(
            f"sink.mode: cannot merge into {shown}: {keys.null_count} row(s) have no {key},"
            f" and a merge matches rows by {key}; give every row one"
        )
    counts = pc.value_counts(keys)
    repeated = counts.filter(pc.greater(counts.field("counts"), 1))
    if len(repeated):
        first = repeated[0].as_py()
        raise SinkError(
            f"sink.mode: cannot merge into {shown}: {first['counts']} rows have {key} ="
            f" {first['values']!r} ({len(repeated)} values repeat), and a merge takes each"
            f" {key} once; make {key} unique in the input"
        )


def read_keys(parts: Sequence[str], fs: Any, key: str) -> Any:
    """Column `key` of the Parquet files `parts` (paths in `fs`), only it read, as one
    ChunkedArray; None when there are no parts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = []
    for path in parts:
        with fs.open(path, "rb") as f:
            columns.append(pq.ParquetFile(f).read(columns=[key]).column(key))
    if not columns:
        return None
    return pa.chunked_array([c for column in columns for c in column.chunks], columns[0].type)
