"""Actuals in the store: labels joined to a job's predictions by id (`thresher_actuals`,
one row per id, keeping the prediction it was joined to) and the parts they came in
(`thresher_actual_parts`, one row per part by the sha256 of its content).

A part is added in one transaction: its new ids are inserted in batches, and the part's
row records what it brought. An id already labelled keeps its first label; a part whose
digest is known changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from thresher.store._db import Cursor, Database, now

__all__ = ["JOINED_COLUMNS", "ActualsTable", "NewPart", "PartRecord", "PredictionInfo"]

# The columns of a part's joined rows, all text: the id, its label, the prediction it
# was joined to, and its class probabilities (comma-separated, in `proba_columns` order).
JOINED_COLUMNS = ("record_id", "label", "prediction", "proba")
INSERT_BATCH = 10_000  # rows per executemany
READ_BATCH = 50_000  # rows per fetch when reading actuals back

_PART_COLUMNS = (
    "job_id, digest, source, rows_read, matched, unknown, repeated, added_at, predicted,"
    " prediction_type, proba_columns"
)


@dataclass(frozen=True)
class PredictionInfo:
    """What a job predicted, as a part saw it: how many rows its output has, the Arrow
    type of its `prediction` column, and its `proba_` columns in order."""

    predicted: int
    prediction_type: str
    proba_columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class NewPart:
    """A part to add: `joined`, its distinct ids that matched a prediction
    (JOINED_COLUMNS); `unknown` and `repeated`, its ids found before the store is asked
    (not predicted; seen earlier in the part)."""

    digest: str
    source: str
    joined: pa.Table
    unknown: int
    repeated: int
    info: PredictionInfo


@dataclass(frozen=True)
class PartRecord:
    """One part of actuals added to a job. `matched`: ids newly labelled; `unknown`: ids
    the job never predicted; `repeated`: ids labelled already (by an earlier part, or
    earlier in this one). `rows_read` = matched + unknown + repeated."""

    job_id: str
    digest: str
    source: str
    rows_read: int
    matched: int
    unknown: int
    repeated: int
    added_at: str
    info: PredictionInfo


@dataclass(frozen=True)
class ActualsTable:
    db: Database

    def part(self, job_id: str, digest: str) -> PartRecord | None:
        rows = self.db.query(
            f"SELECT {_PART_COLUMNS} FROM thresher_actual_parts WHERE job_id = ? AND digest = ?",
            (job_id, digest),
        )
        return _part_record(rows[0]) if rows else None

    def parts(self, job_id: str) -> list[PartRecord]:
        """The job's parts, in the order they arrived."""
        rows = self.db.query(
            f"SELECT {_PART_COLUMNS} FROM thresher_actual_parts WHERE job_id = ?"
            " ORDER BY added_at, digest",
            (job_id,),
        )
        return [_part_record(r) for r in rows]

    def labelled(self, job_id: str) -> int:
        """How many of the job's ids have a label."""
        row = self.db.query("SELECT COUNT(*) FROM thresher_actuals WHERE job_id = ?", (job_id,))
        return int(row[0][0])

    def add(self, job_id: str, part: NewPart) -> tuple[PartRecord, bool]:
        """Add a part to the job's actuals. Returns the part's record and whether it is
        new (False: a part with this digest was added before, and nothing changed)."""
        with self.db.transaction() as cur:
            found = cur.execute(
                f"SELECT {_PART_COLUMNS} FROM thresher_actual_parts"
                " WHERE job_id = ? AND digest = ?",
                (job_id, part.digest),
            ).fetchone()
            if found is not None:
                return _part_record(found), False
            joined = part.joined
            stored = _stored_ids(cur, job_id)
            fresh = joined.filter(pc.invert(pc.is_in(joined.column("record_id"), stored)))
            # In key order, the inserts append to the primary key's B-tree instead of
            # landing all over it: several times faster for a million ids.
            fresh = fresh.sort_by("record_id")
            added_at = now()
            _insert(cur, job_id, part.digest, added_at, fresh)
            record = PartRecord(
                job_id=job_id,
                digest=part.digest,
                source=part.source,
                rows_read=joined.num_rows + part.unknown + part.repeated,
                matched=fresh.num_rows,
                unknown=part.unknown,
                repeated=part.repeated + joined.num_rows - fresh.num_rows,
                added_at=added_at,
                info=part.info,
            )
            info = part.info
            cur.execute(
                f"INSERT INTO thresher_actual_parts ({_PART_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                # The same part added at once from two processes: the first one counts.
                " ON CONFLICT (job_id, digest) DO NOTHING",
                (job_id, part.digest, part.source, record.rows_read, record.matched,
                 record.unknown, record.repeated, added_at, info.predicted, info.prediction_type,
                 json.dumps(list(info.proba_columns))),
            )  # fmt: skip
        return record, True

    def rows(self, job_id: str) -> Iterator[pa.Table]:
        """The job's labelled rows (label, prediction, proba), in pieces of READ_BATCH."""
        with self.db.transaction() as cur:
            cur.execute(
                "SELECT label, prediction, proba FROM thresher_actuals WHERE job_id = ?",
                (job_id,),
            )
            while batch := cur.fetchmany(READ_BATCH):
                label, prediction, proba = zip(*batch, strict=True)
                yield pa.table(
                    {
                        "label": pa.array(label, pa.string()),
                        "prediction": pa.array(prediction, pa.string()),
                        "proba": pa.array(proba, pa.string()),
                    }
                )


def _stored_ids(cur: Cursor, job_id: str) -> pa.Array:
    cur.execute("SELECT record_id FROM thresher_actuals WHERE job_id = ?", (job_id,))
    pieces = []
    while batch := cur.fetchmany(READ_BATCH):
        pieces.append(pa.array([r[0] for r in batch], pa.string()))
    return pa.concat_arrays(pieces) if pieces else pa.array([], pa.string())


def _insert(cur: Cursor, job_id: str, part: str, added_at: str, rows: pa.Table) -> None:
    sql = (
        "INSERT INTO thresher_actuals (job_id, record_id, label, part, added_at, prediction,"
        " proba) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, record_id) DO NOTHING"
    )
    for offset in range(0, rows.num_rows, INSERT_BATCH):
        piece = rows.slice(offset, INSERT_BATCH)
        ids, labels, predictions, probas = (piece.column(c).to_pylist() for c in JOINED_COLUMNS)
        cur.executemany(
            sql,
            [
                (job_id, i, label, part, added_at, prediction, proba)
                for i, label, prediction, proba in zip(
                    ids, labels, predictions, probas, strict=True
                )
            ],
        )


def _part_record(row: tuple[Any, ...]) -> PartRecord:
    columns = json.loads(str(row[10])) if row[10] else []
    info = PredictionInfo(int(row[8] or 0), str(row[9] or ""), tuple(columns))
    return PartRecord(
        job_id=str(row[0]),
        digest=str(row[1]),
        source=str(row[2]),
        rows_read=int(row[3]),
        matched=int(row[4]),
        unknown=int(row[5]),
        repeated=int(row[6]),
        added_at=str(row[7]),
        info=info,
    )
