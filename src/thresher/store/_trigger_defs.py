"""Tenants' own dataset-arrival triggers (`thresher_trigger_defs`), made over HTTP.

A row's `key` is what the trigger ledger (`store/_triggers.py`) knows the trigger by:
`tenant/name` (`acme/inbox`), never a config trigger's bare name, so a tenant's trigger
and a config trigger of the same name never share taken files. Deleting a row stops the
trigger, but its manifest of taken files stays in the ledger: a trigger made again under
the same name does not take the files it took before (`thresher triggers reset` does).
`paused` mirrors the settings' own `paused`, written with them.
"""

from __future__ import annotations

from dataclasses import dataclass

from thresher.store._counted import make_room
from thresher.store._db import Database, StoreError, now

__all__ = ["TriggerDefRow", "TriggerDefTable", "TriggerExists", "trigger_key"]


class TriggerExists(StoreError):
    """A tenant's trigger of that name is already there."""


def trigger_key(tenant: str, name: str) -> str:
    """The ledger's name for a tenant's trigger."""
    return f"{tenant}/{name}"


@dataclass(frozen=True)
class TriggerDefRow:
    key: str
    tenant: str
    name: str
    settings: str  # JSON of its TriggerSettings
    paused: bool
    created_at: str
    updated_at: str
    quarantined: str | None = None  # why the watcher paused it (`thresher.loops.Strikes`)


COLUMNS = "key, tenant, name, settings, paused, created_at, updated_at"


@dataclass(frozen=True)
class TriggerDefTable:
    db: Database

    def create(
        self, tenant: str, name: str, settings: str, paused: bool, limit: int | None = None
    ) -> TriggerDefRow:
        """Add the tenant's trigger; TriggerExists if it has one of that name, AtLimit if
        it has `limit` triggers already."""
        key, at = trigger_key(tenant, name), now()
        with self.db.transaction() as cur:
            if limit is not None:
                own = ("tenant = ?", (tenant,))
                make_room(cur, self.db.dialect, "thresher_trigger_defs", where=own, limit=limit)
            made = cur.changed(
                f"INSERT INTO thresher_trigger_defs ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (key, tenant, name, settings, int(paused), at, at),
            )
        if not made:
            raise TriggerExists(f"name: tenant {tenant!r} already has a trigger {name!r}")
        return TriggerDefRow(key, tenant, name, settings, paused, at, at)

    def replace(self, tenant: str, name: str, settings: str, paused: bool) -> bool:
        """Put new settings in the tenant's trigger (its quarantine, if any, ends: the
        tenant has changed, paused or resumed it); False if there is none."""
        with self.db.transaction() as cur:
            changed = cur.changed(
                "UPDATE thresher_trigger_defs SET settings = ?, paused = ?, updated_at = ?,"
                " quarantined = NULL"
                " WHERE key = ?",
                (settings, int(paused), now(), trigger_key(tenant, name)),
            )
        return changed > 0

    def delete(self, tenant: str, name: str) -> bool:
        """Remove the tenant's trigger (its taken files stay in the ledger); False if none."""
        with self.db.transaction() as cur:
            gone = cur.changed(
                "DELETE FROM thresher_trigger_defs WHERE key = ?", (trigger_key(tenant, name),)
            )
        return gone > 0

    def quarantine(self, key: str, reason: str) -> None:
        """Pause the trigger `key` because the watcher failed on it too often: `reason`
        is kept (and shown) until the tenant resumes or changes it."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_trigger_defs SET paused = 1, quarantined = ?, updated_at = ?"
                " WHERE key = ?",
                (reason, now(), key),
            )

    def every(self, tenant: str | None = None) -> list[TriggerDefRow]:
        """Every tenant's trigger (`tenant`'s alone, when one is given), by key."""
        where, params = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
        rows = self.db.query(
            f"SELECT {COLUMNS}, quarantined FROM thresher_trigger_defs {where} ORDER BY key",
            params,
        )
        return [
            TriggerDefRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), bool(r[4]),
                          str(r[5]), str(r[6]), None if r[7] is None else str(r[7]))
            for r in rows
        ]  # fmt: skip
