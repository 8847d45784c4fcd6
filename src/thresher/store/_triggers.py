"""The triggers' manifest of files taken (`thresher_trigger_files`), the sets they were
taken in (`thresher_trigger_sets`) and the resets that forgot some (`thresher_trigger_resets`).

A table trigger's set is a run of table versions (`triggers/tables.py`): one row each,
role "version", path the table, size the version's number, version its id; unique as a
file's, so a version is in one set, ever.

What is atomic: `claim` inserts a set's row and a manifest row for each of its files in
one transaction. A file's row is keyed by (trigger, path, size, version), so of two
claims holding one file — two threads, two servers on one PostgreSQL store — one commits
and the other rolls back whole: a file is in one set, ever (until a reset). The job is
queued afterwards, under an idempotency key made from the set (`set_job_key`), and the
set's row then settled with its id. A watcher that dies in between leaves the set
claimed; the next look finishes it (`unsettled`) with the same key, so the same job: in
effect the manifest and the job are committed together, and a restart neither drops nor
repeats a file.

Times are UTC ISO 8601 text, which sorts as time does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from thresher.store._db import Database, StoreError, now

__all__ = [
    "SetOutcome",
    "TakenFile",
    "TriggerLedger",
    "TriggerReset",
    "TriggerSetRecord",
    "set_job_key",
]


class SetOutcome(StrEnum):
    CLAIMED = "claimed"  # its files are taken; its job is not recorded yet
    STARTED = "started"  # its job was queued (job_id)
    EMPTY = "empty"  # a marker with no new file beside it: nothing to run
    FAILED = "failed"  # its job could not be made (message says why); files stay taken


@dataclass(frozen=True)
class TakenFile:
    """A file as a set takes it: `role` is "data" (the job reads it) or "marker"; or a
    table's version, role "version" (`size` its number, `version` its id)."""

    path: str
    size: int
    version: str
    role: str = "data"
    sha256: str | None = None


@dataclass(frozen=True)
class TriggerSetRecord:
    trigger: str
    key: str
    outcome: SetOutcome
    files: int
    job_id: str | None
    message: str | None
    claimed_at: str


@dataclass(frozen=True)
class TriggerReset:
    trigger: str
    since: str
    reset_by: str
    reset_at: str
    forgotten: int


def set_job_key(trigger: str, key: str) -> str:
    """The idempotency key of a set's job: the same set always names the same job."""
    return f"trigger:{trigger}:{key}"


class _Lost(StoreError):
    """Another claim took one of the set's files first (rolls the claim back)."""


