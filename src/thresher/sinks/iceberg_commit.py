"""One Iceberg commit of Parquet parts: the snapshot a job (or a retried shard) makes.

`commit_parts` makes the parts the table's data files and commits them in one snapshot.
An unpartitioned table takes the Parquet parts as they are (`register = True`: their
footers read for the manifests' statistics, the columns found by name through the
table's name mapping, as pyiceberg's `add_files` does), which costs no rewrite of the
job's rows at its end; a partitioned table, or parts whose types Iceberg cannot take as
written (nanosecond timestamps), gets them rewritten by pyiceberg's writer (the table's
field ids, its partition spec, its file sizes). Either way the snapshot appends the
rows to the table's, or replaces them (`overwrite`: every live data file removed in the
same snapshot, and the table's schema made the rows' own), or merges them in (`merge_on`:
the table's rows whose key the parts hold deleted first, in the same commit, by pyiceberg's
copy-on-write delete: a data file holding none of those keys is kept as it is, the others
are rewritten without those rows). A table that does not exist
yet is created in the same commit, at the location the sink chose, partitioned by
identity on `partition_by`: readers never see a table without its rows.

One snapshot, not the two pyiceberg's `Table.overwrite` makes (a delete, then an append):
its summary carries the commit's identity (`thresher.commit`), which is what makes a
commit redone after a crash find itself and write nothing. pyiceberg's public `append`
and `overwrite` make a snapshot each call, so this module drives its snapshot producer
with its writer (`_dataframe_to_data_files`), as those methods do inside.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from thresher.errors import SinkError
from thresher.sinks.modes import read_keys
from thresher.sources.files import filesystem

COMMIT_KEY = "thresher.commit"  # a snapshot summary property: the commit's identity
# Parts are written in groups of about this many bytes in memory: few, large data files
# (as Iceberg readers want) from many small shards, and memory bounded by one group.
GROUP_BYTES = 128 * 1024 * 1024


def find_snapshot(table: Any, commit_id: str) -> int | None:
    """The id of the table's snapshot whose summary names `commit_id`; None if none."""
    for snapshot in reversed(table.snapshots()):
        if snapshot.summary is not None and snapshot.summary[COMMIT_KEY] == commit_id:
            return int(snapshot.snapshot_id)
    return None


def commit_parts(
    catalog: Any,
    identifier: str,
    *,
    location: str,
    parts: Sequence[str],
    overwrite: bool,
    properties: dict[str, str],
    partition_by: Sequence[str] = (),
    register: bool = False,
    merge_on: str | None = None,
) -> bool:
    """One snapshot of `parts` (Parquet URLs), its summary `properties`; nothing when the
    table does not exist and there are no rows to make it of. With `register`, the parts
    become data files as they are where the table allows it; returns whether they did
    (else their rows were written anew, and the parts may go). With `merge_on`, the rows
    replace the table's of the same key (one commit: a delete, then the append, each
    snapshot's summary `properties`)."""
    from pyiceberg.exceptions import NoSuchTableError

    schema = _parts_schema(parts)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        table = None
    if table is None and schema is None:
        return False
    try:
        if table is None:
            assert schema is not None
            txn = catalog.create_table_transaction(identifier, schema=schema, location=location)
            _partition(txn, partition_by, schema)
        else:
            txn = table.transaction()
            if overwrite and schema is not None:
                _take_schema(txn, schema)
            elif schema is not None:
                _check_fits(txn, schema)
                if merge_on is not None:
                    _delete_keys(txn, parts, merge_on, properties)
        registered = _registered(txn, parts) if register and not partition_by else None
        _snapshot(txn, parts, overwrite and table is not None, properties, registered)
        txn.commit_transaction()
        return registered is not None
    except SinkError:
        raise
    except Exception as exc:  # pyiceberg's: a schema that does not fit, I/O, a conflict
        raise SinkError(
            f"sink.uri: cannot commit to the Iceberg table {identifier}: {exc}"
        ) from exc


def _parts_schema(parts: Sequence[str]) -> pa.Schema | None:
    if not parts:
        return None
    fs, path = filesystem(parts[0])
    with fs.open(path, "rb") as f:
        return pq.ParquetFile(f).schema_arrow


def _partition(txn: Any, partition_by: Sequence[str], schema: pa.Schema) -> None:
    """A new table's identity partitions, in the transaction that creates it."""
    missing = [c for c in partition_by if c not in schema.names]
    if missing:
        raise SinkError(
            f"sink.options.partition_by: {', '.join(missing)} is not an output column (the"
            f" output's: {', '.join(schema.names)}); add it to sink.keep_columns"
        )
    if partition_by:
        with txn.update_spec() as update:
            for column in partition_by:
                update.add_identity(column)


