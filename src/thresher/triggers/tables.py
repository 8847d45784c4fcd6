"""Table triggers: a trigger whose `watch` is a lakehouse table (`table = "delta"` or
`"iceberg"`) takes the table's new versions, not files, and starts a job reading what
they added; one on Kafka topics (`table = "kafka"`, kafka_watch.py) takes the messages
that gathered, as a continuous consumer.

A table's versions are told apart by a `TableWatch` (a Protocol, one per table format:
Delta's versions, Iceberg's snapshots; another joins by adding itself to `WATCHES`). At
each look the versions after the newest one taken form one run, `first`..`last`, taken
as a set in the trigger ledger like a set of files, one manifest row per version (path:
the table, size: the version's number, version: its id, role "version"), so each version
is in one set, ever, across restarts and servers on one store. The run's job is the
trigger's `job` reading the table with the source options the watch gives
(`versions = [first, last]` for Delta: only the rows those versions appended, or the
whole table at `last` when one of them rewrote files; the job's log and manifest say so;
`snapshots = [first_id, last_id]` for Iceberg, the same with appends).

An Iceberg trigger's `watch` is the table's name, `namespace.table`, in the catalog its
`job.source.options.catalog` gives (as the job reads it); its versions are the snapshots
of the table's main branch in commit order (number: the sequence number; id: the
snapshot id).

    >>> run = VersionRun("/lake/t", (TableVersion(3, "3"), TableVersion(4, "4")))
    >>> DeltaWatch().source_options(run)
    {'versions': [3, 4]}
    >>> run = VersionRun("db.t", (TableVersion(1, "8123"), TableVersion(2, "905")))
    >>> IcebergWatch().source_options(run)
    {'snapshots': [8123, 905]}
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

from thresher.triggers.kafka_watch import KafkaWatch
from thresher.triggers.settings import TriggerFields
from thresher.triggers.versions import TableVersion, VersionRun

__all__ = [
    "WATCHES",
    "DeltaWatch",
    "IcebergWatch",
    "TableVersion",
    "TableWatch",
    "VersionRun",
    "new_run",
    "source_options",
    "table_job_body",
]

# The most versions one set takes: a trigger made on a table with a long history starts
# that many versions a job, not one job over every commit at once.
MAX_RUN = 1000


class TableWatch(Protocol):
    """How a trigger sees one table format's versions."""

    format: str  # the source format its jobs read the table with
    pins: tuple[str, ...]  # the source options that pin what is read: the trigger's
    is_path: bool  # whether `watch` is a path or URL (else a name in a catalog)
    example: TableVersion  # a version as this watch makes them, to check a job with

    def versions_after(
        self, table: str, after: TableVersion | None, options: Mapping[str, Any]
    ) -> list[TableVersion]:
        """The table's versions numbered above `after` (the newest one taken; all with
        None), oldest first; none when there is no table there yet. `options`: the job's
        `source.options` (where the table's catalog is)."""
        ...

    def source_options(self, run: VersionRun) -> dict[str, Any]:
        """`source.options` of the job reading what `run` added."""
        ...


class DeltaWatch:
    """A Delta table's versions: 0, 1, 2, … (deltalake, imported when a table is looked
    at: it is the `delta` extra)."""

    format = "delta"
    pins: tuple[str, ...] = ("version", "versions", "timestamp")
    is_path: bool = True
    example = TableVersion(0, "0")

    def versions_after(
        self, table: str, after: TableVersion | None, options: Mapping[str, Any]
    ) -> list[TableVersion]:
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(table):
            return []
        latest = DeltaTable(table).version()
        start = 0 if after is None else after.number + 1
        return [TableVersion(n, str(n)) for n in range(start, latest + 1)]

    def source_options(self, run: VersionRun) -> dict[str, Any]:
        return {"versions": [run.versions[0].number, run.versions[-1].number]}


class IcebergWatch:
    """An Iceberg table's snapshots on its main branch (pyiceberg, imported when a table
    is looked at: the `iceberg` extra)."""

    format = "iceberg"
    pins: tuple[str, ...] = ("snapshot_id", "snapshots", "timestamp")
    is_path: bool = False
    example = TableVersion(0, "0")

    def versions_after(
        self, table: str, after: TableVersion | None, options: Mapping[str, Any]
    ) -> list[TableVersion]:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        from thresher.sources.iceberg_catalog import open_catalog, table_identifier
        from thresher.sources.iceberg_snapshots import main_snapshots, snapshot_number

        catalog = open_catalog(options.get("catalog"), "job.source.options.catalog")
        try:
            loaded = catalog.load_table(table_identifier(table, "watch"))
        except (NoSuchTableError, NoSuchNamespaceError):
            return []
        found = main_snapshots(loaded, None if after is None else after.number)
        return [
            TableVersion(snapshot_number(loaded.metadata, s), str(s.snapshot_id)) for s in found
        ]

    def source_options(self, run: VersionRun) -> dict[str, Any]:
        return {"snapshots": [int(run.versions[0].id), int(run.versions[-1].id)]}


WATCHES: Mapping[str, TableWatch] = {
    "delta": DeltaWatch(),
    "iceberg": IcebergWatch(),
    "kafka": KafkaWatch(),
}


def source_options(trigger: TriggerFields) -> Mapping[str, Any]:
    """The trigger's job's `source.options` (empty when it gives none)."""
    source = trigger.job.get("source", {})
    options = source.get("options", {}) if isinstance(source, dict) else {}
    return options if isinstance(options, dict) else {}


def new_run(
    watch: TableWatch, trigger: TriggerFields, taken: Mapping[str, Collection[tuple[int, str]]]
) -> VersionRun | None:
    """The versions of the trigger's table after the newest one taken (`taken`: the
    trigger's ledger rows, path -> (size, version) pairs), at most MAX_RUN; None when
    none is new."""
    table = trigger.watch.rstrip("/")
    newest = max(taken.get(table, ()), default=None)
    after = None if newest is None else TableVersion(*newest)
    found = watch.versions_after(table, after, source_options(trigger))[:MAX_RUN]
    return VersionRun(table, tuple(found)) if found else None


def table_job_body(name: str, trigger: TriggerFields, key: str, run: VersionRun) -> dict[str, Any]:
    """The `POST /v1/jobs` body of a table trigger's set `key`: the trigger's `job`,
    reading what the run's versions added to the table."""
    watch = WATCHES[str(trigger.table)]
    source = trigger.job.get("source", {})
    options = {**source.get("options", {}), **watch.source_options(run)}
    source = {**source, "uri": run.table, "format": watch.format, "options": options}
    return {**trigger.job, "name": f"{name}@{key[:12]}", "source": source}
