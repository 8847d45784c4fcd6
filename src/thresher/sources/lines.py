"""A text file's lines, read in bounded pieces however long a line is.

Memory never follows the input: reads are READ_BLOCK at a time, and a line longer than
MAX_RECORD_BYTES (one JSON record of 64 MiB, or a file with no newline at all) is not
held whole but stands for one bad record, `TooLong`, which keeps the line's first bytes
for the error file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec

from thresher.records import RAW_LIMIT

READ_BLOCK = 4 << 20
# Past this, a line is a bad record, not a block to parse: far above any real record
# (an embedding request of 8,000 tokens is about 50 KiB), and small enough that one
# line held whole, and parsed by Arrow, stays a small part of a worker's memory.
MAX_RECORD_BYTES = 64 << 20
COMPRESSED = (".gz", ".bz2", ".zst", ".xz")


@dataclass(frozen=True)
class TooLong:
    """A line longer than MAX_RECORD_BYTES: its first bytes, and no more."""

    head: bytes

    @property
    def message(self) -> str:
        return f"a record longer than {MAX_RECORD_BYTES:,} bytes"


def open_text(url: str) -> Any:
    """A binary file, decompressed on the fly when its name says it is compressed."""
    compression = "infer" if url.lower().endswith(COMPRESSED) else None
    return fsspec.open(url, "rb", compression=compression)


def lines_of(f: Any, read: int) -> Iterator[bytes | TooLong]:
    """`f`'s lines from where it stands, `read` bytes at a time, each with its newline
    (the last may have none).

        >>> import io
        >>> list(lines_of(io.BytesIO(b"a\\r\\n\\nb"), read=2))
        [b'a\\r\\n', b'\\n', b'b']
    """
    for block in blocks(f, -1, read):
        if isinstance(block, TooLong):
            yield block
            continue
        *complete, last = block.split(b"\n")
        yield from (line + b"\n" for line in complete)
        if last:
            yield last


def blocks(f: Any, size: int, read: int | None = None) -> Iterator[bytes | TooLong]:
    """The next `size` bytes of `f` (-1: all the rest) in blocks of whole lines, about
    `read` bytes each (READ_BLOCK); a line longer than MAX_RECORD_BYTES comes as TooLong
    in its place, whatever the blocks' alignment."""
    remaining, read = size, read or READ_BLOCK
    carry = bytearray()  # the start of a line not ended yet (grown in place, not copied)
    head: bytes | None = None  # of a line too long to hold, being skipped
    while remaining != 0:
        data = f.read(read if remaining < 0 else min(read, remaining))
        if not data:
            break
        remaining -= len(data) if remaining > 0 else 0
        if head is not None:  # skip to the end of the long line
            end = data.find(b"\n")
            if end < 0:
                continue
            yield TooLong(head)
            head, data = None, data[end + 1 :]
        cut = data.rfind(b"\n") + 1
        if cut:
            yield from _within_limit(bytes(carry) + data[:cut])
            carry = bytearray(data[cut:])
        else:
            carry += data
        if len(carry) > MAX_RECORD_BYTES:
            head, carry = bytes(carry[:RAW_LIMIT]), bytearray()
    if head is not None:
        yield TooLong(head)
    elif carry:
        yield from _within_limit(bytes(carry))


def _within_limit(block: bytes) -> Iterator[bytes | TooLong]:
    """`block`, with any line longer than MAX_RECORD_BYTES (before its newline) cut out
    as TooLong: only a block longer than that can hold one, so the search is rare."""
    if len(block) <= MAX_RECORD_BYTES:
        yield block
        return
    *complete, last = block.split(b"\n")  # last: b"" when the block ends with a newline
    run: list[bytes] = []  # short lines, yielded together
    for line in [piece + b"\n" for piece in complete] + ([last] if last else []):
        if len(line.removesuffix(b"\n")) <= MAX_RECORD_BYTES:
            run.append(line)
            continue
        if run:
            yield b"".join(run)
            run = []
        yield TooLong(line.removesuffix(b"\n")[:RAW_LIMIT])
    if run:
        yield b"".join(run)


def finish_line(f: Any) -> None:
    """Move `f` past the next newline (or to its end), reading a block at a time, where
    `readline` would hold a line of any length whole."""
    while data := f.read(64 * 1024):
        end = data.find(b"\n")
        if end >= 0:
            f.seek(f.tell() - len(data) + end + 1)
            return


def line_bounds(f: Any, start: int, size: int, shard_bytes: int) -> list[int]:
    """Offsets that cut bytes [start, size) of seekable `f` into ranges of about
    `shard_bytes`, each starting a line: [start, ..., size]."""
    bounds = [start]
    while bounds[-1] + shard_bytes < size:
        f.seek(bounds[-1] + shard_bytes)
        finish_line(f)  # finish the line we landed in
        if f.tell() >= size:
            break
        bounds.append(f.tell())
    return [*bounds, size]


def count_newlines(url: str, stop: int) -> int:
    """How many newlines the first `stop` bytes of `url` hold."""
    newlines = 0
    with open_text(url) as f:
        remaining = stop
        while remaining > 0:
            data = f.read(min(READ_BLOCK, remaining))
            if not data:
                break
            newlines += data.count(b"\n")
            remaining -= len(data)
    return newlines
