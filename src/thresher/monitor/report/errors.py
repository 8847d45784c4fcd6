"""The report's error-file summary: the job's bad records counted by stage and error, with
a few examples of each, read once from the sink (memory bounded by the kinds, not rows)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ErrorKind", "ErrorSummary", "summarise_errors"]

EXAMPLES = 3
MAX_KINDS = 20  # past that, the rest are counted as one "other" kind


@dataclass
class ErrorKind:
    stage: str
    error: str
    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ErrorSummary:
    total: int = 0
    kinds: list[ErrorKind] = field(default_factory=list)


def summarise_errors(records: Iterable[dict[str, Any]]) -> ErrorSummary:
    """Bad records by (stage, error), most frequent first; each kind keeps its first few
    records' place (`source`, `line`/`row`, `id`) and message."""
    kinds: dict[tuple[str, str], ErrorKind] = {}
    total = 0
    for record in records:
        total += 1
        key = (str(record.get("stage", "?")), str(record.get("error", "?")))
        if key not in kinds and len(kinds) >= MAX_KINDS:
            key = ("(other)", "(other)")
        kind = kinds.setdefault(key, ErrorKind(*key))
        kind.count += 1
        if len(kind.examples) < EXAMPLES:
            kind.examples.append(
                {"where": _where(record), "id": record.get("id"),
                 "message": str(record.get("message", ""))[:300]}
            )  # fmt: skip
    ordered = sorted(kinds.values(), key=lambda k: (-k.count, k.stage, k.error))
    return ErrorSummary(total, ordered)


def _where(record: dict[str, Any]) -> str:
    """`data.csv line 7`, as `BadRecord.where` says it."""
    source = str(record.get("source", ""))
    for unit in ("line", "row"):
        if record.get(unit) is not None:
            return f"{source} {unit} {record[unit]}"
    return source
