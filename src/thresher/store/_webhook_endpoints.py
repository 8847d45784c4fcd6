"""Tenants' webhook endpoints (`thresher_webhook_endpoints`): where a tenant's batch
events go (OpenAI's `/v1/webhook_endpoints`), with the secret each delivery is signed with
and, for a while after a rotation, the secret before it."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

from thresher.store._db import Database

__all__ = ["EndpointRow", "EndpointTable"]


@dataclass(frozen=True)
class EndpointRow:
    id: str
    tenant: str
    name: str
    url: str
    event_types: list[str]
    secret: str
    old_secret: str | None
    old_secret_until: int | None
    created_at: int
    updated_at: int

    def secrets(self, at: float) -> list[str]:
        """The secrets a delivery made at `at` is signed with: the current one, and the
        one before it while it is kept valid."""
        if self.old_secret and (self.old_secret_until or 0) > at:
            return [self.secret, self.old_secret]
        return [self.secret]


COLUMNS = [f.name for f in fields(EndpointRow)]
# Any number, the same in every thresher: PostgreSQL advisory lock of the endpoints table.
_ENDPOINTS_LOCK = 7305063
SELECTED = ", ".join(COLUMNS)


@dataclass(frozen=True)
class EndpointTable:
    db: Database

    def add(self, row: EndpointRow, limit: int) -> bool:
        """Record the endpoint unless its tenant already has `limit`; False if it has.
        The count and the insert are one step, on every server sharing the store: a
        lock (PostgreSQL's advisory lock of this table, SQLite's write lock) is taken
        before the count is read."""
        marks = ", ".join("?" for _ in COLUMNS)
        with self.db.transaction() as cur:
            if self.db.dialect == "postgresql":
                cur.execute("SELECT pg_advisory_xact_lock(?)", (_ENDPOINTS_LOCK,))
            else:
                cur.execute("DELETE FROM thresher_webhook_endpoints WHERE 1 = 0")
            counted = cur.execute(
                "SELECT COUNT(*) FROM thresher_webhook_endpoints WHERE tenant = ?", (row.tenant,)
            ).fetchone()
            if counted is not None and int(counted[0]) >= limit:
                return False
            cur.execute(
                f"INSERT INTO thresher_webhook_endpoints ({SELECTED}) VALUES ({marks})",
                _stored(row),
            )
        return True

    def find(self, endpoint_id: str, tenant: str | None = None) -> EndpointRow | None:
        """The endpoint (the tenant's, when one is given); None if there is none."""
        where, params = "id = ?", [endpoint_id]
        if tenant is not None:
            where, params = "id = ? AND tenant = ?", [endpoint_id, tenant]
        rows = self.db.query(
            f"SELECT {SELECTED} FROM thresher_webhook_endpoints WHERE {where}", params
        )
        return _row(rows[0]) if rows else None

    def of_tenant(self, tenant: str, limit: int, after: str | None) -> list[EndpointRow]:
        """A page of the tenant's endpoints, newest first (ids sort by time)."""
        where, params = "tenant = ?", [tenant]
        if after is not None:
            where, params = "tenant = ? AND id < ?", [tenant, after]
        rows = self.db.query(
            f"SELECT {SELECTED} FROM thresher_webhook_endpoints WHERE {where}"
            " ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [_row(r) for r in rows]

    def subscribed(self, tenant: str, event: str) -> list[EndpointRow]:
        """The tenant's endpoints that take `event`, oldest first."""
        rows = self.db.query(
            f"SELECT {SELECTED} FROM thresher_webhook_endpoints WHERE tenant = ? ORDER BY id",
            (tenant,),
        )
        return [row for row in map(_row, rows) if event in row.event_types]

    def save(self, row: EndpointRow, changed: tuple[str, ...]) -> None:
        """Write back the `changed` fields of an endpoint, and only those: an update and
        a rotation at once must not write back each other's old values."""
        values = dict(zip(COLUMNS, _stored(row), strict=True))
        sets = ", ".join(f"{c} = ?" for c in (*changed, "updated_at"))
        with self.db.transaction() as cur:
            cur.execute(
                f"UPDATE thresher_webhook_endpoints SET {sets} WHERE id = ?",
                (*(values[c] for c in changed), row.updated_at, row.id),
            )

    def remove(self, endpoint_id: str, tenant: str) -> bool:
        with self.db.transaction() as cur:
            gone = cur.changed(
                "DELETE FROM thresher_webhook_endpoints WHERE id = ? AND tenant = ?",
                (endpoint_id, tenant),
            )
        return gone > 0


def _stored(row: EndpointRow) -> list[Any]:
    values = [getattr(row, c) for c in COLUMNS]
    return [
        json.dumps(v) if c == "event_types" else v for c, v in zip(COLUMNS, values, strict=True)
    ]


def _row(values: tuple[Any, ...]) -> EndpointRow:
    data = dict(zip(COLUMNS, values, strict=True))
    data["event_types"] = json.loads(data["event_types"])
    for name in ("old_secret_until", "created_at", "updated_at"):
        data[name] = None if data[name] is None else int(data[name])
    return EndpointRow(**data)
