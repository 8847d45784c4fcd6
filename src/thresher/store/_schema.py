"""The store's schema, as numbered migrations run once when a store is opened.

`thresher_schema` holds the version a store is at. Opening a store runs, in one
transaction each, every migration above that version and records the new one, so an old
store file upgrades in place and a new one is built by the same steps. A store made
before versions were recorded has the tables of migration 1 (all created "if not
exists"), so it starts at version 0 and migration 1 leaves its data alone.

A change to the schema is a new migration at the end of `MIGRATIONS`, never an edit of
an old one: stores in the field have already run those.
"""

from __future__ import annotations

from thresher.postgres import without_password
from thresher.store._db import Cursor, Database, StoreError

__all__ = ["MIGRATIONS", "expect_current", "migrate", "schema_version"]

MIGRATIONS: list[list[str]] = [
    # 1: jobs, shards, attempts, retry rounds, and the service's tokens, uploaded files,
    # webhook deliveries and buffered requests (each made by its own module before).
    [
        """CREATE TABLE IF NOT EXISTS thresher_jobs (
            id TEXT PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL,
            spec TEXT NOT NULL, plan TEXT NOT NULL, shard_count INTEGER NOT NULL,
            created_at TEXT NOT NULL, finished_at TEXT, message TEXT,
            owner TEXT, heartbeat_at TEXT, manifest TEXT,
            tenant TEXT, priority INTEGER NOT NULL DEFAULT 0, idempotency_key TEXT,
            UNIQUE (tenant, idempotency_key))""",
        """CREATE TABLE IF NOT EXISTS thresher_shards (
            job_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0, rows_in BIGINT, rows_out BIGINT,
            rows_error BIGINT, seconds DOUBLE PRECISION, error TEXT,
            PRIMARY KEY (job_id, idx))""",
        """CREATE TABLE IF NOT EXISTS thresher_attempts (
            job_id TEXT NOT NULL, idx INTEGER NOT NULL, attempt TEXT NOT NULL,
            number INTEGER NOT NULL, started_at TEXT NOT NULL, finished_at TEXT,
            outcome TEXT, message TEXT, PRIMARY KEY (job_id, attempt))""",
        """CREATE TABLE IF NOT EXISTS thresher_retries (
            job_id TEXT NOT NULL, round INTEGER NOT NULL, state TEXT NOT NULL,
            started_at TEXT NOT NULL, finished_at TEXT, model_sha256 TEXT,
            PRIMARY KEY (job_id, round))""",
        """CREATE TABLE IF NOT EXISTS thresher_retry_shards (
            job_id TEXT NOT NULL, round INTEGER NOT NULL, idx INTEGER NOT NULL,
            state TEXT NOT NULL, rows_fixed BIGINT NOT NULL, rows_failed BIGINT NOT NULL,
            PRIMARY KEY (job_id, round, idx))""",
        """CREATE TABLE IF NOT EXISTS thresher_tokens (
            token_sha256 TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_at TEXT NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS thresher_files (
            id TEXT PRIMARY KEY, tenant TEXT NOT NULL, filename TEXT NOT NULL,
            format TEXT NOT NULL, bytes BIGINT NOT NULL, sha256 TEXT NOT NULL,
            path TEXT NOT NULL, created_at TEXT NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS thresher_webhook_deliveries (
            job_id TEXT NOT NULL, event TEXT NOT NULL, url TEXT NOT NULL,
            payload TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
            last_status INTEGER, last_error TEXT, created_at TEXT NOT NULL,
            delivered_at TEXT, PRIMARY KEY (job_id, event, url))""",
        """CREATE TABLE IF NOT EXISTS thresher_requests (
            tenant TEXT NOT NULL, custom_id TEXT NOT NULL, model TEXT NOT NULL,
            record TEXT NOT NULL, state TEXT NOT NULL, batch_id TEXT, job_id TEXT,
            result TEXT, error TEXT, created_at TEXT NOT NULL, finished_at TEXT,
            PRIMARY KEY (tenant, custom_id))""",
        "CREATE INDEX IF NOT EXISTS thresher_requests_waiting"
        " ON thresher_requests (state, tenant, model, created_at)",
        "CREATE INDEX IF NOT EXISTS thresher_requests_batch ON thresher_requests (batch_id)",
    ],
    # 2: how often a job's coordinator process died (the service stops restarting it).
    ["ALTER TABLE thresher_jobs ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0"],
    # 3: the sha256 of the request a service job was submitted with, so an Idempotency-Key
    # sent again with another request is told apart from a retry of the same one.
    ["ALTER TABLE thresher_jobs ADD COLUMN request_sha256 TEXT"],
    # 4: the schedules' tick ledger: one row per (schedule, nominal UTC time), ever.
    [
        """CREATE TABLE IF NOT EXISTS thresher_ticks (
            schedule TEXT NOT NULL, nominal TEXT NOT NULL, outcome TEXT NOT NULL,
            job_id TEXT, message TEXT, claimed_by TEXT NOT NULL, claimed_at TEXT NOT NULL,
            settled_at TEXT, PRIMARY KEY (schedule, nominal))""",
    ],
    # 5: schedules tenants make over HTTP, and pause switches for the config's schedules
    # (`settings` NULL); manual ticks (`thresher schedules trigger`) told apart from cron's.
    [
        """CREATE TABLE IF NOT EXISTS thresher_schedules (
            key TEXT PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL, settings TEXT,
            paused INTEGER, created_at TEXT NOT NULL, updated_at TEXT NOT NULL)""",
        "ALTER TABLE thresher_ticks ADD COLUMN manual INTEGER NOT NULL DEFAULT 0",
    ],
    # 6: OpenAI-style files (a purpose) and batches: a batch is a job over the request
    # lines of a `purpose = "batch"` file, answered in two `batch_output` files.
    [
        "ALTER TABLE thresher_files ADD COLUMN purpose TEXT NOT NULL DEFAULT 'user_data'",
        """CREATE TABLE IF NOT EXISTS thresher_batches (
            id TEXT PRIMARY KEY, tenant TEXT NOT NULL, input_file_id TEXT NOT NULL,
            endpoint TEXT NOT NULL, completion_window TEXT NOT NULL, metadata TEXT,
            status TEXT NOT NULL, model TEXT, job_id TEXT, output_file_id TEXT,
            error_file_id TEXT, errors TEXT, counts TEXT, usage TEXT,
            created_at BIGINT NOT NULL, expires_at BIGINT, in_progress_at BIGINT,
            finalizing_at BIGINT, completed_at BIGINT, failed_at BIGINT, expired_at BIGINT,
            cancelling_at BIGINT, cancelled_at BIGINT)""",
        "CREATE INDEX IF NOT EXISTS thresher_batches_tenant ON thresher_batches (tenant, id)",
    ],
    # 7: the triggers' sets, their manifest of files taken (one row per file version,
    # ever, until a reset) and the resets, recorded.
    [
        """CREATE TABLE IF NOT EXISTS thresher_trigger_sets (
            trigger_name TEXT NOT NULL, set_key TEXT NOT NULL, outcome TEXT NOT NULL,
            files INTEGER NOT NULL, job_id TEXT, message TEXT, claimed_by TEXT NOT NULL,
            claimed_at TEXT NOT NULL, settled_at TEXT, PRIMARY KEY (trigger_name, set_key))""",
        """CREATE TABLE IF NOT EXISTS thresher_trigger_files (
            trigger_name TEXT NOT NULL, path TEXT NOT NULL, size BIGINT NOT NULL,
            version TEXT NOT NULL, role TEXT NOT NULL, sha256 TEXT, set_key TEXT NOT NULL,
            taken_at TEXT NOT NULL, PRIMARY KEY (trigger_name, path, size, version))""",
        "CREATE INDEX IF NOT EXISTS thresher_trigger_files_set"
        " ON thresher_trigger_files (trigger_name, set_key)",
        """CREATE TABLE IF NOT EXISTS thresher_trigger_resets (
            trigger_name TEXT NOT NULL, since TEXT NOT NULL, reset_by TEXT NOT NULL,
            reset_at TEXT NOT NULL, forgotten INTEGER NOT NULL)""",
    ],
    # 8: worker and GPU slot leases (one per running service job, reclaimed when the
    # server holding it is dead), and why a queued or preempted job is still waiting.
    [
        """CREATE TABLE IF NOT EXISTS thresher_leases (
            job_id TEXT PRIMARY KEY, owner TEXT NOT NULL, tenant TEXT,
            priority INTEGER NOT NULL DEFAULT 0, cpu INTEGER NOT NULL, gpu INTEGER NOT NULL,
            devices TEXT NOT NULL DEFAULT '', acquired_at TEXT NOT NULL)""",
        "ALTER TABLE thresher_jobs ADD COLUMN wait_reason TEXT",
    ],
    # 9: monitoring. A shard's profile is committed with the shard (`profile`); a job's
    # merged profile, or a reference file's, is kept by subject (a job id, or
    # `file:<uri>@<version>`). Actuals are labels joined to a job's predictions by id, one
    # row per id (so adding a file twice changes nothing), and one row per part added.
    [
        "ALTER TABLE thresher_shards ADD COLUMN profile TEXT",
        """CREATE TABLE IF NOT EXISTS thresher_profiles (
            subject TEXT PRIMARY KEY, profile TEXT NOT NULL, created_at TEXT NOT NULL)""",
        """CREATE TABLE IF NOT EXISTS thresher_actuals (
            job_id TEXT NOT NULL, record_id TEXT NOT NULL, label TEXT NOT NULL,
            part TEXT NOT NULL, added_at TEXT NOT NULL, PRIMARY KEY (job_id, record_id))""",
        """CREATE TABLE IF NOT EXISTS thresher_actual_parts (
            job_id TEXT NOT NULL, digest TEXT NOT NULL, source TEXT NOT NULL,
            rows_read BIGINT NOT NULL, matched BIGINT NOT NULL, unknown BIGINT NOT NULL,
            repeated BIGINT NOT NULL, added_at TEXT NOT NULL, PRIMARY KEY (job_id, digest))""",
    ],
    # 10: an actual keeps the prediction it was joined to (its text, and the class
    # probabilities in the job's `proba_` column order), so a job's quality stays
    # computable after a later job replaced its output; a part records what the job
    # predicted (rows, the prediction's Arrow type, the `proba_` columns).
    [
        "ALTER TABLE thresher_actuals ADD COLUMN prediction TEXT",
        "ALTER TABLE thresher_actuals ADD COLUMN proba TEXT",
        "ALTER TABLE thresher_actual_parts ADD COLUMN predicted BIGINT",
        "ALTER TABLE thresher_actual_parts ADD COLUMN prediction_type TEXT",
        "ALTER TABLE thresher_actual_parts ADD COLUMN proba_columns TEXT",
    ],
    # 11: tenants' own dataset-arrival triggers (`/v1/triggers`), keyed `tenant/name`.
    [
        """CREATE TABLE IF NOT EXISTS thresher_trigger_defs (
            key TEXT PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL,
            settings TEXT NOT NULL, paused INTEGER NOT NULL,
            created_at TEXT NOT NULL, updated_at TEXT NOT NULL)""",
    ],
    # 12: owners' heartbeats: each server (and each command-line coordinator) refreshes
    # its row, so an owner on another host is known dead once its row grows old.
    # `seen_at` is the database's clock, in seconds since the epoch.
    [
        """CREATE TABLE IF NOT EXISTS thresher_owners (
            owner TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL,
            seen_at DOUBLE PRECISION NOT NULL, started_at TEXT NOT NULL)""",
    ],
    # 13: a watcher reads only the files its triggers took since its last look.
    [
        "CREATE INDEX IF NOT EXISTS thresher_trigger_files_taken"
        " ON thresher_trigger_files (trigger_name, taken_at)",
    ],
    # 14: tenants' webhook endpoints for batch events (OpenAI's `/v1/webhook_endpoints`).
    # The signing secret is kept as given out (it signs, so it cannot be a hash); a
    # rotated one stays valid until `old_secret_until` (Unix seconds) when asked. A
    # batch's priority, for the job made when its lines pass.
    [
        "ALTER TABLE thresher_batches ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE IF NOT EXISTS thresher_webhook_endpoints (
            id TEXT PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL, url TEXT NOT NULL,
            event_types TEXT NOT NULL, secret TEXT NOT NULL, old_secret TEXT,
            old_secret_until BIGINT, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS thresher_webhook_endpoints_tenant"
        " ON thresher_webhook_endpoints (tenant, id)",
    ],
    # 15: when an ended job's or batch's end hooks ran (`_announced.py`), so one a server
    # died before announcing is announced by the next look. What ended before counts as
    # announced.
    [
        "ALTER TABLE thresher_jobs ADD COLUMN announced_at TEXT",
        "UPDATE thresher_jobs SET announced_at = COALESCE(finished_at, created_at)"
        " WHERE state IN ('succeeded', 'failed', 'cancelled')",
        "CREATE INDEX IF NOT EXISTS thresher_jobs_announced ON thresher_jobs (announced_at)",
        "ALTER TABLE thresher_batches ADD COLUMN announced_at BIGINT",
        "UPDATE thresher_batches SET announced_at = created_at"
        " WHERE status IN ('failed', 'completed', 'expired', 'cancelled')",
        "CREATE INDEX IF NOT EXISTS thresher_batches_announced ON thresher_batches (announced_at)",
    ],
    # 16: why a schedule or a tenant's trigger was quarantined (paused by its loop after
    # failing too often in a row, `thresher.loops.Strikes`); NULL when it was not.
    [
        "ALTER TABLE thresher_schedules ADD COLUMN quarantined TEXT",
        "ALTER TABLE thresher_trigger_defs ADD COLUMN quarantined TEXT",
    ],
    # 17: a tenant's schedules, triggers and files are read by tenant (its listings, and
    # the counts and sums its limits are checked against), never by reading every row.
    [
        "CREATE INDEX IF NOT EXISTS thresher_schedules_tenant ON thresher_schedules (tenant, name)",
        "CREATE INDEX IF NOT EXISTS thresher_trigger_defs_tenant"
        " ON thresher_trigger_defs (tenant, name)",
        "CREATE INDEX IF NOT EXISTS thresher_files_tenant ON thresher_files (tenant, created_at)",
    ],
    # 18: backfills (`_backfills.py`): a schedule's past fire times run on request. A tick
    # a backfill claimed names it (`backfill`), so the live ticker leaves it alone.
    [
        """CREATE TABLE IF NOT EXISTS thresher_backfills (
            id TEXT PRIMARY KEY, tenant TEXT NOT NULL, schedule TEXT NOT NULL,
            name TEXT NOT NULL, timezone TEXT NOT NULL, range_from TEXT NOT NULL,
            range_to TEXT NOT NULL,
            nominals TEXT NOT NULL, priority INTEGER NOT NULL, max_running INTEGER,
            state TEXT NOT NULL, created_at TEXT NOT NULL, ended_at TEXT)""",
        "CREATE INDEX IF NOT EXISTS thresher_backfills_schedule"
        " ON thresher_backfills (schedule, created_at)",
        "CREATE INDEX IF NOT EXISTS thresher_backfills_state ON thresher_backfills (state)",
        "ALTER TABLE thresher_ticks ADD COLUMN backfill TEXT",
    ],
]


