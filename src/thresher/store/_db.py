"""The one data layer under the store: plain DB-API over SQLite (stdlib) or PostgreSQL
(through ADBC, the driver the PostgreSQL source and sink use too). SQL is written once
with `?` placeholders; PostgreSQL gets `$1`, `$2`, …. A statement whose effect a caller
counts goes through `Cursor.changed` (ADBC reports no row counts)."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from thresher.errors import StoreError
from thresher.postgres import PgUrl, numbered_placeholders

__all__ = ["Cursor", "Database", "IdempotencyConflict", "StoreError", "now"]


def now() -> str:
    """The time a store row records: UTC, ISO 8601."""
    return datetime.now(UTC).isoformat()


class IdempotencyConflict(StoreError):
    """An idempotency key sent again with a different request than its first job's."""


class Database:
    """A connection to the store's database, safe to share between this process's threads."""

    def __init__(self, url: str, read_only: bool = False) -> None:
        """With `read_only`, a SQLite store is opened for reading alone: nothing is
        created or written. A file not there yet reads as an empty store held in memory
        (`blank`: its tables still to be made)."""
        self.url = url
        self._lock = threading.RLock()
        self.blank = False
        parsed = urlparse(url)
        if parsed.scheme == "sqlite":
            self.dialect = "sqlite"
            self.blank = read_only and not Path(parsed.path).is_file()
            connect = _read_sqlite if read_only else _connect_sqlite
            self._conn: Any = connect(parsed.path)
        elif parsed.scheme in ("postgresql", "postgres"):
            self.dialect = "postgresql"
            self._conn = PgUrl.parse(url).connect(StoreError, "--store")
        else:
            raise StoreError(f"--store: expected sqlite:///path.db or postgresql://…, got {url}")

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """Run statements atomically: all of them commit, or none."""
        with self._lock:
            cursor = Cursor(self._conn.cursor(), self.dialect)
            try:
                yield cursor
                self._conn.commit()
            except BaseException:
                self._conn.rollback()
                raise
            finally:
                cursor.close()

    @property
    def clock(self) -> str:
        """A SQL expression for the database's own time, in seconds since the epoch: one
        clock for every host sharing the store, however far their own clocks drift."""
        if self.dialect == "postgresql":
            return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
        return "((julianday('now') - 2440587.5) * 86400.0)"

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.transaction() as cur:
            return cur.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class Cursor:
    """A DB-API cursor that takes `?` placeholders whatever the database."""

    def __init__(self, cursor: Any, dialect: str) -> None:
        self._cursor, self._dialect = cursor, dialect

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        if self._dialect == "postgresql":
            sql = numbered_placeholders(sql)
        self._cursor.execute(sql, tuple(params))
        return self

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each of `rows` (a batch of inserts, in one round trip
        where the driver can)."""
        if self._dialect == "postgresql":
            sql = numbered_placeholders(sql)
        if rows:
            self._cursor.executemany(sql, [tuple(r) for r in rows])

    def changed(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run an INSERT or UPDATE and return how many rows it wrote (through RETURNING,
        which both databases answer; a DB-API row count is not reported by every driver)."""
        return len(self.execute(f"{sql} RETURNING 1", params).fetchall())

    def fetchone(self) -> tuple[Any, ...] | None:
        row = self._cursor.fetchone()
        return None if row is None else tuple(row)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._cursor.fetchall()]

    def fetchmany(self, size: int) -> list[tuple[Any, ...]]:
        """Up to `size` more rows of the result: a large one, read in bounded pieces."""
        return [tuple(r) for r in self._cursor.fetchmany(size)]

    def close(self) -> None:
        self._cursor.close()


def _read_sqlite(path: str) -> sqlite3.Connection:
    """A store file opened so that no statement can write to it; one not there yet is an
    empty database in memory, so looking never creates it."""
    if not Path(path).is_file():
        return sqlite3.connect(":memory:", check_same_thread=False)
    uri = Path(path).absolute().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def _connect_sqlite(path: str) -> sqlite3.Connection:
    Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The store holds specs, tenants and token digests: a new one is the user's alone
    # (SQLite gives its -wal and -shm files the same mode). Only a file not there yet is
    # opened here: closing any descriptor of a file drops every POSIX lock this process
    # holds on it, so reopening a store another connection of this process has open
    # would let a third process see it unused, checkpoint and delete the WAL under it
    # (a "malformed" store, seen with a heartbeat thread's second connection).
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    # isolation_level=None + explicit BEGIN would also do; the default deferred
    # transactions plus WAL let `thresher status` read while a job writes.
    conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    return conn
