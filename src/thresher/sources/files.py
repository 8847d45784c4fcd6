"""Finding input files: one file, a directory or a glob, on local disk or any fsspec URL."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from fsspec.core import url_to_fs

from thresher.errors import SourceError

HIDDEN_PREFIXES = ("_", ".")


def filesystem(uri: str) -> tuple[Any, str]:
    """The fsspec filesystem for a URI and the path within it."""
    try:
        return url_to_fs(uri)  # type: ignore[no-any-return]
    except (ImportError, ValueError) as exc:
        raise SourceError(f"source.uri: cannot open {uri!r}: {exc}") from exc


def list_files(
    uri: str, suffixes: tuple[str, ...], roots: Sequence[str] = (), files: Sequence[str] = ()
) -> list[str]:
    """Every input file the URI names, in a stable (sorted) order, as full URLs.

    With `files` (a source's `files`), exactly those, in their order, and `uri` is not
    listed: a trigger's job reads the files it took, not what the folder holds now. A
    directory yields its files with a matching suffix (hidden and `_`-prefixed files
    such as `_SUCCESS` are skipped); a glob yields its matches (dot-files included); a file
    yields itself. With `roots`, every file must really lie under one (see `confine`), and
    comes back as its real path.
    """
    if files:
        return confine(list(files), roots) if roots else list(files)
    fs, path = filesystem(uri)
    try:
        if any(ch in path for ch in "*?["):
            paths = sorted(fs.glob(path))
        elif fs.isdir(path):
            root = path.rstrip("/") + "/"
            found = fs.find(path)
            paths = sorted(p for p in found if _is_data_file(_below(p, root), suffixes))
        elif fs.exists(path):
            paths = [path]
        else:
            paths = []
    except OSError as exc:
        raise SourceError(f"source.uri: cannot list {uri!r}: {exc}") from exc
    if not paths:
        raise SourceError(f"source.uri: no input files at {uri!r}")
    urls = [as_url(fs, p) for p in paths]
    return confine(urls, roots) if roots else urls


def confine(urls: list[str], roots: Sequence[str]) -> list[str]:
    """`urls` with each local file as its real path (`..` collapsed, every symlink
    followed), if every one lies under one of `roots`; SourceError naming the first that
    does not. A URL root (`s3://bucket/shared/`) admits URLs under that prefix with no
    `..` segment. The real paths go into the job's plan, so a link swapped after planning
    is never followed."""
    local_roots = [os.path.realpath(r.removeprefix("file://")) for r in roots if _is_path(r)]
    url_roots = [r if r.endswith("/") else f"{r}/" for r in roots if not _is_path(r)]
    confined = []
    for url in urls:
        if _is_path(url):
            real = os.path.realpath(url.removeprefix("file://"))
            inside = any(real == r or real.startswith(r.rstrip("/") + "/") for r in local_roots)
        else:
            real = url
            inside = ".." not in url.split("://", 1)[1].split("/")
            inside = inside and any(url.startswith(r) for r in url_roots)
        if not inside:
            raise SourceError(f"source.uri: {url} is outside the paths this job may read")
        confined.append(real)
    return confined


def _is_path(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def file_size(url: str) -> int:
    fs, path = filesystem(url)
    return int(fs.size(path))


def is_local(fs: Any) -> bool:
    """Whether an fsspec filesystem is this machine's disk (where renames are atomic and
    Arrow's own file reader applies)."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocols


def _is_data_file(relative: str, suffixes: tuple[str, ...]) -> bool:
    """A path below the listed directory: hidden if any part of it is (not the root's)."""
    hidden = any(part.startswith(HIDDEN_PREFIXES) for part in relative.split("/"))
    return not hidden and relative.lower().endswith(suffixes)


def _below(path: str, root: str) -> str:
    """`path` relative to the directory `root` (its name alone if it is not below it)."""
    return path[len(root) :] if path.startswith(root) else path.rsplit("/", 1)[-1]


def as_url(fs: Any, path: str) -> str:
    """A path that `fs` listed, as a URL that opens it with the same filesystem."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return path
    return f"{protocol}://{path}"
