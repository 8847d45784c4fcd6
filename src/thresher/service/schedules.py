"""Every schedule the server runs: the config's (`[schedules.NAME]`, the operator's) and
the tenants' own (`/v1/schedules`, kept in the store), under one view.

A schedule is known to the tick ledger by its key: a config schedule's name, or
`tenant/name` for a tenant's (`store/_schedules.py`). Pausing works for both: a tenant's
schedule keeps `paused` in its settings; a config schedule's switch is a store row that
outlives restarts (the config's `paused` is what it starts as).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pydantic import ValidationError

from thresher.notify.urls import check_webhook_url
from thresher.schedules import CronError
from thresher.schedules.clock import Clock
from thresher.schedules.settings import ScheduleFields, ScheduleSettings
from thresher.service.config import ConfigError, ServerConfig
from thresher.service.job_templates import check_job_template
from thresher.store import ScheduleRow, Store

log = logging.getLogger("thresher.service.schedules")

__all__ = [
    "Scheduled",
    "UnknownSchedule",
    "check_schedule",
    "check_schedules",
    "every_schedule",
    "find_schedule",
    "quarantine_schedule",
    "set_paused",
    "trigger",
]


class UnknownSchedule(LookupError):
    """No schedule has that key (or the tenant has none of that name)."""


@dataclass(frozen=True)
class Scheduled:
    """One schedule as the ticker and the listings see it."""

    key: str  # the tick ledger's name for it
    name: str
    settings: ScheduleSettings
    declared: Literal["config", "api"]
    paused: bool
    created_at: str | None = None
    updated_at: str | None = None
    # Why its ticker paused it (it failed too often in a row); None when it did not.
    paused_reason: str | None = None


# Told of each stored schedule that cannot be read (its row, why); it is left out.
Unreadable = Callable[[ScheduleRow, Exception], None]


def every_schedule(
    config: ServerConfig,
    store: Store,
    unreadable: Unreadable | None = None,
    tenant: str | None = None,
) -> list[Scheduled]:
    """The config's schedules, then the tenants', each with its pause switch (and its
    quarantine, which pauses it) applied. A tenant's row that does not read as a schedule
    is left out, and told to `unreadable` (default: logged), so it hides no other. With
    `tenant`, only the schedules run for it: its rows alone are read (by tenant, in SQL)."""
    rows = store.schedules.every(tenant)
    switches = {r.key: r for r in rows if r.settings is None}
    declared = [(n, s) for n, s in config.schedules.items() if tenant in (None, s.tenant)]
    found = [_configs(name, s, switches.get(name)) for name, s in declared]
    for row in rows:
        if row.settings is None:
            continue
        try:
            found.append(_tenants(row))
        except (ValidationError, ValueError) as exc:
            if unreadable is None:
                log.warning("schedule %s cannot be read: %s", row.key, exc)
            else:
                unreadable(row, exc)
    return found


def quarantine_schedule(store: Store, schedule: Scheduled | ScheduleRow, reason: str) -> None:
    """Pause a schedule its ticker failed on too often, keeping `reason` (shown in its
    GET as `paused_reason`) until it is resumed."""
    tenant = schedule.settings.tenant if isinstance(schedule, Scheduled) else schedule.tenant
    store.schedules.quarantine(schedule.key, tenant, schedule.name, reason)


def find_schedule(config: ServerConfig, store: Store, key: str) -> Scheduled:
    """The schedule `key`; UnknownSchedule if there is none, naming the key it looks
    like, if any (`did you mean 'nightly'?`)."""
    schedules = every_schedule(config, store)
    for schedule in schedules:
        if schedule.key == key:
            return schedule
    close = difflib.get_close_matches(key, [s.key for s in schedules], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UnknownSchedule(f"no schedule {key!r}{hint}")


def set_paused(config: ServerConfig, store: Store, key: str, paused: bool) -> Scheduled:
    """Pause (no tick fires; fire times passed while paused are not run on resume, as
    after downtime the catch-up policy decides) or resume the schedule `key`."""
    schedule = find_schedule(config, store, key)
    table = store.schedules
    if schedule.declared == "config":
        table.set_paused(key, schedule.settings.tenant, schedule.name, paused)
    else:
        settings = schedule.settings.model_copy(update={"paused": paused})
        table.replace(schedule.settings.tenant, schedule.name, settings.model_dump_json())
    return find_schedule(config, store, key)


def trigger(config: ServerConfig, store: Store, key: str, now: datetime | None = None) -> datetime:
    """Ask for a manual tick of schedule `key` now (even while it is paused): a claim in
    the ledger that the ticker takes over and starts like any tick. Returns its time."""
    find_schedule(config, store, key)
    at = now or datetime.now(UTC)
    if not store.ticks.claim(key, at, store.ticks.MANUAL, manual=True):
        raise UnknownSchedule(f"schedule {key!r} already has a tick at {at.isoformat()}")
    return at


def check_schedule(config: ServerConfig, schedule: ScheduleFields) -> list[str]:
    """Why a schedule would not run, each problem naming its field (`cron`, `job.model`,
    `notify.on_missed`, …); empty when it would. A cron must fire within five years of
    the server's clock (`0 0 31 2 *` is valid cron, and never fires)."""
    problems = [f"job.{p}" for p in check_job_template(config, schedule.job)]
    try:
        schedule.schedule.check_fires(Clock.from_environment().now())
    except CronError as exc:
        problems.insert(0, str(exc))
    if schedule.notify is not None:
        try:
            check_webhook_url(schedule.notify.on_missed, config.webhook_allow_private)
        except ValueError as exc:
            problems.append(f"notify.on_missed: {exc}")
    return problems


def check_schedules(config: ServerConfig) -> None:
    """Refuse a config whose schedule would not make a job: ConfigError names
    `schedules.<name>.job.<field>` for each problem, so `thresher serve` exits 2."""
    problems = [
        f"schedules.{name}.{problem}"
        for name, schedule in config.schedules.items()
        for problem in check_schedule(config, schedule)
    ]
    if problems:
        raise ConfigError(problems)


def _configs(name: str, settings: ScheduleSettings, switch: ScheduleRow | None) -> Scheduled:
    if switch is None:
        return Scheduled(name, name, settings, "config", settings.paused)
    paused = settings.paused if switch.paused is None else switch.paused
    reason = switch.quarantined
    return Scheduled(name, name, settings, "config", paused or reason is not None,
                     paused_reason=reason)  # fmt: skip


def _tenants(row: ScheduleRow) -> Scheduled:
    assert row.settings is not None
    settings = ScheduleSettings.model_validate_json(row.settings)
    paused, reason = settings.paused or row.quarantined is not None, row.quarantined
    return Scheduled(
        row.key, row.name, settings, "api", paused, row.created_at, row.updated_at, reason
    )