def _take_schema(txn: Any, schema: pa.Schema) -> None:
    """Overwrite: the table's columns become the rows' (new ones added, wider types
    taken, the ones the rows lack dropped), as a Delta overwrite replaces its schema."""
    current = txn.table_metadata.schema()
    with txn.update_schema() as update:
        update.union_by_name(schema)
        for name in (f.name for f in current.fields):
            if name not in schema.names:
                update.delete_column(name)


def _check_fits(txn: Any, schema: pa.Schema) -> None:
    """Append: the rows must fit the table's columns as they are."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible

    try:
        _check_pyarrow_schema_compatible(txn.table_metadata.schema(), provided_schema=schema)
    except ValueError as exc:
        raise SinkError(
            f"sink.uri: the job's rows do not fit the table's columns (append adds rows, it"
            f" does not change a table's schema; overwrite does): {exc}"
        ) from None


def _delete_keys(txn: Any, parts: Sequence[str], key: str, properties: dict[str, str]) -> None:
    """The table's rows whose `key` the parts hold, deleted in the transaction (only the
    parts' key column is read; pyiceberg's delete rewrites just the files that hold one).
    The keys' range goes with them: past 200 keys pyiceberg's file statistics judge an
    `In` as "might match" and every data file would be read; the range still skips the
    files whose keys lie outside it."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, In, LessThanOrEqual

    if not parts:
        return
    fs, _ = filesystem(parts[0])  # the parts lie together
    keys = read_keys([filesystem(part)[1] for part in parts], fs, key).drop_null().unique()
    if not len(keys):
        return
    low, high = (v.as_py() for v in pc.min_max(keys).values())
    # pyiceberg's predicates take (term, literal...) in __init__/__new__; mypy reads their
    # pydantic fields instead
    among = In(key, keys.to_pylist())  # type: ignore[call-arg, arg-type]
    above = GreaterThanOrEqual(key, low)  # type: ignore[call-arg, arg-type]
    below = LessThanOrEqual(key, high)  # type: ignore[call-arg, arg-type]
    matching = And(above, below, among)
    with warnings.catch_warnings():  # "did not match any records": every key is new
        warnings.simplefilter("ignore")
        txn.delete(matching, snapshot_properties=properties)


def _registered(txn: Any, parts: Sequence[str]) -> list[Any] | None:
    """The parts as the table's data files, as they are; None when their types are not
    ones Iceberg takes as written (they are rewritten then)."""
    from pyiceberg.io.pyarrow import parquet_files_to_data_files
    from pyiceberg.table import TableProperties

    try:
        files = list(parquet_files_to_data_files(txn._table.io, txn.table_metadata, iter(parts)))
    except (ValueError, TypeError, NotImplementedError):
        return None
    if txn.table_metadata.name_mapping() is None:  # how readers find the parts' columns
        mapping = txn.table_metadata.schema().name_mapping.model_dump_json()
        txn.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING: mapping})
    return files


def _snapshot(
    txn: Any,
    parts: Sequence[str],
    replace: bool,
    properties: dict[str, str],
    registered: list[Any] | None = None,
) -> None:
    """The snapshot: every live data file removed if `replace`, the parts' rows added
    (`registered`: the parts themselves, else written anew)."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    update = txn.update_snapshot(snapshot_properties=properties)
    io = txn._table.io  # the table's own file access (a REST catalog's vended credentials)
    with update.overwrite() if replace else update.fast_append() as producer:
        if replace:
            for data_file in _live_files(txn.table_metadata, io):
                producer.delete_data_file(data_file)
        if registered is not None:
            for data_file in registered:
                producer.append_data_file(data_file)
            return
        counter = itertools.count(0)
        for rows in _groups(parts):
            for data_file in _dataframe_to_data_files(
                table_metadata=txn.table_metadata,
                df=rows,
                io=io,
                write_uuid=producer.commit_uuid,
                counter=counter,
            ):
                producer.append_data_file(data_file)


def _live_files(metadata: Any, io: Any) -> Iterator[Any]:
    """The data files of the table's current snapshot."""
    from pyiceberg.manifest import DataFileContent

    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return
    for manifest in snapshot.manifests(io):
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            if entry.data_file.content == DataFileContent.DATA:
                yield entry.data_file


def _groups(parts: Sequence[str]) -> Iterator[pa.Table]:
    """The parts' rows as tables of about GROUP_BYTES each."""
    group: list[pa.Table] = []
    size = 0
    for part in parts:
        fs, path = filesystem(part)
        with fs.open(path, "rb") as f:
            rows = pq.ParquetFile(f).read()
        group.append(rows)
        size += rows.nbytes
        if size >= GROUP_BYTES:
            yield pa.concat_tables(group, promote_options="permissive")
            group, size = [], 0
    if group:
        yield pa.concat_tables(group, promote_options="permissive")
