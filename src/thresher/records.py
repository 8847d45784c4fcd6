"""Bad records: the one place a row goes when it cannot reach the output."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

Stage = Literal["read", "fetch", "decode", "preprocess", "predict", "write"]
RAW_LIMIT = 1024


@dataclass(frozen=True)
class BadRecord:
    """One line of `_errors/`: where the record came from and why it failed.

    `line` is 1-based for text formats; `row` is 0-based within the file for Parquet;
    `index`, for a line that holds several rows (an OpenAI embeddings request's inputs),
    is the row's 0-based place among them (left out of the JSON otherwise).
    """

    source: str
    stage: Stage
    error: str
    message: str
    raw: str = ""
    line: int | None = None
    row: int | None = None
    id: Any = None
    index: int | None = None

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v is not None or k == "id"}
        data["raw"] = cut_raw(self.raw)
        return json.dumps(data, ensure_ascii=False, default=str)

    def where(self) -> str:
        """`data.csv line 7` — how a person finds the record."""
        if self.line is not None:
            return f"{self.source} line {self.line}"
        if self.row is not None:
            return f"{self.source} row {self.row}"
        return self.source


def cut_raw(raw: str | bytes) -> str:
    """The record as text, cut to 1 KiB, never failing on bad bytes."""
    if isinstance(raw, bytes):
        raw = raw[:RAW_LIMIT].decode("utf-8", errors="backslashreplace")
    return raw[:RAW_LIMIT]
