"""PostgreSQL URLs for the store, the source and the sink: parse, redact, connect through
ADBC (the one driver thresher uses for PostgreSQL).

A URL is libpq's own (`postgresql://user:password@host:port/db?sslmode=require`), plus
thresher's keys in the query string (`table=` for a sink), which are taken out before the
rest goes to libpq. The password never appears in a message: `redacted` drops it.

    >>> url = PgUrl.parse("postgresql://me:secret@db.example:5432/shop?table=scores")
    >>> url.redacted, url.own["table"]
    ('postgresql://me@db.example:5432/shop', 'scores')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from thresher.errors import ThresherError

OWN_KEYS = frozenset({"table"})


@dataclass(frozen=True)
class PgUrl:
    """A PostgreSQL URL split into what libpq reads and what thresher reads."""

    libpq: str
    redacted: str
    password: str | None = None
    own: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, uri: str) -> PgUrl:
        """Split `uri`; the keys in OWN_KEYS leave the query string for `own`."""
        parts = urlsplit(uri)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        own = {k: v for k, v in pairs if k in OWN_KEYS}
        rest = urlencode([(k, v) for k, v in pairs if k not in OWN_KEYS])
        libpq = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, ""))
        host = parts.hostname or "localhost"
        if ":" in host:
            host = f"[{host}]"  # an IPv6 address
        netloc = f"{parts.username}@{host}" if parts.username else host
        netloc += f":{parts.port}" if parts.port else ""
        redacted = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        return cls(libpq=libpq, redacted=redacted, password=parts.password, own=own)

    @property
    def database(self) -> str:
        """The database name (`shop`), empty when the URL names none."""
        return urlsplit(self.redacted).path.lstrip("/")

    def hide(self, text: str) -> str:
        """`text` with the password (if any) replaced by `***`."""
        return text.replace(self.password, "***") if self.password else text

    def connect(self, error: type[ThresherError], field_name: str) -> Any:
        """An ADBC DB-API connection (autocommit off). Failures raise `error` naming
        `field_name` and the redacted URL."""
        try:
            import adbc_driver_postgresql.dbapi as pg_adbc
        except ImportError as exc:
            raise error(f"{field_name}: PostgreSQL needs `pip install thresher[postgres]`") from exc
        try:
            return pg_adbc.connect(self.libpq)
        except Exception as exc:  # the driver's errors carry no common base worth naming
            raise error(
                f"{field_name}: cannot connect to {self.redacted}: {self.hide(str(exc)).strip()}"
            ) from None


def without_password(uri: str) -> str:
    """`uri` with its password (if it has one) shown as `***`, for messages.

    >>> without_password("postgresql://me:secret@h/db?table=t")
    'postgresql://me:***@h/db?table=t'
    """
    password = urlsplit(uri).password if "://" in uri else None
    return uri.replace(f":{password}@", ":***@", 1) if password else uri


def numbered_placeholders(statement: str) -> str:
    """`?` placeholders as PostgreSQL's `$1`, `$2`, … (thresher's statements hold no
    literal `?`).

    >>> numbered_placeholders("SELECT a FROM t WHERE b = ? AND c = ?")
    'SELECT a FROM t WHERE b = $1 AND c = $2'
    """
    pieces = statement.split("?")
    numbered = [f"{piece}${n}" for n, piece in enumerate(pieces[:-1], start=1)]
    return "".join(numbered) + pieces[-1]


def quote_ident(name: str) -> str:
    """A PostgreSQL (and SQLite) identifier in double quotes: `a"b` -> `"a""b"`."""
    return '"' + name.replace('"', '""') + '"'
