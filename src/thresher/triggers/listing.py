"""What a watched folder or prefix holds now: every file below it with its size and
version (a local file's mtime in nanoseconds, an object's ETag), page by page.

A local folder is walked with `os.scandir` (one directory in memory at a time); an S3
prefix is read with `list_objects_v2`, one page of at most 1,000 keys per request, so a
prefix of 100,000 objects costs 100 requests and never one giant answer; any other fsspec
filesystem is walked directory by directory. Only the compact `FileSeen` of each file is
kept, never the listing's own records.

A local folder is judged by where its files really are: an entry is taken by its own
`lstat` (never by what a link points at), a link is followed only when its real path
lies inside the watched root, and only regular files are listed. A link out of the root
(to `/proc/self/pagemap`, which claims size 0 and never ends; to a file the server may
not read) is skipped before anything opens it, and `file_digest` reads a file by counting
the bytes it reads, never by trusting the size a stat reports.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from thresher.sources.files import as_url, filesystem

__all__ = ["HASH_BYTES", "FileSeen", "file_digest", "list_watch"]

PAGE_KEYS = 1000  # S3's largest page
# A local file this small is hashed when taken (cheap); larger ones and objects rely on
# size and mtime or ETag.
HASH_BYTES = 8 * 1024 * 1024
_CHUNK = 1024 * 1024
# Opening never follows a link, never waits for a FIFO's writer, never takes a terminal.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)


@dataclass(frozen=True, slots=True)
class FileSeen:
    """One file as a listing saw it: its full path or URL, size and version. Two
    sightings with the same size and version are the same content, as far as a listing
    can tell."""

    path: str
    size: int
    version: str


def list_watch(watch: str) -> Iterator[FileSeen]:
    """Every file below `watch` (a local folder or an fsspec URL prefix), in no set order."""
    if "://" not in watch or watch.startswith("file://"):
        yield from _walk_local(watch.removeprefix("file://"))
        return
    fs, path = filesystem(watch)
    if "s3" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        yield from _pages_s3(fs, path)
    else:
        yield from _walk_fsspec(fs, path)


def _walk_local(folder: str) -> Iterator[FileSeen]:
    root = os.path.realpath(folder)
    pending = [folder]
    while pending:
        directory = pending.pop()
        if not _inside(os.path.realpath(directory), root):
            continue  # swapped for a link out of the root since it was listed
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone since it was listed (or not made yet): nothing to see there
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif (seen := _regular_file(entry, root)) is not None:
                    yield seen
            except FileNotFoundError:
                continue  # removed between the listing and its stat


def _regular_file(entry: os.DirEntry[str], root: str) -> FileSeen | None:
    """The entry as a listing sees it, if it is a regular file (itself, or through a link
    whose real path lies inside `root`); None for anything else, unopened."""
    found = entry.stat(follow_symlinks=False)
    if stat.S_ISLNK(found.st_mode):
        real = os.path.realpath(entry.path)
        if not _inside(real, root):
            return None
        found = os.lstat(real)  # real has no link left in it: lstat is the file's own
    if not stat.S_ISREG(found.st_mode):
        return None
    return FileSeen(entry.path, found.st_size, str(found.st_mtime_ns))


def file_digest(path: str, root: str, limit: int = HASH_BYTES) -> str | None:
    """The sha256 of the local regular file `path`, if its real path lies inside `root`
    and reading it gives at most `limit` bytes; None otherwise (not cheap, not a regular
    file, or not the root's). The bytes are counted as read: a file whose stat claims
    size 0 and never ends (`/proc/self/pagemap`) costs `limit` bytes, not forever."""
    real = os.path.realpath(path)
    if not _inside(real, os.path.realpath(root)):
        return None
    try:
        found = os.lstat(real)
        if not stat.S_ISREG(found.st_mode) or found.st_size > limit:
            return None  # a FIFO or a device is never opened; a large file not read
        fd = os.open(real, _OPEN_FLAGS)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None  # swapped between the lstat and the open
        digest, read = hashlib.sha256(), 0
        while chunk := file.read(min(_CHUNK, limit + 1 - read)):
            read += len(chunk)
            if read > limit:
                return None
            digest.update(chunk)
    return digest.hexdigest()


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


def _pages_s3(fs: Any, path: str) -> Iterator[FileSeen]:
    bucket, _, key = path.partition("/")
    prefix = key.rstrip("/") + "/" if key else ""
    request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": PAGE_KEYS}
    while True:
        page = fs.call_s3("list_objects_v2", **request)
        for item in page.get("Contents", []):
            if not item["Key"].endswith("/"):  # a folder placeholder, not a file
                url = f"s3://{bucket}/{item['Key']}"
                yield FileSeen(url, int(item["Size"]), str(item.get("ETag", "")).strip('"'))
        if not page.get("IsTruncated"):
            return
        request["ContinuationToken"] = page["NextContinuationToken"]


def _walk_fsspec(fs: Any, path: str) -> Iterator[FileSeen]:
    for _, _, files in fs.walk(path, detail=True):
        for info in files.values():
            version = info.get("ETag") or info.get("mtime") or info.get("LastModified") or ""
            yield FileSeen(as_url(fs, info["name"]), int(info.get("size") or 0), str(version))
