"""How deep a JSON line nests, checked before Arrow sees it.

Arrow's JSON reader recurses once per level of nesting, in schema inference and in
parsing, so a line nested some 20,000 levels deep (`{"x": [[[[…]]]]}`, 60 KB) overflows
the C stack and kills the process with SIGSEGV: no exception, no error record, the whole
planner or worker gone. `check_depth` refuses such a line first.

`MAX_DEPTH` is 100: real records rarely nest past a dozen levels (a GeoJSON
multipolygon is five), and 100 levels of Arrow's recursion use a few tens of KiB, well
inside the smallest thread stacks Arrow and Python run on (the crash needs thousands).
"""

from __future__ import annotations

import re

import numpy as np

MAX_DEPTH = 100

_NOT_OPENERS = bytes(b for b in range(256) if b not in b"[{\n")
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b"[]{}\n")
# A JSON string (the unrolled loop: no backtracking). Outside a string a `"` can only
# start one, so removing these from a line leaves exactly its structure.
_STRING = re.compile(rb'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"')
_BRACKET, _BRACE, _NEWLINE = (np.uint8(ord(c)) for c in "[{\n")


class TooDeep(ValueError):
    """A line nested deeper than MAX_DEPTH levels."""


def check_depth(data: bytes) -> None:
    """Raise TooDeep if a line of `data` nests deeper than MAX_DEPTH.

    Ordinary data pays one C-speed pass (`bytes.translate` keeping only `[`, `{` and
    newlines); only a line holding more than MAX_DEPTH opening brackets, which a deep
    line must, is measured exactly, strings left out.

        >>> check_depth(b'{"a": [[1, 2], [3]]}\\n' + b'{"s": "' + b"[" * 500 + b'"}\\n')
        >>> check_depth(b'{"x": ' + b"[" * 101 + b"]" * 101 + b"}")
        Traceback (most recent call last):
        ...
        thresher.sources.nesting.TooDeep: nested deeper than 100 levels
    """
    openers = data.translate(None, _NOT_OPENERS)
    if len(openers) - openers.count(b"\n") <= MAX_DEPTH:
        return
    marks = np.frombuffer(openers, dtype=np.uint8)
    edges = np.concatenate(([-1], np.flatnonzero(marks == _NEWLINE), [len(marks)]))
    crowded = np.flatnonzero(np.diff(edges) - 1 > MAX_DEPTH)  # line numbers in `data`
    if len(crowded) == 0:
        return
    lines = data.split(b"\n")
    if deepest(b"\n".join(lines[k] for k in crowded.tolist())) > MAX_DEPTH:
        raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")


def deepest(data: bytes) -> int:
    """The most levels of `[` and `{` any line of JSON `data` nests, brackets inside
    strings not counted; all lines at once, in numpy. (An unterminated string counts its
    brackets: the line is bad either way.)

        >>> deepest(b'{"a": [[1], {"b": "]]]]"}]}'), deepest(b"[[[]]]\\n42\\n]]]\\n[[]]")
        (3, 3)
    """
    marks = np.frombuffer(_STRING.sub(b"", data).translate(None, _NOT_STRUCTURE), np.uint8)
    opens = (marks == _BRACKET) | (marks == _BRACE)
    closes = (marks == _BRACKET + 2) | (marks == _BRACE + 2)  # `]` and `}`
    level = np.cumsum(opens.astype(np.int64) - closes)
    # Each line counts from zero: less the level its line began at (a newline's own).
    newline = marks == _NEWLINE
    level -= np.concatenate(([0], level[newline]))[np.cumsum(newline)]
    return int(level.max(initial=0))