def schema_version(cur: Cursor) -> int:
    """The version this store is at (0: new, or made before versions were recorded)."""
    row = cur.execute("SELECT MAX(version) FROM thresher_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def migrate(db: Database) -> int:
    """Bring the store to the newest version; returns the version it is at. Two processes
    opening one store at once take turns: the second finds the work done. A store a newer
    thresher migrated further is refused (StoreError), never used with tables it has
    changed in ways this code does not know."""
    with db.transaction() as cur:
        if db.dialect == "postgresql":
            cur.execute("SELECT pg_advisory_xact_lock(7305061)")  # one migrator at a time
        cur.execute("CREATE TABLE IF NOT EXISTS thresher_schema (version INTEGER NOT NULL)")
        if db.dialect == "sqlite":
            # A write statement takes SQLite's write lock now, before the version is read
            # (a read first would be a stale snapshot once another opener commits).
            cur.execute("UPDATE thresher_schema SET version = version WHERE 1 = 0")
        version = schema_version(cur)
        if version > len(MIGRATIONS):
            raise StoreError(
                f"the store {without_password(db.url)} is at schema version {version},"
                f" newer than this thresher knows ({len(MIGRATIONS)}): a newer thresher"
                " wrote it. Upgrade thresher to use it (pip install -U thresher); this one"
                " changes nothing in it."
            )
        for number, statements in enumerate(MIGRATIONS[version:], start=version + 1):
            for statement in statements:
                cur.execute(statement)
            cur.execute("INSERT INTO thresher_schema (version) VALUES (?)", (number,))
            version = number
    return version


# Whether a table of this name exists, by dialect (without creating anything).
TABLE_EXISTS = {
    "sqlite": "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
    "postgresql": "SELECT COUNT(*) FROM information_schema.tables"
    " WHERE table_schema = current_schema() AND table_name = ?",
}


def expect_current(db: Database) -> None:
    """Check, without writing, that the store is at this code's schema version: a command
    that only looks never migrates. StoreError says which way it is off and what to do."""
    with db.transaction() as cur:
        found = cur.execute(TABLE_EXISTS[db.dialect], ("thresher_schema",)).fetchone()
        version = schema_version(cur) if found and found[0] else 0
    if version < len(MIGRATIONS):
        raise StoreError(
            f"the store {without_password(db.url)} is at schema version {version}, older"
            f" than this thresher's ({len(MIGRATIONS)}): `thresher serve` or a job upgrades"
            " it; this command only reads"
        )
    if version > len(MIGRATIONS):
        raise StoreError(
            f"the store {without_password(db.url)} is at schema version {version}, newer"
            f" than this thresher knows ({len(MIGRATIONS)}): upgrade thresher to read it"
        )
