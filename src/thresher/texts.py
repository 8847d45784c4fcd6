"""What a string someone else sent must be before thresher keeps it: writable as UTF-8,
and (for names, paths and patterns) free of control characters.

JSON may carry a lone surrogate (`"\\ud800"`): Python's `json` reads it into a `str`
that no UTF-8 file, SQLite row or HTTP answer can hold, so it fails wherever it is
written — long after it was accepted, in a thread that serves everyone. Checking at the
door, where the value still has its field's name, turns that into a refusal naming it.

    >>> first_unencodable({"custom_id": "a", "body": {"input": ["ok", "\\udc00"]}})
    'body.input[1]'
    >>> printable("Europe/Berlin")
    'Europe/Berlin'
"""

from __future__ import annotations

import unicodedata
from typing import Any

__all__ = ["first_unencodable", "printable"]


def printable(text: str) -> str:
    """`text` itself; ValueError if it holds a control character (a NUL, an escape, a
    line break) or a lone surrogate (not writable as UTF-8)."""
    for char in text:
        category = unicodedata.category(char)
        if category == "Cc":
            raise ValueError(f"control character {char!r} not allowed")
        if category == "Cs":
            raise ValueError(f"{char!r} (a lone surrogate) is not a character; send UTF-8 text")
    return text


def first_unencodable(value: Any, path: str = "") -> str | None:
    """Where in `value` (parsed JSON: dicts, lists, strings, numbers) the first string
    that cannot be written as UTF-8 is, as a dotted path (`body.input[1]`; a bad key is
    named by the object holding it); None when every string can be. Iterative, so a
    deeply nested value cannot exhaust the stack."""
    waiting: list[tuple[Any, str]] = [(value, path)]
    while waiting:
        item, where = waiting.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return where
        elif isinstance(item, dict):
            if not all(_encodable(key) for key in item if isinstance(key, str)):
                return where
            waiting.extend(
                (v, f"{where}.{k}" if where else str(k)) for k, v in reversed(item.items())
            )
        elif isinstance(item, list):
            waiting.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
