"""The service's uploaded files (`thresher_files`) and tenant tokens (`thresher_tokens`).

The service's routers call these; no SQL against these tables lives outside `store/`.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from datetime import datetime
from typing import Any

from thresher.store._counted import make_room
from thresher.store._db import Database, now

__all__ = ["FileRecord", "FileTable", "TokenTable"]


@dataclass(frozen=True)
class FileRecord:
    """One uploaded file: whose it is, what it was called, where the server keeps it."""

    id: str
    tenant: str
    filename: str
    format: str
    bytes: int
    sha256: str
    path: str
    created_at: str
    purpose: str = "user_data"  # OpenAI's: `batch` inputs, `batch_output` results, …

    def public(self) -> dict[str, Any]:
        """What the API shows of it (never the server-side path): OpenAI's file object,
        with thresher's format and sha256 beside it."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": int(datetime.fromisoformat(self.created_at).timestamp()),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "format": self.format,
            "sha256": self.sha256,
        }


FILE_COLUMNS = "id, tenant, filename, format, bytes, sha256, path, created_at, purpose"


@dataclass(frozen=True)
class FileTable:
    db: Database

    def of_tenant(
        self, tenant: str, purpose: str | None, newest_first: bool, limit: int, after: str | None
    ) -> list[FileRecord]:
        """A page of the tenant's files (of one purpose), by time, after file `after`."""
        where, params = ["tenant = ?"], [tenant]
        if purpose is not None:
            where.append("purpose = ?")
            params.append(purpose)
        if after is not None:
            mark = self.find(tenant, after)
            if mark is not None:
                op = "<" if newest_first else ">"
                where.append(f"(created_at {op} ? OR (created_at = ? AND id {op} ?))")
                params += [mark.created_at, mark.created_at, mark.id]
        order = "DESC" if newest_first else "ASC"
        rows = self.db.query(
            f"SELECT {FILE_COLUMNS} FROM thresher_files WHERE {' AND '.join(where)}"
            f" ORDER BY created_at {order}, id {order} LIMIT ?",
            (*params, limit),
        )
        return [FileRecord(*r) for r in rows]

    def remove(self, tenant: str, file_id: str) -> bool:
        """Forget the tenant's file (the caller removes it from disk); False if none."""
        with self.db.transaction() as cur:
            gone = cur.changed(
                "DELETE FROM thresher_files WHERE id = ? AND tenant = ?", (file_id, tenant)
            )
        return gone > 0

    def add(self, record: FileRecord, limit: int | None = None) -> None:
        """Record an uploaded (or buffered) file, already complete on disk; AtLimit if
        its bytes would take its tenant's files past `limit` bytes."""
        with self.db.transaction() as cur:
            if limit is not None:
                mine = ("tenant = ?", (record.tenant,))
                make_room(
                    cur, self.db.dialect, "thresher_files", where=mine, limit=limit,
                    adding=record.bytes, measure="COALESCE(SUM(bytes), 0)",
                )  # fmt: skip
            cur.execute(
                f"INSERT INTO thresher_files ({FILE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                astuple(record),
            )

    def bytes_of(self, tenant: str) -> int:
        """The bytes of every file the tenant has."""
        rows = self.db.query(
            "SELECT COALESCE(SUM(bytes), 0) FROM thresher_files WHERE tenant = ?", (tenant,)
        )
        return int(rows[0][0])

    def find(self, tenant: str, file_id: str) -> FileRecord | None:
        """The tenant's file `file_id`; None when there is none (or it is another's)."""
        rows = self.db.query(
            f"SELECT {FILE_COLUMNS} FROM thresher_files WHERE id = ? AND tenant = ?",
            (file_id, tenant),
        )
        return FileRecord(*rows[0]) if rows else None


@dataclass(frozen=True)
class TokenTable:
    """Tenants' tokens, kept only as SHA-256 digests."""

    db: Database

    def add(self, digest: str, tenant: str) -> None:
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO thresher_tokens (token_sha256, tenant, created_at) VALUES (?, ?, ?)",
                (digest, tenant, now()),
            )

    def tenant_of(self, digest: str) -> str | None:
        rows = self.db.query("SELECT tenant FROM thresher_tokens WHERE token_sha256 = ?", (digest,))
        return str(rows[0][0]) if rows else None

    def all(self) -> list[tuple[str, str, str]]:
        """(digest, tenant, created_at) of every token, by tenant then age."""
        rows = self.db.query(
            "SELECT token_sha256, tenant, created_at FROM thresher_tokens"
            " ORDER BY tenant, created_at"
        )
        return [(str(d), str(t), str(c)) for d, t, c in rows]

    def remove(self, digest: str) -> bool:
        """Forget a token: from now on it authenticates no one."""
        with self.db.transaction() as cur:
            return cur.changed("DELETE FROM thresher_tokens WHERE token_sha256 = ?", (digest,)) > 0
