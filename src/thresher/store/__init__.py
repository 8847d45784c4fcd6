"""The job store: what the coordinator remembers across crashes.

By default a SQLite file (WAL mode) at `$THRESHER_STORE`, else
`$XDG_DATA_HOME/thresher/store.db` (`~/.local/share/thresher/store.db`). Any
`postgresql://` URL works too, for a store shared by several machines.
"""

from __future__ import annotations

import os
from pathlib import Path

from thresher.store._actuals import NewPart, PartRecord, PredictionInfo
from thresher.store._backfills import BackfillRow, BackfillState
from thresher.store._batches import BatchRow, BatchStatus
from thresher.store._counted import AtLimit
from thresher.store._db import Database, IdempotencyConflict, StoreError, now
from thresher.store._deliveries import DeliveryState
from thresher.store._jobs import Store
from thresher.store._leases import Lease, SlotRequest, Slots, retry_lease
from thresher.store._owners import (
    beat_seconds,
    beating,
    keep_beating,
    owner_host,
    this_host,
    this_owner,
)
from thresher.store._queue import RunningJob, WaitingJob
from thresher.store._records import JobRecord, JobState, ShardRecord, ShardState, Totals
from thresher.store._requests import BufferedRequest, DuplicateRequest, RequestState, WaitingGroup
from thresher.store._retries import RetryShard, RetryShardState
from thresher.store._schedules import ScheduleExists, ScheduleRow, schedule_key
from thresher.store._ticks import Tick, TickLedger, TickOutcome, tick_key
from thresher.store._trigger_defs import TriggerDefRow, TriggerExists
from thresher.store._triggers import SetOutcome, TakenFile, TriggerLedger, set_job_key
from thresher.store._uploads import FileRecord
from thresher.store._webhook_endpoints import EndpointRow

# Every table is an attribute of Store (`store.batches`, `store.ticks`, ...); what is
# exported here are the rows and records they hand out, and the two ledgers' types.
__all__ = [
    "AtLimit",
    "BackfillRow",
    "BackfillState",
    "BatchRow",
    "BatchStatus",
    "BufferedRequest",
    "DeliveryState",
    "DuplicateRequest",
    "EndpointRow",
    "FileRecord",
    "IdempotencyConflict",
    "JobRecord",
    "JobState",
    "Lease",
    "NewPart",
    "PartRecord",
    "PredictionInfo",
    "RequestState",
    "RetryShard",
    "RetryShardState",
    "RunningJob",
    "ScheduleExists",
    "ScheduleRow",
    "SetOutcome",
    "ShardRecord",
    "ShardState",
    "SlotRequest",
    "Slots",
    "Store",
    "StoreError",
    "TakenFile",
    "Tick",
    "TickLedger",
    "TickOutcome",
    "Totals",
    "TriggerDefRow",
    "TriggerExists",
    "TriggerLedger",
    "WaitingGroup",
    "WaitingJob",
    "beat_seconds",
    "beating",
    "default_store_url",
    "keep_beating",
    "now",
    "open_store",
    "owner_host",
    "read_store",
    "retry_lease",
    "schedule_key",
    "set_job_key",
    "this_host",
    "this_owner",
    "tick_key",
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
