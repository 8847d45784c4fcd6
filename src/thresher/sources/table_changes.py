"""What a run of a table's changes added — Delta's versions, Iceberg's snapshots — as a
table trigger's job reads them: only the files they added when every one appended, else
the whole table at the last (`why` says which change did more)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ChangesRead"]


@dataclass(frozen=True)
class ChangesRead:
    """What changes `first`..`last` (a table's `unit`s) added: `files` (as the table's
    log or manifests name them), or None with `why` when the whole table at `last` is
    read."""

    unit: Literal["version", "snapshot"]
    first: int
    last: int
    files: frozenset[str] | None
    why: str | None = None

    def describe(self) -> dict[str, object]:
        """For the job's manifest (`source_read`)."""
        span = [self.first, self.last]
        if self.files is None:
            return {f"{self.unit}s": span, "rows": "whole table", self.unit: self.last,
                    "why": self.why}  # fmt: skip
        return {f"{self.unit}s": span, "rows": "added", "files": len(self.files)}
