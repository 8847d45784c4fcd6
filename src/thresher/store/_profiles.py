"""Profiles in the store: each shard's, committed with the shard (`thresher_shards.profile`,
written by `Store.shard_done`), and the merged profile of a job or a reference file
(`thresher_profiles`, by subject: a job id, or `file:<uri>@<version>`)."""

from __future__ import annotations

from dataclasses import dataclass

from thresher.profiles.profile import Profile, merge_profiles
from thresher.store._db import Database, StoreError, now

__all__ = ["ProfileTable"]


@dataclass(frozen=True)
class ProfileTable:
    db: Database

    def save(self, subject: str, profile: Profile) -> None:
        """Keep `profile` as `subject`'s, replacing any earlier one (a job resumed after
        it finished once, a reference file profiled again)."""
        text = profile.to_text()
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM thresher_profiles WHERE subject = ?", (subject,))
            cur.execute(
                "INSERT INTO thresher_profiles (subject, profile, created_at) VALUES (?, ?, ?)",
                (subject, text, now()),
            )

    def get(self, subject: str) -> Profile | None:
        rows = self.db.query("SELECT profile FROM thresher_profiles WHERE subject = ?", (subject,))
        return Profile.from_text(rows[0][0]) if rows else None

    def of_job(self, job_id: str) -> Profile:
        """The job's profile; StoreError naming why there is none."""
        profile = self.get(job_id)
        if profile is None:
            raise StoreError(
                f"job {job_id!r} has no profile: it has not succeeded, or ran with"
                " [monitor] profile = false"
            )
        return profile

    def of_shards(self, job_id: str) -> dict[int, str]:
        """The job's done shards' profiles (JSON), by shard index, in shard order."""
        rows = self.db.query(
            "SELECT idx, profile FROM thresher_shards WHERE job_id = ? AND state = 'done'"
            " AND profile IS NOT NULL ORDER BY idx",
            (job_id,),
        )
        return {int(index): text for index, text in rows}

    def merge_shards(self, job_id: str) -> Profile | None:
        """The job's profile: its done shards' profiles merged in shard order (so a resumed
        job merges exactly what an uninterrupted one would); None when no shard has one."""
        texts = self.of_shards(job_id).values()
        if not texts:
            return None
        return merge_profiles([Profile.from_text(text) for text in texts])
