"""Who coordinates a job or holds a lease or a claim, and whether that owner still lives.

An owner is `host:pid` (the host is `$THRESHER_HOST` when set, else the host name). One
rule says whether it lives, wherever thresher asks — a slot lease reclaimed, a tick claim
taken over, a job left `running` resumed:

- an owner on this host lives while its process does (`kill(pid, 0)`, not a zombie):
  exact, and known the moment it dies;
- an owner on another host lives while its heartbeat row (`thresher_owners`) is younger
  than `timeout` seconds (a server's `owner_timeout`), measured by the database's clock,
  so hosts whose clocks disagree still agree on it. An owner with no row is dead: every
  owner writes its row before it owns anything (`keep_beating`), and rows are removed only
  long after they stopped.

A server beats from a thread of its own; so does a command-line coordinator. A service
job's coordinator (a child process of the server) owns its job as the server does, in the
server's name, so a server that dies orphans its jobs, and a child that crashes does not.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from thresher.loops import LoopRegistry, start_loop
from thresher.store._db import Cursor, Database, now

__all__ = [
    "BEAT_SECONDS",
    "DEFAULT_OWNER_TIMEOUT",
    "Liveness",
    "OwnerTable",
    "beat_seconds",
    "beating",
    "keep_beating",
    "owner_host",
    "this_host",
    "this_owner",
]

log = logging.getLogger("thresher.store.owners")

DEFAULT_OWNER_TIMEOUT = 60.0
# The longest between two heartbeats of an owner (a server beats more often when its
# owner_timeout is short: four beats per timeout).
BEAT_SECONDS = 5.0
# A heartbeat row this old belongs to an owner long gone: a server removes it.
FORGOTTEN_SECONDS = 86400.0


def beat_seconds(timeout: float) -> float:
    """How often an owner judged by `timeout` beats, and a server looks for dead owners'
    jobs: four times per timeout, at least every `BEAT_SECONDS`."""
    return min(BEAT_SECONDS, timeout / 4)


def this_host() -> str:
    """The host an owner names: `$THRESHER_HOST` (set it where processes of different
    machines, or of containers with their own process ids, share one host name), else the
    host name."""
    return os.environ.get("THRESHER_HOST") or socket.gethostname()


def this_owner() -> str:
    """Who coordinates a job: host and process, so a dead owner can be told from a live one."""
    return f"{this_host()}:{os.getpid()}"


def owner_host(owner: str | None) -> str:
    """The host part of an owner (`''` for none).

    >>> owner_host("node-1:4242")
    'node-1'
    """
    return (owner or "").rpartition(":")[0]


@dataclass(frozen=True)
class Liveness:
    """One look at the heartbeats, to judge many owners by: `ages` holds each owner's
    seconds since its last heartbeat."""

    ages: dict[str, float]
    timeout: float

    def alive(self, owner: str | None) -> bool:
        """Whether `owner` lives, by the rule in this module's docstring."""
        if not owner or ":" not in owner:
            return False
        host, _, pid = owner.rpartition(":")
        if host == this_host():
            return _process_alive(pid)
        age = self.ages.get(owner)
        return age is not None and age < self.timeout


@dataclass
class OwnerTable:
    """The heartbeat rows. `timeout` is how stale another host's owner may be and still
    live (the server sets its `owner_timeout`)."""

    db: Database
    timeout: float = DEFAULT_OWNER_TIMEOUT

    def beat(self, owner: str) -> None:
        """Record that `owner` lives, now (by the database's clock)."""
        host, _, pid = owner.rpartition(":")
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO thresher_owners (owner, host, pid, seen_at, started_at)"
                f" VALUES (?, ?, ?, {self.db.clock}, ?)"
                " ON CONFLICT (owner) DO UPDATE SET seen_at = excluded.seen_at",
                (owner, host, int(pid), now()),
            )

    def prune(self, older_than: float = FORGOTTEN_SECONDS) -> None:
        """Remove the rows of owners silent for `older_than` seconds (dead either way)."""
        with self.db.transaction() as cur:
            cur.execute(
                f"DELETE FROM thresher_owners WHERE seen_at < {self.db.clock} - ?", (older_than,)
            )

    def judge(self, cur: Cursor | None = None) -> Liveness:
        """A look at every heartbeat (inside `cur`'s transaction when given)."""
        sql = f"SELECT owner, {self.db.clock} - seen_at FROM thresher_owners"
        rows = cur.execute(sql).fetchall() if cur is not None else self.db.query(sql)
        return Liveness({str(r[0]): float(r[1]) for r in rows}, self.timeout)

    def alive(self, owner: str | None) -> bool:
        return self.judge().alive(owner)


def keep_beating(
    url: str, owner: str, every: float = BEAT_SECONDS, registry: LoopRegistry | None = None
) -> Callable[[], None]:
    """Beat `owner`'s row now, then every `every` seconds from a daemon thread with a
    connection of its own (a long transaction of this process cannot hold a beat up), and
    remove rows silent for a day; returns the stop. A beat that fails is logged and tried
    again by the loop's supervisor (`thresher.loops`, which reports it in `registry`)."""
    db = Database(url)
    table = OwnerTable(db)
    table.beat(owner)  # before anything is owned

    def step() -> float:
        table.beat(owner)
        table.prune()
        return every

    stop_loop = start_loop("thresher-heartbeat", step, registry=registry)

    def stop() -> None:
        stop_loop()
        db.close()

    return stop


@contextmanager
def beating(url: str, owner: str) -> Iterator[None]:
    """`keep_beating` for as long as the block runs."""
    stop = keep_beating(url, owner)
    try:
        yield
    finally:
        stop()


def _process_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
