"""Sizes in specs and settings: `"512MB"`, `"2GiB"`, and the largest the store holds."""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["MAX_INT64", "parse_bytes"]

# The largest integer the store (SQLite, PostgreSQL BIGINT) holds.
MAX_INT64 = 2**63 - 1

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


def parse_bytes(text: str) -> int:
    """`"512MB"` -> 512000000, `"1 GiB"` -> 1073741824. Plain decimals only (no `1e400`,
    `inf` or `nan`), so every size is a whole number of bytes the store can hold."""
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None or match.group(2) not in _UNITS:
        raise ValueError(f"expected a size such as 512MB or 2GiB, got {text[:40]!r}")
    size = int(Decimal(match.group(1)) * _UNITS[match.group(2)])
    if size > MAX_INT64:
        raise ValueError(f"{text[:40]!r} is larger than the 8 EiB a size may be")
    return size
