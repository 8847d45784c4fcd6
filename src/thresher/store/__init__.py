"""The job store: what the coordinator remembers across crashes.

By default a SQLite file (WAL mode) at `$THRESHER_STORE`, else
`$XDG_DATA_HOME/thresher/store.db` (`~/.local/share/thresher/store.db`). Any
`postgresql://` URL works too, for a store shared by several machines.
"""

from __future__ import annotations

import os
from pathlib import Path

from thresher.store.db import Database, IdempotencyConflict, StoreError
from thresher.store.jobs import Store
from thresher.store.records import JobRecord, JobState, ShardRecord, ShardState, Totals

__all__ = [
    "IdempotencyConflict",
    "JobRecord",
    "JobState",
    "ShardRecord",
    "ShardState",
    "Store",
    "StoreError",
    "Totals",
    "default_store_url",
    "open_store",
    "read_store",
]


def default_store_url() -> str:
    """`$THRESHER_STORE`, else a SQLite file under the user's data directory."""
    if os.environ.get("THRESHER_STORE"):
        return os.environ["THRESHER_STORE"]
    data_home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{data_home / 'thresher' / 'store.db'}"


def open_store(url: str | None = None, owner: str | None = None) -> Store:
    """The store at `url` (or the default one), its tables created if needed; the jobs it
    starts or resumes are recorded under `owner` (default: this process)."""
    return Store(Database(url or default_store_url()), owner)


def read_store(url: str | None = None) -> Store:
    """The store at `url` (or the default one) for commands that only look: nothing is
    created or migrated (a SQLite file is opened read-only); a store at another schema
    version than this code's is a StoreError saying what to do. A SQLite file not there yet
    reads as an empty store (its tables made in memory)."""
    db = Database(url or default_store_url(), read_only=True)
    return Store(db, migrating=db.blank)
