"""The schedules' tick ledger (`thresher_ticks`): one row per schedule and nominal time.

A scheduler claims a tick by inserting its row; the primary key lets one claim win, in
one transaction, however many schedulers (threads, servers on one PostgreSQL store) try.
Only the winner starts the tick's job, then settles the row with its outcome. A claim
left unsettled by a scheduler that died is found by `unsettled`, taken over by one live
scheduler (`take_over`, again one winner) and finished; the tick's job is queued under an
idempotency key made from the tick (`tick_key`), so finishing it twice still makes one
job. A manual tick (`thresher schedules trigger`) is a claim made by `MANUAL`, taken over
and started the same way; it is not a fire time, so the cron's ticks ignore it.

A backfill (`thresher backfill`) claims past fire times in the same ledger, the row naming
it (`backfill`): one it finds missed, skipped or failed without a job it takes over
(`claim_for_backfill`, again one winner), so a fire time still makes one job, ever. The
live ticker neither finishes a backfill's claims nor counts its ticks as its own
decisions (`unsettled`, `last`) or as the job its overlap policy waits for (`last_job`).

Times are stored as UTC ISO 8601 text, which sorts as time does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from thresher.faults import crash_point
from thresher.store._db import Database, now

__all__ = ["MANUAL", "Tick", "TickLedger", "TickOutcome", "tick_key"]

MANUAL = "manual"  # the claimant of a manual tick, until a scheduler takes it over


class TickOutcome(StrEnum):
    CLAIMED = "claimed"  # won by a scheduler that has not said what came of it yet
    STARTED = "started"  # its job was queued (job_id)
    SKIPPED = "skipped"  # the previous run was still going (overlap = skip)
    MISSED = "missed"  # too late to run (downtime, catch-up policy, starting deadline)
    FAILED = "failed"  # its job could not be made (message says why)


@dataclass(frozen=True)
class Tick:
    schedule: str
    nominal: datetime
    outcome: TickOutcome
    job_id: str | None
    message: str | None
    manual: bool = False
    backfill: str | None = None  # the backfill whose tick it is
    claimed_by: str | None = None


TICK_COLUMNS = "nominal, outcome, job_id, message, manual, backfill, claimed_by"


def _tick(schedule: str, r: tuple[object, ...]) -> Tick:
    return Tick(
        schedule, datetime.fromisoformat(str(r[0])), TickOutcome(str(r[1])),
        None if r[2] is None else str(r[2]), None if r[3] is None else str(r[3]),
        bool(r[4]), None if r[5] is None else str(r[5]), None if r[6] is None else str(r[6]),
    )  # fmt: skip


def tick_key(schedule: str, nominal: datetime) -> str:
    """The idempotency key of a tick's job: the same tick always names the same job."""
    return f"tick:{schedule}:{nominal.isoformat()}"


