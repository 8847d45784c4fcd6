"""A watcher's memory of the files a trigger has taken, so a look reads from the store
only what was taken since the last one, not the whole manifest (a trigger that took
100,000 files would read 100,000 rows at every poll).

Each look reads the manifest's rows taken since the newest one remembered, less
`OVERLAP`: a claim stamps its rows when its transaction starts and commits later, and
servers' clocks differ a little, so a row may land slightly behind the newest one seen.
What the memory still lacks is caught anyway: a claim that loses a file to another
claim makes the watcher `forget` and read the whole manifest at its next look, and a
reset (which deletes rows) changes the trigger's epoch, which does the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from thresher.store import TriggerLedger

__all__ = ["OVERLAP", "TakenFiles"]

OVERLAP = timedelta(minutes=5)


@dataclass
class TakenFiles:
    """What trigger `key` has taken, as `complete_sets` reads it: path -> its (size,
    version) pairs."""

    ledger: TriggerLedger
    key: str
    epoch: int | None = None
    files: dict[str, set[tuple[int, str]]] = field(default_factory=dict)
    newest: str | None = None

    def current(self, epoch: int) -> dict[str, set[tuple[int, str]]]:
        """The files taken up to now, for a look at the trigger's `epoch`."""
        if epoch != self.epoch:
            self.forget()
            self.epoch = epoch
        since = None
        if self.newest is not None:
            since = (datetime.fromisoformat(self.newest) - OVERLAP).isoformat()
        for path, size, version, taken_at in self.ledger.taken_since(self.key, since):
            self.files.setdefault(path, set()).add((size, version))
            self.newest = max(self.newest or taken_at, taken_at)
        return self.files

    def forget(self) -> None:
        """Read the whole manifest again at the next look."""
        self.files, self.newest, self.epoch = {}, None, None
