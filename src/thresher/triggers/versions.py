"""A table's versions as a trigger takes them: each version (a Delta version, an Iceberg
snapshot, the ends of Kafka topics' partitions) one manifest row of the trigger ledger,
a run of new ones one set."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from thresher.store import TakenFile

__all__ = ["ROLE", "TableVersion", "VersionRun"]

ROLE = "version"  # a table version's role in the trigger ledger


@dataclass(frozen=True, order=True)
class TableVersion:
    """One version of a table: `number` orders them (Delta's version, Iceberg's sequence
    number); `id` is what a source pins it by (the same number, a snapshot id)."""

    number: int
    id: str


@dataclass(frozen=True)
class VersionRun:
    """New versions of the table at `table`, oldest first: one set, one job."""

    table: str
    versions: tuple[TableVersion, ...]

    def key(self, epoch: int = 0) -> str:
        """The set's identity, as `FileSet.key`: the same run at one epoch, one key."""
        digest = hashlib.sha256(f"epoch {epoch}\ntable {self.table}\n".encode())
        for v in self.versions:
            digest.update(f"{v.number}\0{v.id}\n".encode())
        return digest.hexdigest()[:32]

    def taken(self) -> list[TakenFile]:
        """The run's manifest rows: one per version."""
        return [TakenFile(self.table, v.number, v.id, ROLE) for v in self.versions]
