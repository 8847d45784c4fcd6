"""What `thresher schedules` prints: each schedule's next fire times (in its zone and in
UTC) before anything runs, and how its last tick ended."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from thresher.schedules.settings import ScheduleSettings
from thresher.store import TickLedger

__all__ = ["describe_schedules"]


def describe_schedules(
    schedules: Iterable[tuple[str, ScheduleSettings, bool]],
    ledger: TickLedger,
    now: datetime,
    count: int = 5,
) -> list[str]:
    """Lines of text: per schedule (its key, settings, whether it is paused), its cron and
    zone, policies, last tick, next fires."""
    lines = []
    for name, settings, paused in schedules:
        cron = settings.schedule
        state = "paused" if paused else "active"
        lines.append(
            f"{name}: {settings.cron} ({settings.timezone}), {state}, tenant {settings.tenant},"
            f" catchup {settings.catchup.value}, overlap {settings.overlap}"
        )
        recent = ledger.recent(name, limit=1)
        if recent:
            last = recent[0]
            about = last.job_id or last.message or ""
            lines.append(f"  last tick: {last.nominal.isoformat()} {last.outcome.value} {about}")
        for instant in cron.after(now, count):
            local = instant.astimezone(cron.zone).isoformat(timespec="minutes")
            lines.append(f"  next: {local}  ({instant.isoformat(timespec='minutes')})")
    return lines