@dataclass(frozen=True)
class TriggerLedger:
    db: Database

    def claim(self, trigger: str, key: str, files: Sequence[TakenFile], owner: str) -> bool:
        """Take the set and its files for `owner`, in one transaction; False (nothing
        written) if the set, or any of its files, was taken before."""
        stamp = now()
        data = sum(1 for f in files if f.role != "marker")
        try:
            with self.db.transaction() as cur:
                won = cur.changed(
                    "INSERT INTO thresher_trigger_sets (trigger_name, set_key, outcome, files,"
                    " claimed_by, claimed_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (trigger, key, SetOutcome.CLAIMED.value, data, owner, stamp),
                )
                if not won:
                    raise _Lost(key)
                for f in files:
                    if not cur.changed(
                        "INSERT INTO thresher_trigger_files (trigger_name, path, size, version,"
                        " role, sha256, set_key, taken_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                        " ON CONFLICT DO NOTHING",
                        (trigger, f.path, f.size, f.version, f.role, f.sha256, key, stamp),
                    ):
                        raise _Lost(f.path)
        except _Lost:
            return False
        return True

    def settle(
        self,
        trigger: str,
        key: str,
        outcome: SetOutcome,
        job_id: str | None = None,
        message: str | None = None,
    ) -> None:
        """Record what came of a claimed set (once: a settled set stays as it is)."""
        with self.db.transaction() as cur:
            cur.execute(
                "UPDATE thresher_trigger_sets SET outcome = ?, job_id = ?, message = ?,"
                " settled_at = ? WHERE trigger_name = ? AND set_key = ? AND outcome = ?",
                (outcome.value, job_id, message, now(), trigger, key, SetOutcome.CLAIMED.value),
            )

    def unsettled(self, trigger: str) -> list[str]:
        """Keys of sets claimed but never settled (their watcher died), oldest first."""
        rows = self.db.query(
            "SELECT set_key FROM thresher_trigger_sets WHERE trigger_name = ? AND outcome = ?"
            " ORDER BY claimed_at, set_key",
            (trigger, SetOutcome.CLAIMED.value),
        )
        return [str(r[0]) for r in rows]

    def set_files(self, trigger: str, key: str) -> list[str]:
        """The data files of a set, in path order: its job's `source.files`."""
        rows = self.db.query(
            "SELECT path FROM thresher_trigger_files WHERE trigger_name = ? AND set_key = ?"
            " AND role = 'data' ORDER BY path",
            (trigger, key),
        )
        return [str(r[0]) for r in rows]

    def set_versions(self, trigger: str, key: str) -> list[tuple[int, str]]:
        """A table trigger's set: its versions' (number, id), oldest first."""
        rows = self.db.query(
            "SELECT size, version FROM thresher_trigger_files WHERE trigger_name = ?"
            " AND set_key = ? AND role = 'version' ORDER BY size",
            (trigger, key),
        )
        return [(int(n), str(v)) for n, v in rows]

    def taken(self, trigger: str) -> dict[str, set[tuple[int, str]]]:
        """Every file the trigger has taken: path -> its (size, version) pairs."""
        taken: dict[str, set[tuple[int, str]]] = {}
        for path, size, version, _ in self.taken_since(trigger, None):
            taken.setdefault(path, set()).add((size, version))
        return taken

    def taken_since(self, trigger: str, since: str | None) -> list[tuple[str, int, str, str]]:
        """The files the trigger took at or after `since` (all with None), as (path,
        size, version, taken_at): what a watcher's memory of them lacks."""
        sql = "SELECT path, size, version, taken_at FROM thresher_trigger_files"
        sql += " WHERE trigger_name = ?" + (" AND taken_at >= ?" if since else "")
        rows = self.db.query(sql, (trigger, since) if since else (trigger,))
        return [(str(p), int(n), str(v), str(at)) for p, n, v, at in rows]

    def epoch(self, trigger: str) -> int:
        """How many times the trigger was reset (part of every set's key)."""
        rows = self.db.query(
            "SELECT COUNT(*) FROM thresher_trigger_resets WHERE trigger_name = ?", (trigger,)
        )
        return int(rows[0][0])

    def reset(self, trigger: str, since: datetime, reset_by: str) -> int:
        """Forget the data files and markers the trigger took at or after `since` (not
        those of a set still being started), so they are taken again, in new sets; the
        reset is recorded with who asked and when. Returns how many were forgotten."""
        claimed = "SELECT set_key FROM thresher_trigger_sets WHERE trigger_name = ? AND outcome = ?"
        with self.db.transaction() as cur:
            forgotten = cur.changed(
                "DELETE FROM thresher_trigger_files WHERE trigger_name = ? AND taken_at >= ?"
                f" AND set_key NOT IN ({claimed})",
                (trigger, since.isoformat(), trigger, SetOutcome.CLAIMED.value),
            )
            cur.execute(
                "INSERT INTO thresher_trigger_resets (trigger_name, since, reset_by, reset_at,"
                " forgotten) VALUES (?, ?, ?, ?, ?)",
                (trigger, since.isoformat(), reset_by, now(), forgotten),
            )
        return forgotten

    def resets(self, trigger: str) -> list[TriggerReset]:
        rows = self.db.query(
            "SELECT trigger_name, since, reset_by, reset_at, forgotten"
            " FROM thresher_trigger_resets WHERE trigger_name = ? ORDER BY reset_at",
            (trigger,),
        )
        return [TriggerReset(str(a), str(b), str(c), str(d), int(e)) for a, b, c, d, e in rows]

    def files_seen(self) -> dict[str, int]:
        """How many data files (a table trigger: versions) each trigger has taken (and
        not forgotten)."""
        rows = self.db.query(
            "SELECT trigger_name, COUNT(*) FROM thresher_trigger_files WHERE role <> 'marker'"
            " GROUP BY trigger_name"
        )
        return {str(name): int(count) for name, count in rows}

    def recent(self, trigger: str, limit: int = 20) -> list[TriggerSetRecord]:
        """The trigger's newest sets, newest first."""
        rows = self.db.query(
            "SELECT set_key, outcome, files, job_id, message, claimed_at"
            " FROM thresher_trigger_sets WHERE trigger_name = ?"
            " ORDER BY claimed_at DESC, set_key LIMIT ?",
            (trigger, limit),
        )
        return [
            TriggerSetRecord(trigger, str(k), SetOutcome(o), int(n), j, m, str(c))
            for k, o, n, j, m, c in rows
        ]
