"""Which server-side inputs a tenant may name: only those under `allowed_roots`.

A local path is judged by where it really is — `..` collapsed and every symlink followed,
for the path itself and for each file a directory or glob would read — so neither
`/srv/data/../etc/passwd` nor a link from inside a root to a file outside gets through.
A URL root (`s3://bucket/shared/`) admits URLs under that prefix with no `..` segment.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from thresher.service.errors import BadRequest, Forbidden

GLOB_CHARS = "*?["


def check_source_uri(uri: str, allowed_roots: list[str]) -> str:
    """The input `uri` as the server will read it, if it lies under an allowed root;
    Forbidden (403) when it does not, BadRequest (400) when it is not there at all."""
    if not allowed_roots:
        raise Forbidden(
            "source.uri: this server reads no server-side paths (allowed_roots is empty); "
            "upload the file with POST /v1/files and pass input_file_id"
        )
    if uri.startswith("file://"):
        uri = uri.removeprefix("file://")
    if "://" in uri:
        return _check_url(uri, allowed_roots)
    return _check_path(uri, [r for r in allowed_roots if "://" not in r or r.startswith("file://")])


def _outside(uri: str, roots: list[str]) -> Forbidden:
    return Forbidden(
        f"source.uri: {uri} is outside the paths this server may read "
        f"({', '.join(roots) or 'none'}); upload the file with POST /v1/files instead"
    )


def _check_url(uri: str, roots: list[str]) -> str:
    url_roots = [r if r.endswith("/") else f"{r}/" for r in roots if "://" in r]
    path = uri.split("://", 1)[1]
    if ".." in path.split("/") or not any(uri.startswith(r) for r in url_roots):
        raise _outside(uri, [r for r in roots if "://" in r])
    return uri


def _check_path(uri: str, roots: list[str]) -> str:
    if not os.path.isabs(uri):
        raise BadRequest(f"source.uri: {uri} is not an absolute path")
    real_roots = [os.path.realpath(r.removeprefix("file://")) for r in roots]
    if not _under(os.path.realpath(uri), real_roots):
        raise _outside(uri, roots)
    files = _files_read(uri)
    if not files:
        raise BadRequest(f"source.uri: {uri} matches no file")
    for name in files:
        if not _under(os.path.realpath(name), real_roots):
            raise _outside(name, roots)
    return os.path.realpath(uri) if not any(c in uri for c in GLOB_CHARS) else uri


def _files_read(uri: str) -> list[str]:
    """Every file a source at `uri` could open: the file, a directory's files, a glob's."""
    if any(c in uri for c in GLOB_CHARS):
        matches = glob.glob(uri, recursive=True)
        return [f for m in matches for f in ([m] if not os.path.isdir(m) else _walk(m))]
    if os.path.isdir(uri):
        return _walk(uri)
    return [uri] if os.path.lexists(uri) else []


def _walk(directory: str) -> list[str]:
    found = []
    for parent, dirs, names in os.walk(directory, followlinks=False):
        found += [os.path.join(parent, n) for n in names]
        # A symlinked directory is not descended by os.walk; judge the link itself.
        found += [os.path.join(parent, d) for d in dirs if os.path.islink(os.path.join(parent, d))]
    return found


def _under(path: str, roots: list[str]) -> bool:
    return any(path == root or Path(path).is_relative_to(root) for root in roots)
