"""Schedules: when a cron schedule fires (`ticks.py`, daylight-saving time exact) and
which of its fire times to run or record as missed after a gap (`catchup.py`). The tick
ledger that makes each fire time one job, ever, is the store's (`store/_ticks.py`).
"""

from __future__ import annotations

from thresher.schedules.catchup import Catchup, TickFate, due_ticks
from thresher.schedules.ticks import Cron, CronError

__all__ = ["Catchup", "Cron", "CronError", "TickFate", "due_ticks"]
