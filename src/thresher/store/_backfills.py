"""Backfills (`thresher_backfills`): one row per backfill of a schedule's past fire times.

A row keeps what was asked — the schedule's ledger key, the range as given, the fire
times it came to (frozen when it was made, so changing the schedule's cron later does
not change what a backfill covers), the priority its jobs run at and how many may run at
once — and whether it is still `running`, has `ended` (every fire time done) or was
`cancelled`. Each fire time's tick and job live in the tick ledger (`_ticks.py`), whose
rows name the backfill; a backfill's state per fire time is read from there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from thresher.store._db import Database, now

__all__ = ["BackfillRow", "BackfillState", "BackfillTable"]


class BackfillState(StrEnum):
    RUNNING = "running"
    ENDED = "ended"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class BackfillRow:
    id: str
    tenant: str
    schedule: str  # the ledger's key: `nightly`, or `acme/nightly` for a tenant's own
    name: str
    timezone: str  # the schedule's, for the fire times' wall-clock times
    range_from: str
    range_to: str
    nominals: list[datetime]
    priority: int
    max_running: int | None
    state: BackfillState
    created_at: str
    ended_at: str | None


COLUMNS = (
    "id, tenant, schedule, name, timezone, range_from, range_to, nominals, priority, max_running,"
    " state, created_at, ended_at"
)


@dataclass(frozen=True)
class BackfillTable:
    db: Database

    def create(
        self,
        backfill_id: str,
        tenant: str,
        *,
        schedule: tuple[str, str, str],
        span: tuple[str, str],
        nominals: list[datetime],
        priority: int,
        max_running: int | None,
    ) -> BackfillRow:
        """Record a new backfill of `schedule` (its key, name and time zone) over `span`
        (from, to as given) covering the fire times `nominals`."""
        times = json.dumps([t.isoformat() for t in nominals])
        row = (backfill_id, tenant, *schedule, *span, times, priority, max_running,
               BackfillState.RUNNING.value, now(), None)  # fmt: skip
        with self.db.transaction() as cur:
            cur.execute(
                f"INSERT INTO thresher_backfills ({COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        return _row(row)

    def find(self, backfill_id: str) -> BackfillRow | None:
        rows = self.db.query(
            f"SELECT {COLUMNS} FROM thresher_backfills WHERE id = ?", (backfill_id,)
        )
        return _row(rows[0]) if rows else None

    def of_schedule(self, schedule: str, limit: int = 100) -> list[BackfillRow]:
        """The schedule's backfills (by ledger key), newest first."""
        rows = self.db.query(
            f"SELECT {COLUMNS} FROM thresher_backfills WHERE schedule = ?"
            " ORDER BY created_at DESC, id DESC LIMIT ?",
            (schedule, limit),
        )
        return [_row(r) for r in rows]

    def running(self) -> list[BackfillRow]:
        """Every backfill not ended or cancelled, oldest first: what a server advances."""
        rows = self.db.query(
            f"SELECT {COLUMNS} FROM thresher_backfills WHERE state = ? ORDER BY created_at, id",
            (BackfillState.RUNNING.value,),
        )
        return [_row(r) for r in rows]

    def end(self, backfill_id: str) -> None:
        """Mark a running backfill ended (every fire time done)."""
        self._leave(backfill_id, BackfillState.ENDED)

    def cancel(self, backfill_id: str) -> bool:
        """Mark a running backfill cancelled; False if it had ended or was cancelled."""
        return self._leave(backfill_id, BackfillState.CANCELLED)

    def job_states(self, job_ids: list[str]) -> dict[str, str]:
        """The state of each of these jobs (a backfill's), read in a few queries."""
        states: dict[str, str] = {}
        for at in range(0, len(job_ids), 500):
            chunk = job_ids[at : at + 500]
            marks = ", ".join("?" * len(chunk))
            rows = self.db.query(
                f"SELECT id, state FROM thresher_jobs WHERE id IN ({marks})", chunk
            )
            states.update((str(r[0]), str(r[1])) for r in rows)
        return states

    def _leave(self, backfill_id: str, state: BackfillState) -> bool:
        with self.db.transaction() as cur:
            left = cur.changed(
                "UPDATE thresher_backfills SET state = ?, ended_at = ? WHERE id = ? AND state = ?",
                (state.value, now(), backfill_id, BackfillState.RUNNING.value),
            )
        return left > 0


def _row(r: tuple[object, ...]) -> BackfillRow:
    nominals = [datetime.fromisoformat(t) for t in json.loads(str(r[7]))]
    return BackfillRow(
        str(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]), str(r[6]),
        nominals, int(str(r[8])),
        None if r[9] is None else int(str(r[9])), BackfillState(str(r[10])), str(r[11]),
        None if r[12] is None else str(r[12]),
    )  # fmt: skip
