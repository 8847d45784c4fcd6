"""Schedules kept in the store (`thresher_schedules`): the ones tenants make over HTTP,
and the pause switch of every schedule, the config's included.

A row's `key` is what the tick ledger knows the schedule by: a config schedule's name
(`nightly`), or `tenant/name` for a tenant's own (`acme/nightly`), so neither can take
the other's ticks. A config schedule has a row only once it is paused or resumed from
the CLI (`settings` is NULL: its settings are the config's); `paused` NULL means "as
declared".
"""

from __future__ import annotations

from dataclasses import dataclass

from thresher.store._counted import make_room
from thresher.store._db import Database, StoreError, now

__all__ = ["ScheduleExists", "ScheduleRow", "ScheduleTable", "schedule_key"]


class ScheduleExists(StoreError):
    """A tenant's schedule of that name is already there."""


def schedule_key(tenant: str | None, name: str) -> str:
    """The ledger's name for a schedule: a config schedule's own (tenant None), or
    `tenant/name` for a tenant's."""
    return name if tenant is None else f"{tenant}/{name}"


@dataclass(frozen=True)
class ScheduleRow:
    key: str
    tenant: str
    name: str
    settings: str | None  # JSON of a tenant's ScheduleSettings; None for a config one
    paused: bool | None
    created_at: str
    updated_at: str
    quarantined: str | None = None  # why its loop paused it (`thresher.loops.Strikes`)


COLUMNS = "key, tenant, name, settings, paused, created_at, updated_at"
READ = f"{COLUMNS}, quarantined"


@dataclass(frozen=True)
class ScheduleTable:
    db: Database

    def create(
        self, tenant: str, name: str, settings: str, limit: int | None = None
    ) -> ScheduleRow:
        """Add the tenant's schedule; ScheduleExists if it has one of that name, AtLimit
        if it has `limit` schedules of its own already."""
        key, at = schedule_key(tenant, name), now()
        with self.db.transaction() as cur:
            if limit is not None:
                own = ("tenant = ? AND settings IS NOT NULL", (tenant,))
                make_room(cur, self.db.dialect, "thresher_schedules", where=own, limit=limit)
            made = cur.changed(
                f"INSERT INTO thresher_schedules ({COLUMNS}) VALUES (?, ?, ?, ?, NULL, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (key, tenant, name, settings, at, at),
            )
        if not made:
            raise ScheduleExists(f"name: tenant {tenant!r} already has a schedule {name!r}")
        return ScheduleRow(key, tenant, name, settings, None, at, at)

    def replace(self, tenant: str, name: str, settings: str) -> bool:
        """Put new settings in the tenant's schedule (its quarantine, if any, ends: the
        tenant has changed, paused or resumed it); False if there is none."""
        with self.db.transaction() as cur:
            changed = cur.changed(
                "UPDATE thresher_schedules SET settings = ?, updated_at = ?, quarantined = NULL"
                " WHERE key = ? AND settings IS NOT NULL",
                (settings, now(), schedule_key(tenant, name)),
            )
        return changed > 0

    def delete(self, tenant: str, name: str) -> bool:
        """Remove the tenant's schedule (its ticks stay in the ledger); False if none."""
        with self.db.transaction() as cur:
            gone = cur.changed(
                "DELETE FROM thresher_schedules WHERE key = ? AND settings IS NOT NULL",
                (schedule_key(tenant, name),),
            )
        return gone > 0

    def set_paused(self, key: str, tenant: str, name: str, paused: bool) -> None:
        """Pause or resume the schedule `key` (a config schedule gets a row for it); its
        quarantine, if any, ends."""
        at = now()
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO thresher_schedules ({COLUMNS}) VALUES (?, ?, ?, NULL, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET paused = excluded.paused,"
                " updated_at = excluded.updated_at, quarantined = NULL",
                (key, tenant, name, int(paused), at, at),
            )

    def quarantine(self, key: str, tenant: str, name: str, reason: str) -> None:
        """Pause the schedule `key` because its ticker failed on it too often: `reason`
        is kept (and shown) until it is resumed (a config schedule gets a row for it)."""
        at = now()
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO thresher_schedules ({READ}) VALUES (?, ?, ?, NULL, NULL, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET quarantined = excluded.quarantined,"
                " updated_at = excluded.updated_at",
                (key, tenant, name, at, at, reason),
            )

    def find(self, key: str) -> ScheduleRow | None:
        rows = self.db.query(f"SELECT {READ} FROM thresher_schedules WHERE key = ?", (key,))
        return _row(rows[0]) if rows else None

    def of_tenant(self, tenant: str) -> list[ScheduleRow]:
        """The tenant's own schedules, by name."""
        rows = self.db.query(
            f"SELECT {READ} FROM thresher_schedules"
            " WHERE tenant = ? AND settings IS NOT NULL ORDER BY name",
            (tenant,),
        )
        return [_row(r) for r in rows]

    def every(self, tenant: str | None = None) -> list[ScheduleRow]:
        """Every row: tenants' schedules and config schedules' pause switches (with
        `tenant`, its own schedules alone, and every switch: a config schedule's is
        found by its name, whoever it ran for when it was written)."""
        mine = "WHERE tenant = ? OR settings IS NULL"
        where, params = (mine, (tenant,)) if tenant is not None else ("", ())
        rows = self.db.query(f"SELECT {READ} FROM thresher_schedules {where} ORDER BY key", params)
        return [_row(r) for r in rows]


def _row(r: tuple[object, ...]) -> ScheduleRow:
    paused = None if r[4] is None else bool(r[4])
    return ScheduleRow(
        str(r[0]), str(r[1]), str(r[2]), None if r[3] is None else str(r[3]), paused,
        str(r[5]), str(r[6]), None if r[7] is None else str(r[7]),
    )  # fmt: skip
