"""Every trigger the server runs: the config's (`[triggers.NAME]`, the operator's) and
the tenants' own (`/v1/triggers`, kept in the store), under one view (`every_trigger`),
and a trigger checked against the server config it runs under: its watch must lie under
`allowed_roots` and its `job` must make a job with the files it will take. A pattern
that matches no file yet is allowed (the files may come later), but said.

A trigger is known to the ledger of taken files by its key: a config trigger's name, or
`tenant/name` for a tenant's (`store/_trigger_defs.py`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from thresher.errors import SourceError, SpecError
from thresher.service.config import ConfigError, ServerConfig
from thresher.service.job_templates import check_job_template
from thresher.sources.files import confine
from thresher.sources.iceberg_catalog import table_identifier
from thresher.store import Store, TriggerDefRow
from thresher.triggers import candidates, list_watch
from thresher.triggers.settings import TriggerFields, TriggerSettings
from thresher.triggers.tables import (
    WATCHES,
    VersionRun,
    source_options,
    table_job_body,
)

__all__ = [
    "Watched",
    "check_trigger",
    "check_triggers",
    "every_trigger",
    "trigger_problems",
    "trigger_warnings",
    "warn_trigger",
]

log = logging.getLogger("thresher.service.triggers")

# A first listing at start that finds this many files has found enough to say whether
# the pattern matches (a prefix of millions is not listed twice at start).
CHECK_FILES = 10_000


@dataclass(frozen=True)
class Watched:
    """One trigger as the watcher and the listings see it."""

    key: str  # the ledger's name for it
    name: str
    settings: TriggerSettings
    declared: Literal["config", "tenant"]
    created_at: str | None = None
    updated_at: str | None = None
    # Why the watcher paused it (it failed too often in a row); None when it did not.
    paused_reason: str | None = None

    @property
    def paused(self) -> bool:
        return self.settings.paused


# Told of each stored trigger that cannot be read (its row, why); it is left out.
Unreadable = Callable[[TriggerDefRow, Exception], None]


def every_trigger(
    config: ServerConfig,
    store: Store,
    unreadable: Unreadable | None = None,
    tenant: str | None = None,
) -> list[Watched]:
    """The config's triggers, then the tenants' (read from the store each call, so one
    made, changed, paused or deleted is seen at the next call). A tenant's row that does
    not read as a trigger is left out and told to `unreadable` (default: logged), so it
    hides no other. With `tenant`, only the triggers that start its jobs: its own rows
    alone are read (by tenant, in SQL)."""
    declared = [(n, t) for n, t in config.triggers.items() if tenant in (None, t.tenant)]
    found = [Watched(name, name, t, "config") for name, t in declared]
    for row in store.trigger_defs.every(tenant):
        try:
            found.append(_tenants(row, config.limits(row.tenant).trigger_min_poll_seconds))
        except (ValidationError, ValueError) as exc:
            if unreadable is None:
                log.warning("trigger %s cannot be read: %s", row.key, exc)
            else:
                unreadable(row, exc)
    return found


def _tenants(row: TriggerDefRow, min_poll: float) -> Watched:
    """A tenant's trigger as stored, polling no more often than its tenant's limit allows
    now (a trigger made under an older, lower limit is slowed, not refused)."""
    settings = TriggerSettings.model_validate_json(row.settings)
    poll = max(settings.poll_seconds, min_poll)
    update = {"paused": row.paused, "tenant": row.tenant, "poll_seconds": poll}
    settings = settings.model_copy(update=update)
    return Watched(row.key, row.name, settings, "tenant", row.created_at, row.updated_at,
                   row.quarantined)  # fmt: skip


def check_triggers(config: ServerConfig) -> list[str]:
    """Refuse a config whose trigger would watch outside `allowed_roots` or would not
    make a job (ConfigError naming `triggers.<name>.<field>`); returns warnings, such as
    a pattern that matches no file yet (allowed: the files may come later)."""
    problems = [p for n, t in config.triggers.items() for p in trigger_problems(config, n, t)]
    if problems:
        raise ConfigError(problems)
    return [w for n, t in config.triggers.items() for w in trigger_warnings(n, t)]


def trigger_problems(config: ServerConfig, name: str, trigger: TriggerFields) -> list[str]:
    """What keeps the trigger from running, each naming `triggers.<name>.<field>`."""
    return [f"triggers.{name}.{p}" for p in check_trigger(config, trigger)]


def check_trigger(config: ServerConfig, trigger: TriggerFields) -> list[str]:
    """What keeps the trigger from running, each naming its field (`watch`, `job.model`,
    `job.notify.webhook`, …); empty when it would run. Its job is checked as a schedule's
    is, but for its files, which come from the watch (judged here)."""
    if trigger.table is not None and not WATCHES[trigger.table].is_path:
        watch = _name_problems(trigger.watch)
    else:
        watch = _watch_problems(config, trigger.watch)
    return watch + _job_problems(config, trigger)


def _job_problems(config: ServerConfig, trigger: TriggerFields) -> list[str]:
    source = trigger.job.get("source", {})
    if not isinstance(source, dict):
        return ["job.source: a table with at most `format`"]
    # A file trigger's job may name its format (`images`, or `csv` for files named
    # otherwise); a table trigger's format is its table's.
    taken = ("uri", "files", "format") if trigger.table else ("uri", "files")
    given = [f"source.{key}" for key in taken if key in source]
    given += ["input_file_id"] if "input_file_id" in trigger.job else []
    options = source.get("options", {})
    pins = WATCHES[trigger.table].pins if trigger.table else ()
    given += [f"source.options.{k}" for k in pins if isinstance(options, dict) and k in options]
    if given:
        what = "the versions" if trigger.table else "the files"
        return [f"job.{key}: the trigger gives its job {what} it takes; remove it"
                for key in given]  # fmt: skip
    if trigger.table is not None:
        run = VersionRun(trigger.watch.rstrip("/"), (WATCHES[trigger.table].example,))
        job = table_job_body("check", trigger, "", run)  # the job a run will make
    else:
        example = {**source, "files": [f"{trigger.watch.rstrip('/')}/example"]}
        job = {**trigger.job, "source": example}  # the job a set will make
    return [f"job.{p}" for p in check_job_template(config, job, check_roots=False)]


def _name_problems(watch: str) -> list[str]:
    """A table named in a catalog (the catalog, in `job.source.options`, is checked with
    the job)."""
    try:
        table_identifier(watch, "watch")
    except SpecError as exc:
        return exc.problems
    return []


def _watch_problems(config: ServerConfig, watch: str) -> list[str]:
    roots = config.allowed_roots
    local = "://" not in watch or watch.startswith("file://")
    if local and not watch.removeprefix("file://").startswith("/"):
        return [f"watch: {watch} is not an absolute path"]
    try:
        confine([watch.rstrip("/") + "/" if not local else watch], roots)
    except SourceError:
        shown = ", ".join(roots) or "none"
        return [f"watch: {watch} is outside the server's allowed_roots ({shown})"]
    return []


def trigger_warnings(name: str, trigger: TriggerFields) -> list[str]:
    """What is odd but allowed, each naming `triggers.<name>.<field>`."""
    return [f"triggers.{name}.{w}" for w in warn_trigger(trigger)]


def warn_trigger(trigger: TriggerFields) -> list[str]:
    """What is odd but allowed: a watch that cannot be listed yet, or whose pattern
    matches no file yet (a table trigger's: no table there yet). The listing stops at
    the first file the pattern matches (or after CHECK_FILES files)."""
    if trigger.table is not None:
        try:
            watch = WATCHES[trigger.table]
            versions = watch.versions_after(
                trigger.watch.rstrip("/"), None, source_options(trigger)
            )
        except Exception as exc:  # any filesystem's or table library's error
            return [f"watch: cannot be read yet ({exc}); the trigger will keep looking"]
        return [] if versions else [f"watch: no {trigger.table} table at {trigger.watch} yet"]
    try:
        for count, found in enumerate(list_watch(trigger.watch)):
            if candidates([found], {}, trigger)[0]:
                return []
            if count + 1 >= CHECK_FILES:
                break
    except Exception as exc:  # any filesystem's error (botocore's are not OSErrors)
        return [f"watch: cannot be listed yet ({exc}); the trigger will keep looking"]
    return [f"pattern: {trigger.pattern!r} matches no file under {trigger.watch} yet"]
