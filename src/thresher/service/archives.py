"""A folder of images or documents uploaded as one ZIP or tar archive, unpacked safely.

`POST /v1/files?format=images` (or `documents`) with a `.zip`, `.tar`, `.tar.gz` or
`.tgz` file unpacks it into a folder of the upload's own (`data_dir/uploads/<id>/`),
which a job then reads as its `images` or `documents` source. What a hostile archive
could do is refused, and the folder removed, before any job sees it:

- no entry lands outside the folder: an absolute name, a `..` part, a drive or a
  backslash is a 422 naming the entry; links, devices and FIFOs are refused too (a link
  inside could point anywhere later);
- no bomb: the bytes written are counted as they are written, and the unpacking stops at
  `upload_max_decompressed_bytes` (413) whatever the entries' headers claim; at most
  `MAX_ENTRIES` entries;
- names are kept as the archive gives them (folders too), so paths and ids in the output
  are the tenant's own; the file's bytes are readable by the server's user alone.
"""

from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path, PurePosixPath
from typing import IO

from thresher.service.errors import TooLarge, Unprocessable

__all__ = ["ARCHIVE_FORMATS", "MAX_ENTRIES", "is_archive", "unpack"]

ARCHIVE_FORMATS = ("images", "documents")  # the uploads that arrive as an archive
MAX_ENTRIES = 100_000
BLOCK = 1 << 20


def is_archive(path: Path) -> bool:
    """Whether the file at `path` is a ZIP or tar archive, by its bytes."""
    return zipfile.is_zipfile(path) or tarfile.is_tarfile(path)


def unpack(archive: Path, into: Path, max_bytes: int) -> int:
    """Unpack `archive` into the new folder `into`; the bytes written. Unprocessable (422)
    for an entry that may not be unpacked, TooLarge (413) past `max_bytes`; the folder is
    removed then."""
    into.mkdir(mode=0o700)
    written = 0
    try:
        for count, (name, source) in enumerate(_entries(archive), start=1):
            if count > MAX_ENTRIES:
                raise Unprocessable([f"file: more than {MAX_ENTRIES:,} entries in the archive"])
            target = into.joinpath(*_safe_parts(name))
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with source as stream, target.open("xb") as out:
                written = _copy(stream, out, written, max_bytes)
            target.chmod(0o600)
    except BaseException:
        shutil.rmtree(into, ignore_errors=True)
        raise
    if not written and not any(into.rglob("*")):
        shutil.rmtree(into, ignore_errors=True)
        raise Unprocessable(["file: the archive holds no files"])
    return written


def _copy(stream: IO[bytes], out: IO[bytes], written: int, max_bytes: int) -> int:
    while block := stream.read(BLOCK):
        written += len(block)
        if written > max_bytes:
            raise TooLarge(
                f"file: the archive unpacks to more than this server's limit of"
                f" {max_bytes:,} bytes (upload_max_decompressed_bytes)"
            )
        out.write(block)
    return written


def _safe_parts(name: str) -> tuple[str, ...]:
    """The entry's path parts, if it stays inside the folder; Unprocessable otherwise."""
    path = PurePosixPath(name)
    parts = tuple(p for p in path.parts if p not in ("", "."))
    escapes = path.is_absolute() or ".." in parts or "\\" in name or ":" in (parts or ("",))[0]
    if escapes or not parts or any("\x00" in p for p in parts):
        raise Unprocessable([f"file: the archive's entry {name!r} would land outside its folder"])
    return parts


def _entries(archive: Path) -> Iterator[tuple[str, _Opened]]:
    """Each regular file of the archive: its name and a way to read it."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                if info.is_dir():
                    continue
                kind = stat.S_IFMT(info.external_attr >> 16)  # 0: no type said, a file
                if kind and kind != stat.S_IFREG:
                    raise Unprocessable([f"file: the archive's entry {info.filename!r} is a link"])
                yield info.filename, _Opened(partial(zipped.open, info))
        return
    with tarfile.open(archive) as tarred:
        for member in tarred:
            if member.isdir():
                continue
            if not member.isreg():
                what = "link" if member.issym() or member.islnk() else "special file"
                raise Unprocessable([f"file: the archive's entry {member.name!r} is a {what}"])
            yield member.name, _Opened(partial(tarred.extractfile, member))


class _Opened:
    """An entry opened when its `with` block starts (not while listing)."""

    def __init__(self, opener: Callable[[], IO[bytes] | None]) -> None:
        self._opener = opener
        self._stream: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        stream = self._opener()
        if stream is None:
            raise Unprocessable(["file: the archive has an entry that cannot be read"])
        self._stream = stream
        return stream

    def __exit__(self, *exc: object) -> None:
        if self._stream is not None:
            self._stream.close()
