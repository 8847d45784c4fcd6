"""An Iceberg table's snapshots in commit order, and what a run of them added.

The snapshots of a table's main branch are the current snapshot and its ancestors (each
names its parent); they are numbered by their sequence number (format v2 and later; a
format v1 table has none, so its snapshots are numbered by their commit time in
milliseconds). A run `first`..`last` is `last` and its ancestors back to `first`.

When every snapshot of a run is an append (its summary's `operation`), the data files it
added are the entries its own manifests hold with status ADDED and its snapshot id: a
manifest written by a snapshot names that snapshot as `added_snapshot_id`, so only those
are read. A run with an overwrite, delete or replace (or whose `first` is no longer in
`last`'s history: expired, or on another branch) did more than add: the whole table at
`last` is read instead, and `why` says so.
"""

from __future__ import annotations

from typing import Any

from thresher.errors import SpecError
from thresher.sources.table_changes import ChangesRead

__all__ = ["main_snapshots", "read_snapshots", "snapshot_number"]


def snapshot_number(metadata: Any, snapshot: Any) -> int:
    """The number that orders `snapshot` among its table's: its sequence number, or its
    commit time (ms) in a format v1 table."""
    if int(metadata.format_version) >= 2:
        return int(snapshot.sequence_number)
    return int(snapshot.timestamp_ms)


def main_snapshots(table: Any, after: int | None = None) -> list[Any]:
    """The snapshots of the table's main branch numbered above `after` (all with None),
    oldest first; none when the table has no snapshot yet."""
    from pyiceberg.table.snapshots import ancestors_of

    found = []
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        if after is not None and snapshot_number(table.metadata, snapshot) <= after:
            break
        found.append(snapshot)
    return found[::-1]


def read_snapshots(table: Any, uri: str, first: int, last: int) -> ChangesRead:
    """The data files snapshots `first`..`last` of `table` added, when all are appends;
    else the whole table at `last`, with why. SpecError when `last` is not a snapshot."""
    from pyiceberg.table.snapshots import ancestors_of

    end = table.snapshot_by_id(last)
    if end is None:
        raise SpecError([f"source.options.snapshots: {uri} has no snapshot {last}"])
    run = []
    for snapshot in ancestors_of(end, table.metadata):
        run.append(snapshot)
        if snapshot.snapshot_id == first:
            break
    else:
        why = f"snapshot {first} is not in snapshot {last}'s history (expired, or another branch)"
        return ChangesRead("snapshot", first, last, None, why)
    run.reverse()
    for snapshot in run:
        operation = _operation(snapshot)
        if operation != "append":
            why = f"snapshot {snapshot.snapshot_id} ({operation}) did more than append"
            return ChangesRead("snapshot", first, last, None, why)
    return ChangesRead("snapshot", first, last, frozenset(_added(table, run)))


def _operation(snapshot: Any) -> str:
    summary = snapshot.summary
    operation = getattr(summary, "operation", None) if summary is not None else None
    return str(getattr(operation, "value", operation) or "no operation recorded")


def _added(table: Any, run: list[Any]) -> set[str]:
    """The data files each snapshot of `run` added, from the manifests it wrote."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus

    added: set[str] = set()
    for snapshot in run:
        for manifest in snapshot.manifests(table.io):
            own = manifest.added_snapshot_id == snapshot.snapshot_id
            if manifest.content != ManifestContent.DATA or not own:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if (
                    entry.status == ManifestEntryStatus.ADDED
                    and entry.snapshot_id == snapshot.snapshot_id
                ):
                    added.add(str(entry.data_file.file_path))
    return added
