"""A job's profile, merged as its shards commit rather than after the last one.

Merging a job's shard profiles (parsing each one's JSON and sketches, then merging them)
took the coordinator tens of milliseconds once every worker was done, with the cores
idle and the job not yet finished. Folded in as each shard commits, the merge runs while
the workers work. It keeps shard order, so the job's profile is the one
`ProfileTable.merge_shards` gives from the store, and a resumed job's (whose earlier
shards are read back at the start) the same as an uninterrupted run's: a shard that
arrives before one it follows waits for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from thresher.profiles.profile import Profile
from thresher.store import Store

__all__ = ["ProfileFold"]


class ProfileFold:
    def __init__(self, store: Store, job_id: str, order: Sequence[int]) -> None:
        self._store, self._job_id = store, job_id
        self._order = list(order)
        self._next = 0  # how much of `_order` is merged (or known to have no profile)
        self._merged: Profile | None = None
        self._waiting: dict[int, Profile] = {}
        self._seen: set[int] = set()
        self._replaced = False  # a shard committed twice: the store's is the one that holds
        for index, text in store.profiles.of_shards(job_id).items():  # a resumed job's
            self.add(index, text)

    def add(self, index: int, text: str | None) -> None:
        """Shard `index` committed, with `text` its profile's JSON (None: it has none)."""
        if index in self._seen:
            self._replaced = True
            return
        self._seen.add(index)
        if text is not None:
            self._waiting[index] = Profile.from_text(text)
        while self._next < len(self._order) and self._order[self._next] in self._seen:
            self._fold(self._order[self._next])
            self._next += 1

    def profile(self) -> Profile | None:
        """The job's profile once its shards are in: the committed shards' profiles
        merged in shard order (None when none has one)."""
        if self._replaced:
            return self._store.profiles.merge_shards(self._job_id)
        for index in self._order[self._next :]:  # after a gap: a shard that never committed
            self._fold(index)
        self._next = len(self._order)
        return self._merged

    def _fold(self, index: int) -> None:
        profile = self._waiting.pop(index, None)
        if profile is None:
            return
        if self._merged is None:  # merged into an empty one, as merge_profiles does
            self._merged = Profile(sample_rate=profile.sample_rate)
        self._merged.merge(profile)
