"""Every table of the store but the jobs' own, each an attribute of `Store`: callers write
`store.batches.find(...)`, never a table built by hand around `store.db`."""

from __future__ import annotations

from thresher.store.actuals import ActualsTable
from thresher.store.announced import Announcements
from thresher.store.batches import BatchTable
from thresher.store.db import Database
from thresher.store.deliveries import DeliveryTable
from thresher.store.leases import SlotLeases
from thresher.store.owners import OwnerTable
from thresher.store.profiles import ProfileTable
from thresher.store.queue import JobQueue
from thresher.store.requests import RequestTable
from thresher.store.retries import RetryLog
from thresher.store.schedules import ScheduleTable
from thresher.store.ticks import TickLedger
from thresher.store.trigger_defs import TriggerDefTable
from thresher.store.triggers import TriggerLedger
from thresher.store.uploads import FileTable, TokenTable
from thresher.store.views import JobViews
from thresher.store.webhook_endpoints import EndpointTable


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
        self.batches = BatchTable(db)
        self.files = FileTable(db)
        self.tokens = TokenTable(db)
        self.requests = RequestTable(db)
        self.deliveries = DeliveryTable(db)
        self.webhook_endpoints = EndpointTable(db)
        self.schedules = ScheduleTable(db)
        self.ticks = TickLedger(db)
        self.trigger_defs = TriggerDefTable(db)
        self.triggers = TriggerLedger(db)
