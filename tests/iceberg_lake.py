"""An Iceberg lake made in a test: a SQL catalog on a SQLite file, with namespace `db`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def lake(folder: Path, database: str = "catalog.db") -> tuple[dict[str, Any], Any]:
    """A new catalog in `folder` (its database and its `lake/` warehouse), namespace `db`
    made: the catalog's properties, as a spec names them, and the catalog itself."""
    from pyiceberg.catalog import load_catalog

    properties = {
        "type": "sql",
        "uri": f"sqlite:///{folder / database}",
        "warehouse": str(folder / "lake"),
    }
    catalog = load_catalog("default", **properties)
    catalog.create_namespace("db")
    return properties, catalog
