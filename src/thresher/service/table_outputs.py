"""A job's predictions into a lakehouse table (`output_table` of `POST /v1/jobs`) instead
of the download folder: a Delta table's folder, or an Iceberg table in a SQL catalog on
a SQLite file, each under the server's `allowed_roots` as every path a tenant names.

The table is written as the `delta` and `iceberg` sinks write one (exactly once, at the
job's end, `append`, `overwrite` or `merge` by id) and never with `sink.force`: a table
thresher did not write stays refused. An existing Iceberg table's files must lie under
the roots too (its location is the catalog's, which a tenant does not choose), as must a
new one's (the catalog's rule). The roots are shared by every tenant of the server: any
may write a table thresher made under them (as any may read what lies there). The job's
status names the table and the version it made; its bad records download as any job's,
its results are read from the table.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from thresher.service.errors import Unprocessable
from thresher.service.limits import LongText
from thresher.service.policies.catalogs import check_catalog
from thresher.service.policies.roots import check_under_roots, local_path

if TYPE_CHECKING:
    from thresher.spec import SinkSection

__all__ = ["TableOutput", "table_sink", "written_table"]

WHERE = "output_table"
# an Iceberg table's properties that send its files elsewhere than its location
WRITE_PATHS = ("write.data.path", "write.metadata.path", "write.object-storage.path")


class TableOutput(BaseModel):
    """Where a job's predictions go when they go to a table."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["delta", "iceberg"]
    uri: LongText = Field(
        description="delta: the table's folder (made by the first job) under allowed_roots;"
        " iceberg: namespace.table in `options.catalog`"
    )
    mode: Literal["append", "overwrite", "merge"] = Field(
        "append",
        description="append the rows, overwrite the table's content, or merge them by"
        " id_column (rows of ids the table holds replaced, others added)",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        max_length=3,
        description="partition_by (a new table's columns), merge_on (a keep_columns"
        " column instead of id_column) and, for iceberg, catalog: a SQL catalog on a"
        " SQLite file under allowed_roots, by its properties (type, uri, warehouse)",
    )


def table_sink(table: TableOutput, keep_columns: list[str], roots: list[str]) -> dict[str, Any]:
    """The job's `[sink]` writing `table`; Forbidden (403) for a path outside `roots`,
    Unprocessable (422) for an option the output does not take."""
    options = dict(table.options)
    allowed = {"partition_by", "merge_on"} | ({"catalog"} if table.format == "iceberg" else set())
    unknown = sorted(set(options) - allowed)
    if unknown:
        takes = ", ".join(sorted(allowed))
        raise Unprocessable(
            [f"{WHERE}.options.{unknown[0]}: a {table.format} output takes {takes}"]
        )
    uri = table.uri
    if table.format == "delta":
        check_under_roots(uri, roots, f"{WHERE}.uri")
        path = local_path(uri)
        if "://" not in path:  # written where it was checked: links followed
            uri = os.path.realpath(path)
    else:
        check_catalog(options.get("catalog"), roots, f"{WHERE}.options.catalog")
        _iceberg_files_under_roots(options["catalog"], table.uri, roots)
    sink = {"uri": uri, "format": table.format, "mode": table.mode}
    return sink | {"keep_columns": keep_columns, "options": options}


def written_table(sink: SinkSection, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """What a job's status says of the table it wrote: format, uri and the version (Delta)
    or snapshot (Iceberg) it made; None for a job with no table output."""
    if sink.format not in ("delta", "iceberg"):
        return None
    made = manifest.get("delta_version", manifest.get("iceberg_snapshot_id"))
    return {"format": sink.format, "uri": sink.uri, "mode": sink.mode, "version": made}


def _iceberg_files_under_roots(catalog: dict[str, Any], uri: str, roots: list[str]) -> None:
    """Where the table's files would be written, under the roots: a new table's location
    (the catalog's rule: its namespace's location, else under the warehouse), or an
    existing one's with the places its properties send data and metadata files."""
    from thresher.errors import SpecError
    from thresher.sources.iceberg_catalog import new_table_location, open_catalog, table_exists

    field = f"{WHERE}.uri"
    try:
        opened = open_catalog(catalog, f"{WHERE}.options.catalog")
        if not table_exists(opened, uri, field, catalog):
            places = [new_table_location(opened, uri, field)]
        else:
            made = opened.load_table(uri)
            places = [str(made.location())]
            places += [made.properties[k] for k in WRITE_PATHS if k in made.properties]
    except SpecError as exc:
        raise Unprocessable(exc.problems) from None
    except Exception as exc:  # pyiceberg's: metadata it cannot read
        raise Unprocessable([f"{field}: cannot read the Iceberg table {uri}: {exc}"]) from None
    for place in places:
        check_under_roots(place, roots, f"{field} ({uri}'s files at {place})")
