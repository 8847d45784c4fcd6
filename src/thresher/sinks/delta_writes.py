"""One Delta commit of a stream of rows, in one of the sink's three modes, carrying the
`txn` action of an application id and thresher's metadata (`sinks/delta.py` says which
ids and when).

`merge` is deltalake's own MERGE (`when_matched_update_all` +
`when_not_matched_insert_all`): a row whose key the table holds replaces that row,
any other is added, in one commit, so readers see the table before or after it, never
between. The rows merged must not repeat a key: Delta refuses two rows updating one
target row, but would insert both of two new ones; `modes.check_unique_keys` says which
key repeats before anything is committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from thresher.errors import SinkError

__all__ = ["TableWrite", "parquet_reader"]

READ_BATCH_ROWS = 65_536


@dataclass(frozen=True)
class TableWrite:
    """How rows go into the table at `root`: `mode` ("append", "overwrite": content and
    schema replaced, "merge": upsert on column `merge_on`), new tables partitioned by
    `partition_by`; `shown` is the table as the spec names it, for errors."""

    root: str
    mode: str
    shown: str
    merge_on: str | None = None
    partition_by: tuple[str, ...] = ()

    def commit(self, data: pa.RecordBatchReader, app_id: str, meta: dict[str, str]) -> None:
        """One Delta commit of `data`, carrying the `txn` action of `app_id` and `meta`."""
        properties = CommitProperties(
            custom_metadata=meta, app_transactions=[Transaction(app_id, 1)]
        )
        options: dict[str, Any] = {
            "partition_by": list(self.partition_by) or None,
            "commit_properties": properties,
        }
        try:
            if self.mode == "merge" and DeltaTable.is_deltatable(self.root):
                self._merge(data, properties)
            elif self.mode == "overwrite":
                write_deltalake(
                    self.root, data, mode="overwrite", schema_mode="overwrite", **options
                )
            else:  # append, or the first merge into a table not made yet
                write_deltalake(self.root, data, mode="append", **options)
        except Exception as exc:  # deltalake's errors: a schema that does not match, I/O
            raise SinkError(f"sink.uri: cannot write the Delta table {self.shown}: {exc}") from exc

    def _merge(self, data: pa.RecordBatchReader, properties: CommitProperties) -> None:
        assert self.merge_on is not None
        key = '"' + self.merge_on.replace('"', '""') + '"'  # a SQL identifier, any name
        (
            DeltaTable(self.root)
            .merge(
                data,
                predicate=f"target.{key} = source.{key}",
                source_alias="source",
                target_alias="target",
                commit_properties=properties,
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )


def parquet_reader(
    files: list[pq.ParquetFile], schema: pa.Schema | None = None
) -> pa.RecordBatchReader | None:
    """The parts' rows as one stream, never all in memory; None if there are no parts and
    no schema to write an empty table with."""
    if files:
        schema = files[0].schema_arrow
    if schema is None:
        return None
    batches = (b for f in files for b in f.iter_batches(batch_size=READ_BATCH_ROWS))
    return pa.RecordBatchReader.from_batches(schema, batches)
