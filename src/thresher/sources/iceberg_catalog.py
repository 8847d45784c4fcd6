"""Apache Iceberg catalogs and tables (`pyiceberg`), shared by the `iceberg` source and sink.

A spec names a table by its identifier, `namespace.table`, in `uri`, and the catalog that
holds it in `options.catalog`: the name of one configured for pyiceberg (`~/.pyiceberg.yaml`
or `PYICEBERG_CATALOG__<NAME>__*`, where credentials belong), or the catalog's properties:

    options.catalog = { type = "sql", uri = "sqlite:///catalog.db", warehouse = "warehouse" }

Relative paths in `uri` and `warehouse` are resolved against the spec's folder as every
other path (`places.py`). Whatever goes wrong reaching the catalog or finding the table is
a spec error naming the field, before any work starts.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from thresher.errors import SpecError
from thresher.postgres import without_password

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

# What `options.catalog` may be: a configured catalog's name, its properties, or None
# (pyiceberg's default catalog).
CatalogSetting = str | dict[str, str | int | float | bool] | None


def catalog_properties(setting: CatalogSetting) -> tuple[str | None, dict[str, str]]:
    """The name and properties `load_catalog` takes for `setting`: a name alone (None:
    pyiceberg's default catalog), or the properties with their `name` (`default`, as
    pyiceberg's own; a SQL catalog keeps the tables of each name apart, and a configured
    catalog of that name lends its properties). TOML's booleans and numbers become the
    text pyiceberg parses."""
    if setting is None or isinstance(setting, str):
        return setting, {}
    text = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in setting.items()}
    return text.pop("name", "default"), text


def describe(setting: CatalogSetting) -> str:
    """The catalog, for messages: its name, or its type and uri (never a password)."""
    name, properties = catalog_properties(setting)
    if not properties:
        return "default catalog" if name is None else f"catalog {name!r}"
    where = without_password(properties.get("uri", properties.get("warehouse", "")))
    return f"{properties.get('type', 'catalog')} catalog {where}".rstrip()


def open_catalog(setting: CatalogSetting, field: str) -> Catalog:
    """The catalog `setting` names; SpecError naming `field` when it cannot be opened or
    reached. A SQLite catalog's file must exist: SQLAlchemy would create an empty one
    wherever a misspelt path points, and the table would then be missing from it."""
    try:
        from pyiceberg.catalog import load_catalog
    except ImportError as exc:
        raise SpecError(
            [f"{field}: an iceberg table needs `pip install thresher[iceberg]`"]
        ) from exc
    name, properties = catalog_properties(setting)
    uri = properties.get("uri", "")
    path = urlsplit(uri.removeprefix("sqlite:///")).path  # `sqlite:////abs` or `sqlite:///rel`
    if uri.startswith("sqlite:///") and not os.path.exists(path):
        raise SpecError([f"{field}.uri: no SQLite catalog at {path}"])
    try:
        return load_catalog(name, **properties)
    except Exception as exc:  # pyiceberg's and its drivers': bad properties, unreachable
        raise SpecError([f"{field}: cannot open the Iceberg {describe(setting)}: {exc}"]) from None


def table_identifier(uri: str, field: str) -> tuple[str, ...]:
    """`db.scores` as pyiceberg's identifier; SpecError for a name without a namespace."""
    parts = tuple(uri.split("."))
    if len(parts) < 2 or not all(p.strip() for p in parts):
        raise SpecError([f"{field}: an iceberg table is named namespace.table, got {uri!r}"])
    return parts


def load_table(catalog: Catalog, uri: str, field: str, setting: CatalogSetting) -> Table:
    """The table `uri` names; SpecError naming `field` when it or its namespace is missing."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    identifier = table_identifier(uri, field)
    try:
        return catalog.load_table(identifier)
    except (NoSuchTableError, NoSuchNamespaceError):
        raise SpecError([f"{field}: no table {uri} in the Iceberg {describe(setting)}"]) from None
    except Exception as exc:  # the catalog's own: unreachable, refused, corrupt metadata
        raise SpecError(
            [f"{field}: cannot load {uri} from the {describe(setting)}: {exc}"]
        ) from None


def table_exists(catalog: Catalog, uri: str, field: str, setting: CatalogSetting) -> bool:
    """Whether `uri` is a table; SpecError naming `field` when its namespace is missing
    (thresher creates tables, never namespaces: those are the catalog owner's)."""
    identifier = table_identifier(uri, field)
    namespace = identifier[:-1]
    try:
        if not catalog.namespace_exists(namespace):
            raise SpecError(
                [
                    f"{field}: no namespace {'.'.join(namespace)} in the Iceberg "
                    f"{describe(setting)}; create it first (pyiceberg: "
                    f"catalog.create_namespace({'.'.join(namespace)!r}))"
                ]
            )
        return bool(catalog.table_exists(identifier))
    except SpecError:
        raise
    except Exception as exc:  # the catalog's own: unreachable, refused
        raise SpecError([f"{field}: cannot reach the {describe(setting)}: {exc}"]) from None


def new_table_location(catalog: Catalog, uri: str, field: str) -> str:
    """Where `catalog` would put a new table `uri`, creating nothing. The catalogs with a
    metastore (SQL, Hive, Glue, DynamoDB, ...) say it by their own rule (the namespace's
    location, else under the warehouse), which staging a table would call after loading
    the table's file access — pyarrow's dataset layer and pandas, 0.13 s of a job's
    start; a REST catalog's server decides, so there a table is staged (not committed).
    SpecError naming `field` for a nested namespace: pyiceberg stages no new table there."""
    from pyiceberg.catalog import MetastoreCatalog
    from pyiceberg.schema import Schema

    if len(table_identifier(uri, field)) > 2:
        raise SpecError(
            [f"{field}: a new Iceberg table goes in a namespace of one level (pyiceberg"
             f" creates none deeper), got {uri!r}"]
        )  # fmt: skip
    if isinstance(catalog, MetastoreCatalog):
        namespace, table = catalog.identifier_to_database_and_table(uri)
        return catalog._resolve_table_location(None, namespace, table)
    staged = catalog.create_table_transaction(uri, schema=Schema())
    return str(staged.table_metadata.location)


def arrow_schema(schema: Any) -> Any:
    """An Iceberg schema as Arrow's, without the field ids pyiceberg puts in its metadata
    (a plan's schema says what the rows are, not how Iceberg numbers them)."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(schema, include_field_ids=False)
