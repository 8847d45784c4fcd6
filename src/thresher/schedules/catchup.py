"""Which fire times to run now, and which to record as missed, after any gap.

The scheduler remembers the last fire time it decided about; at each look it asks for
every fire time since then up to `now` and decides each one. A tick within `grace` of
`now` is on time and runs. An older one is overdue (the server was down, or busy), and
the policy decides:

- `latest` (the default): only the most recent tick runs, the rest are missed;
- `all`: the newest `max_catchup` overdue ticks run, in order; older ones are missed;
- `none`: every overdue tick is missed.

Whatever the policy, a tick older than `starting_deadline` is missed: a nightly job that
would start at noon is worse than none.

    >>> from datetime import datetime, timedelta, UTC
    >>> cron = Cron("0 * * * *")
    >>> down, now = datetime(2026, 1, 1, 0, 30, tzinfo=UTC), datetime(2026, 1, 1, 3, 30, tzinfo=UTC)
    >>> [(t.hour, fate.value) for t, fate in due_ticks(cron, down, now, Catchup.LATEST)]
    [(1, 'missed'), (2, 'missed'), (3, 'run')]
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from thresher.schedules.ticks import Cron

__all__ = ["Catchup", "TickFate", "due_ticks"]

# A gap so long that its ticks are not listed one by one (a minutely schedule down for a
# week): only the newest this many are decided, older ones are never recorded.
MAX_LISTED = 10_000


class Catchup(StrEnum):
    LATEST = "latest"
    ALL = "all"
    NONE = "none"


class TickFate(StrEnum):
    RUN = "run"
    MISSED = "missed"


def due_ticks(
    cron: Cron,
    since: datetime,
    now: datetime,
    catchup: Catchup,
    *,
    max_catchup: int = 10,
    starting_deadline: timedelta | None = None,
    grace: timedelta = timedelta(minutes=1),
) -> list[tuple[datetime, TickFate]]:
    """Every fire time in (since, now], oldest first, each to run or to record missed."""
    times = cron.between(since, now, limit=MAX_LISTED)
    overdue = [t for t in times if now - t > grace]
    running = set(times[len(overdue) :])  # on time
    if catchup == Catchup.LATEST and times and not running:
        running.add(times[-1])
    elif catchup == Catchup.ALL:
        running.update(overdue[-max_catchup:] if max_catchup > 0 else [])
    if starting_deadline is not None:
        running = {t for t in running if now - t <= starting_deadline}
    return [(t, TickFate.RUN if t in running else TickFate.MISSED) for t in times]
