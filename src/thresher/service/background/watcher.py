"""The watcher: a background thread that starts a job for each complete set of new files
in the watched folders and prefixes of the config's triggers (`[triggers.NAME]`) and of
the tenants' own (`/v1/triggers`, ledger key `tenant/name`).

At each look (`look(now)`; the thread calls it with the real clock, tests with any
clock and listing they like) the triggers are read again (`every_trigger`: a tenant's
trigger made, changed, paused or deleted counts from this look on, without a restart),
and for each trigger not paused whose `poll_seconds` have passed since its last look:

1. sets left claimed by a watcher that died are finished first (same key, same job);
2. the watch is listed (page by page, `triggers.list_watch`), the files already taken
   are brought up to date from the store (only those taken since the last look:
   `triggers/taken.py`), and `triggers.complete_sets` says which new ones are complete;
3. each set is claimed in the store with its files, in one transaction (one claim wins,
   across threads, restarts and servers on one store); only the winner queues the job —
   the trigger's `job` with `source.files` set to exactly the set's files, under an
   idempotency key made from the set — and settles the set with the job's id.

A table trigger (`table = "delta"`) takes the table's versions after the newest taken as
one set instead, in the same ledger and the same claim (`triggers/tables.py`), and its
job reads what they added.

A job the submission refuses (a file that vanished, a column that is not there) settles
its set as failed, with why; its files stay taken, and `thresher triggers reset` is how to
take them again. Any other error (the store busy, a listing that failed) leaves the set
claimed, and the next look tries it again with the same key. Triggered jobs are jobs
like any other: queued, run, and announced by their `notify.webhook`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from thresher.loops import Strikes, start_loop
from thresher.service.errors import ServiceError, TooManyRequests
from thresher.service.state import ServiceState
from thresher.service.triggers import Watched, every_trigger
from thresher.store import (
    SetOutcome,
    TakenFile,
    TriggerDefRow,
    set_job_key,
    this_owner,
)
from thresher.triggers import (
    FileSeen,
    FileSet,
    Settling,
    TriggerSettings,
    complete_sets,
    file_digest,
)
from thresher.triggers import list_watch as default_listing
from thresher.triggers.tables import (
    WATCHES,
    TableVersion,
    TableWatch,
    VersionRun,
    new_run,
    table_job_body,
)
from thresher.triggers.taken import TakenFiles

__all__ = ["Watcher", "job_body", "start_watcher"]

log = logging.getLogger("thresher.service.background.watcher")

Listing = Callable[[str], Iterable[FileSeen]]
# Queues a job: (tenant, POST /v1/jobs body, idempotency key) -> its id.
Submit = Callable[[str, dict[str, object], str], str]
# The longest the thread waits between looks, so a tenant's new trigger is seen soon.
IDLE_SECONDS = 1.0


class Watcher:
    """Takes complete sets of new files for every trigger (`every_trigger`); `submit`
    queues a job (tenant, body, idempotency key) and returns its id."""

    def __init__(
        self, state: ServiceState, submit: Submit, listing: Listing = default_listing
    ) -> None:
        self.state, self.submit, self.listing = state, submit, listing
        self.ledger = state.store.triggers
        self.owner = this_owner()
        self.memory: dict[str, Settling] = {}
        self.taken: dict[str, TakenFiles] = {}
        self.next_look: dict[str, datetime] = {}
        self.strikes = Strikes("watcher", state.config.quarantine_after)
        # Config triggers quarantined (they have no row to pause): until the next start.
        self.quarantined: dict[str, str] = {}

    def look(self, now: datetime) -> float:
        """Look at every trigger that is due at `now`; returns the seconds to the next
        look (the shortest `poll_seconds`, at most IDLE_SECONDS). A trigger that raises (a
        listing that fails, a row that does not read) is counted by its key and, after
        `quarantine_after` looks in a row, paused with the reason; the others go on."""
        table = self.state.store.trigger_defs

        def unreadable(row: TriggerDefRow, exc: Exception) -> None:
            self.strikes.failed(row.key, exc, partial(table.quarantine, row.key))

        triggers = every_trigger(self.state.config, self.state.store, unreadable)
        keys = {t.key for t in triggers}
        for gone in (set(self.memory) | set(self.next_look)) - keys:  # deleted: forget it
            self.memory.pop(gone, None)
            self.next_look.pop(gone, None)
            self.taken.pop(gone, None)
        for watched in triggers:
            if watched.paused or watched.key in self.quarantined:
                continue
            if now < self.next_look.get(watched.key, now):
                continue
            self.next_look[watched.key] = now + timedelta(seconds=watched.settings.poll_seconds)
            self.strikes.attempt(
                watched.key,
                partial(self._look_at, watched, now),
                partial(self._quarantine, watched),
            )
        return min([t.settings.poll_seconds for t in triggers] + [IDLE_SECONDS])

    def _quarantine(self, watched: Watched, reason: str) -> None:
        """Pause a trigger the watcher failed on too often: a tenant's in the store, with
        the reason (its GET shows it); a config one until the server starts again."""
        if watched.declared == "tenant":
            self.state.store.trigger_defs.quarantine(watched.key, reason)
        else:
            self.quarantined[watched.key] = reason

    def _look_at(self, watched: Watched, now: datetime) -> None:
        key_of, trigger = watched.key, watched.settings
        for key in self.ledger.unsettled(key_of):
            self._start(watched, key)
        if trigger.table is not None:
            self._look_at_table(watched, WATCHES[trigger.table])
            return
        files = list(self.listing(trigger.watch))
        epoch = self.ledger.epoch(key_of)
        remembered = self.taken.setdefault(key_of, TakenFiles(self.ledger, key_of))
        taken = remembered.current(epoch)
        memory = self.memory.setdefault(key_of, Settling())
        for found in complete_sets(files, taken, trigger, memory, now):
            key = found.key(epoch)
            if self.ledger.claim(key_of, key, _taken_files(found, trigger.watch), self.owner):
                log.info("trigger %s: took %d new files as set %s", key_of, len(found.files), key)
                self._start(watched, key)
            else:  # another claim took some of its files: read the whole manifest again
                remembered.forget()

    def _look_at_table(self, watched: Watched, watch: TableWatch) -> None:
        """A table trigger's look: the versions after the newest taken, as one set."""
        key_of = watched.key
        epoch = self.ledger.epoch(key_of)
        remembered = self.taken.setdefault(key_of, TakenFiles(self.ledger, key_of))
        run = new_run(watch, watched.settings, remembered.current(epoch))
        if run is None:
            return
        key = run.key(epoch)
        if self.ledger.claim(key_of, key, run.taken(), self.owner):
            first, last = run.versions[0].id, run.versions[-1].id
            log.info("trigger %s: took versions %s..%s as set %s", key_of, first, last, key)
            self._start(watched, key)
        else:  # another server took some of them: read the whole manifest again
            remembered.forget()

    def _start(self, watched: Watched, key: str) -> None:
        """Queue a claimed set's job (none for a set of no files) and settle the set."""
        name, trigger = watched.key, watched.settings
        body = self._body(watched, key)
        if body is None:
            self.ledger.settle(name, key, SetOutcome.EMPTY, message="a marker with no new files")
            return
        try:
            job_id = self.submit(trigger.tenant, body, set_job_key(name, key))
        except ServiceError as exc:  # the submission is refused: trying again would be too
            if isinstance(exc, TooManyRequests) and exc.retry_after is not None:
                # Over a tenant limit that waiting lifts: the set stays claimed, unsettled,
                # and the next look submits it again.
                log.info("trigger %s: set %s waits: %s", name, key, exc)
                return
            self.ledger.settle(name, key, SetOutcome.FAILED, message=str(exc)[:2000])
            log.warning("trigger %s: set %s could not start: %s", name, key, exc)
            return
        self.ledger.settle(name, key, SetOutcome.STARTED, job_id=job_id)
        log.info("trigger %s: set %s started job %s", name, key, job_id)

    def _body(self, watched: Watched, key: str) -> dict[str, Any] | None:
        """The job of a claimed set; None for a set of no files."""
        trigger = watched.settings
        if trigger.table is not None:
            found = [TableVersion(n, v) for n, v in self.ledger.set_versions(watched.key, key)]
            run = VersionRun(trigger.watch.rstrip("/"), tuple(found))
            return table_job_body(watched.name, trigger, key, run)
        files = self.ledger.set_files(watched.key, key)
        return job_body(watched.name, trigger, key, files) if files else None


def job_body(name: str, trigger: TriggerSettings, key: str, files: list[str]) -> dict[str, Any]:
    """The `POST /v1/jobs` body of a set's job: the trigger's `job`, reading `files`."""
    source = {**trigger.job.get("source", {}), "files": files}
    return {**trigger.job, "name": f"{name}@{key[:12]}", "source": source}


def _taken_files(found: FileSet, watch: str) -> list[TakenFile]:
    data = [TakenFile(f.path, f.size, f.version, "data", _sha256(f, watch)) for f in found.files]
    return data + [TakenFile(f.path, f.size, f.version, "marker") for f in found.markers]


def _sha256(f: FileSeen, watch: str) -> str | None:
    """A local small file's content digest, for the manifest; None when not cheap, or
    not a regular file inside the watched root (`triggers.file_digest`)."""
    return None if "://" in f.path else file_digest(f.path, watch.removeprefix("file://"))


def start_watcher(state: ServiceState, submit: Submit) -> Callable[[], None]:
    """Start the watcher's thread (always: a tenant may make a trigger at any time);
    returns its stop."""
    watcher = Watcher(state, submit)

    def step() -> float:
        return watcher.look(datetime.now(UTC))

    return start_loop("thresher-watcher", step, registry=state.loops)
