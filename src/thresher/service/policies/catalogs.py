"""Which Iceberg catalogs a tenant's job may read: a SQL catalog on a SQLite file, given
by its properties, its database (`uri`) and its files (`warehouse`) under the server's
`allowed_roots`. A configured catalog's name (the server's `~/.pyiceberg.yaml`), another
catalog type or another property (an endpoint, credentials) would let a tenant reach
what the operator did not open to it; the source confines the table's metadata and data
files to the roots again when it plans (`source.allowed_roots`)."""

from __future__ import annotations

from typing import Any

from thresher.service.errors import Forbidden
from thresher.service.policies.roots import URL_CHARS, check_under_roots

__all__ = ["check_catalog"]

FIELD = "source.options.catalog"
ALLOWED = frozenset({"type", "uri", "warehouse", "name"})


def check_catalog(setting: Any, allowed_roots: list[str], field: str = FIELD) -> None:
    """Forbidden (403), naming `field`, unless `setting` is a SQL catalog on SQLite under
    the roots."""
    if not isinstance(setting, dict):
        raise Forbidden(
            f"{field}: this server reads Iceberg tables from a SQL catalog on a SQLite file"
            " under its allowed_roots, given by its properties (type, uri, warehouse)"
        )
    uri = setting.get("uri")
    if setting.get("type") != "sql" or not isinstance(uri, str) or not uri.startswith("sqlite:///"):
        raise Forbidden(f'{field}: type must be "sql" and uri a sqlite:/// file')
    extra = sorted(set(setting) - ALLOWED)
    if extra:
        raise Forbidden(
            f"{field}: {', '.join(extra)}: not allowed here ({', '.join(sorted(ALLOWED))})"
        )
    warehouse = setting.get("warehouse")
    if not isinstance(warehouse, str):
        raise Forbidden(f"{field}.warehouse: the catalog's files' root, under allowed_roots")
    for key, place in (("uri", uri.removeprefix("sqlite:///")), ("warehouse", warehouse)):
        # SQLAlchemy and pyiceberg read both as URLs: a `?` would end the path they open
        if any(c in place for c in URL_CHARS + "?"):
            raise Forbidden(f"{field}.{key}: {place} holds ?, # or %; give the plain path")
        check_under_roots(place, allowed_roots, f"{field}.{key}")
