"""The service's uploaded files (`thresher_files`) and tenant tokens (`thresher_tokens`).

The service's routers call these; no SQL against these tables lives outside `store/`.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any

from thresher.store.db import Database, now

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

    def public(self) -> dict[str, Any]:
        """What the API shows of it (never the server-side path)."""
        return {
            "id": self.id,
            "object": "file",
            "filename": self.filename,
            "format": self.format,
            "bytes": self.bytes,
            "sha256": self.sha256,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class FileTable:
    db: Database

    def add(self, record: FileRecord) -> None:
        """Record an uploaded (or buffered) file, already complete on disk."""
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO thresher_files (id, tenant, filename, format, bytes, sha256, path,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                astuple(record),
            )

    def find(self, tenant: str, file_id: str) -> FileRecord | None:
        """The tenant's file `file_id`; None when there is none (or it is another's)."""
        rows = self.db.query(
            "SELECT id, tenant, filename, format, bytes, sha256, path, created_at"
            " FROM thresher_files WHERE id = ? AND tenant = ?",
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
