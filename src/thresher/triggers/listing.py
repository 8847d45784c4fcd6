"""What a watched folder or prefix holds now: every file below it with its size and
version (a local file's mtime in nanoseconds, an object's ETag), page by page.

A local folder is walked with `os.scandir` (one directory in memory at a time); an S3
prefix is read with `list_objects_v2`, one page of at most 1,000 keys per request, so a
prefix of 100,000 objects costs 100 requests and never one giant answer; any other fsspec
filesystem is walked directory by directory. Only the compact `FileSeen` of each file is
kept, never the listing's own records.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from thresher.sources.files import as_url, filesystem

__all__ = ["FileSeen", "list_watch"]

PAGE_KEYS = 1000  # S3's largest page


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
    pending = [folder]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone since it was listed (or not made yet): nothing to see there
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file():
                    stat = entry.stat()
                    yield FileSeen(entry.path, stat.st_size, str(stat.st_mtime_ns))
            except FileNotFoundError:
                continue  # removed between the listing and its stat


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