@dataclass(frozen=True)
class TickLedger:
    db: Database
    MANUAL: ClassVar[str] = MANUAL  # the claimant of a manual tick

    def claim(self, schedule: str, nominal: datetime, owner: str, manual: bool = False) -> bool:
        """Claim the tick for `owner`; False if it was claimed before (by anyone)."""
        with self.db.transaction() as cur:
            won = cur.changed(
                "INSERT INTO thresher_ticks"
                " (schedule, nominal, outcome, claimed_by, claimed_at, manual)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (schedule, nominal.isoformat(), TickOutcome.CLAIMED.value, owner, now(),
                 int(manual)),
            )  # fmt: skip
            crash_point("tick_claiming")  # the claim written, not committed
        return won > 0

    def claim_for_backfill(
        self, schedule: str, nominal: datetime, backfill: str, owner: str
    ) -> bool:
        """Claim a past fire time for `backfill`: a new row, or one settled without a job
        (missed, skipped, failed) by the ticker or another backfill, taken over in one
        conditional write; False if the fire time has, or may get, a job of another's,
        or was this backfill's already (a fire time it failed is not tried again)."""
        jobless = (TickOutcome.MISSED.value, TickOutcome.SKIPPED.value, TickOutcome.FAILED.value)
        with self.db.transaction() as cur:
            won = cur.changed(
                "INSERT INTO thresher_ticks (schedule, nominal, outcome, claimed_by,"
                " claimed_at, manual, backfill) VALUES (?, ?, ?, ?, ?, 0, ?)"
                " ON CONFLICT DO NOTHING",
                (schedule, nominal.isoformat(), TickOutcome.CLAIMED.value, owner, now(),
                 backfill),
            )  # fmt: skip
            if not won:
                won = cur.changed(
                    "UPDATE thresher_ticks SET outcome = ?, claimed_by = ?, claimed_at = ?,"
                    " backfill = ?, message = NULL, settled_at = NULL"
                    " WHERE schedule = ? AND nominal = ? AND job_id IS NULL"
                    " AND outcome IN (?, ?, ?) AND (backfill IS NULL OR backfill <> ?)",
                    (TickOutcome.CLAIMED.value, owner, now(), backfill, schedule,
                     nominal.isoformat(), *jobless, backfill),
                )  # fmt: skip
            crash_point("backfill_claiming")  # the claim written, not committed
        return won > 0

    def take_over(self, schedule: str, nominal: datetime, before: str, owner: str) -> bool:
        """Make `owner` the claimant of a tick still claimed by `before` (a scheduler that
        died, or MANUAL); False if another scheduler took it first or it was settled."""
        with self.db.transaction() as cur:
            won = cur.changed(
                "UPDATE thresher_ticks SET claimed_by = ?"
                " WHERE schedule = ? AND nominal = ? AND outcome = ? AND claimed_by = ?",
                (owner, schedule, nominal.isoformat(), TickOutcome.CLAIMED.value, before),
            )
        return won > 0

    def settle(
        self,
        schedule: str,
        nominal: datetime,
        outcome: TickOutcome,
        job_id: str | None = None,
        message: str | None = None,
    ) -> None:
        """Record what came of a claimed tick (once: a settled tick stays as it is)."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_ticks SET outcome = ?, job_id = ?, message = ?, settled_at = ?"
                " WHERE schedule = ? AND nominal = ? AND outcome = ?",
                (outcome.value, job_id, message, now(), schedule, nominal.isoformat(),
                 TickOutcome.CLAIMED.value),
            )  # fmt: skip

    def unsettled(self, schedule: str) -> list[tuple[datetime, str]]:
        """Ticks claimed and not settled yet (a backfill's aside), oldest first, with their
        claimant: a scheduler at work, one that died, or MANUAL."""
        rows = self.db.query(
            "SELECT nominal, claimed_by FROM thresher_ticks WHERE schedule = ? AND outcome = ?"
            " AND backfill IS NULL ORDER BY nominal",
            (schedule, TickOutcome.CLAIMED.value),
        )
        return [(datetime.fromisoformat(str(r[0])), str(r[1])) for r in rows]

    def last(self, schedule: str) -> datetime | None:
        """The newest fire time the ticker decided for `schedule` (any outcome; manual
        ticks are not fire times, a backfill's are not the ticker's), or None."""
        rows = self.db.query(
            "SELECT MAX(nominal) FROM thresher_ticks WHERE schedule = ? AND manual = 0"
            " AND backfill IS NULL",
            (schedule,),
        )
        return datetime.fromisoformat(str(rows[0][0])) if rows and rows[0][0] else None

    def last_job(self, schedule: str) -> str | None:
        """The job of the schedule's newest started tick, however many ticks were skipped
        or missed since, or None (a backfill's jobs are not waited for: they yield to live
        ticks by priority instead)."""
        rows = self.db.query(
            "SELECT job_id FROM thresher_ticks WHERE schedule = ? AND outcome = ?"
            " AND backfill IS NULL ORDER BY nominal DESC LIMIT 1",
            (schedule, TickOutcome.STARTED.value),
        )
        return str(rows[0][0]) if rows and rows[0][0] else None

    def recent(self, schedule: str, limit: int = 20) -> list[Tick]:
        """The schedule's newest ticks, newest first."""
        rows = self.db.query(
            f"SELECT {TICK_COLUMNS} FROM thresher_ticks"
            " WHERE schedule = ? ORDER BY nominal DESC LIMIT ?",
            (schedule, limit),
        )
        return [_tick(schedule, r) for r in rows]

    def at(self, schedule: str, nominals: list[datetime]) -> dict[datetime, Tick]:
        """The ledger's rows for these fire times of `schedule` (those it has)."""
        if not nominals:
            return {}
        wanted = set(nominals)
        rows = self.db.query(
            f"SELECT {TICK_COLUMNS} FROM thresher_ticks"
            " WHERE schedule = ? AND nominal >= ? AND nominal <= ?",
            (schedule, min(nominals).isoformat(), max(nominals).isoformat()),
        )
        found = (_tick(schedule, r) for r in rows)
        return {t.nominal: t for t in found if t.nominal in wanted}

    def counts(self) -> dict[tuple[str, str], int]:
        """How many ticks each schedule has had, by outcome: {(schedule, outcome): n}."""
        rows = self.db.query(
            "SELECT schedule, outcome, COUNT(*) FROM thresher_ticks GROUP BY schedule, outcome"
        )
        return {(str(r[0]), str(r[1])): int(r[2]) for r in rows}
