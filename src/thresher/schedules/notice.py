"""What a schedule's `notify.on_missed` hears of: a tick that did not start its job.

The ticker records each tick it decides (the store's tick ledger); one recorded missed
or failed becomes a `TickNotice`, which the service hands to every `on_tick_missed`
hook (the webhook sender among them: `thresher.notify`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from thresher.schedules.settings import ScheduleSettings

__all__ = ["TickNotice"]


@dataclass(frozen=True)
class TickNotice:
    """A tick that did not start its job: the schedule's ledger key (`name`, or
    `tenant/name` for a tenant's), its name and settings, the tick's nominal time, the
    outcome recorded (`missed` or `failed`) and why."""

    key: str
    name: str
    settings: ScheduleSettings
    nominal: datetime
    outcome: str
    message: str | None
