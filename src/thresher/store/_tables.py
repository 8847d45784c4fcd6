"""Every table of the store but the jobs' own, each an attribute of `Store`: callers write
`store.batches.find(...)`, never a table built by hand around `store.db`."""

from __future__ import annotations

from thresher.store._actuals import ActualsTable
from thresher.store._announced import Announcements
from thresher.store._backfills import BackfillTable
from thresher.store._batches import BatchTable
from thresher.store._db import Database
from thresher.store._decisions import Decisions
from thresher.store._deliveries import DeliveryTable
from thresher.store._leases import SlotLeases
from thresher.store._owners import OwnerTable
from thresher.store._profiles import ProfileTable
from thresher.store._queue import JobQueue
from thresher.store._requests import RequestTable
from thresher.store._retries import RetryLog
from thresher.store._schedules import ScheduleTable
from thresher.store._ticks import TickLedger
from thresher.store._trigger_defs import TriggerDefTable
from thresher.store._triggers import TriggerLedger
from thresher.store._uploads import FileTable, TokenTable
from thresher.store._views import JobViews
from thresher.store._webhook_endpoints import EndpointTable


class Tables:
    """The tables around one Database; building them touches nothing."""

    def __init__(self, db: Database, owner_timeout: float) -> None:
        self.db = db
        self.owners = OwnerTable(db, owner_timeout)
        self.retries = RetryLog(db)
        self.leases = SlotLeases(db, self.owners)
        self.queue = JobQueue(db)
        self.views = JobViews(db)
        self.profiles = ProfileTable(db)
        self.actuals = ActualsTable(db)
        self.announced = Announcements(db)
        self.decisions = Decisions(db)
        self.batches = BatchTable(db)
        self.files = FileTable(db)
        self.tokens = TokenTable(db)
        self.requests = RequestTable(db)
        self.deliveries = DeliveryTable(db)
        self.webhook_endpoints = EndpointTable(db)
        self.schedules = ScheduleTable(db)
        self.ticks = TickLedger(db)
        self.backfills = BackfillTable(db)
        self.trigger_defs = TriggerDefTable(db)
        self.triggers = TriggerLedger(db)
