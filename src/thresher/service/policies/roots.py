"""Which server-side inputs a tenant may name: only those under `allowed_roots`.

A local path is judged by where it really is — `..` collapsed and every symlink followed,
for the path itself and for each file the reader would open, listed by the reader's own
code (so a glob's dot-files count) — so neither `/srv/data/../etc/passwd` nor a link
from inside a root to a file outside gets through. The job's spec carries the roots too
(`source.allowed_roots`), and its planner checks the files again when it lists them: a
link planted after the submission is refused then.
A URL root (`s3://bucket/shared/`) admits URLs under that prefix with no `..` segment.
A local path with `%` or `#`, or a `file://` URI with `?` too, is refused: some readers
and writers (deltalake, SQLAlchemy, pyiceberg) take the path as a URL and decode an
escape or drop a query, so `/srv/shared/%2e%2e/x` would reach `/srv/x`.
The roots are judged before existence, so an answer never tells whether a server path
outside them exists (403 for each, whatever is there).
"""

from __future__ import annotations

import os
from pathlib import Path

from thresher.errors import SourceError
from thresher.service.errors import BadRequest, Forbidden
from thresher.sources.files import confine, list_files

GLOB_CHARS = "*?["
URL_CHARS = "%#"  # in any local path; `?` too in a file:// URI (in a path: a glob's)


def local_path(uri: str, field: str = "source.uri") -> str:
    """`uri` as a local path (a `file://` URI's path; another URL as it is); BadRequest
    (400) when it holds a character a reader might take as a URL's (an escape, a
    fragment, a query)."""
    if "://" in uri and not uri.startswith("file://"):
        return uri
    path = uri.removeprefix("file://")
    refused = URL_CHARS + ("?" if uri.startswith("file://") else "")
    if any(c in path for c in refused):
        raise BadRequest(f"{field}: {uri} holds % or # (or a file:// URI ?); give the plain path")
    return path


def check_source_uri(uri: str, allowed_roots: list[str]) -> str:
    """The input `uri` as the server will read it, if it lies under an allowed root;
    Forbidden (403) when it does not, BadRequest (400) when it is not there at all."""
    if not allowed_roots:
        raise _no_roots("source.uri")
    uri = local_path(uri)
    if "://" in uri:
        return _check_url(uri, allowed_roots)
    return _check_path(uri, _local_roots(allowed_roots))


def _no_roots(field: str) -> Forbidden:
    return Forbidden(
        f"{field}: this server reads no server-side paths (allowed_roots is empty); "
        "upload the file with POST /v1/files and pass input_file_id"
    )


def _outside(uri: str, roots: list[str], field: str) -> Forbidden:
    return Forbidden(
        f"{field}: {uri} is outside the paths this server may read "
        f"({', '.join(roots) or 'none'}); upload the file with POST /v1/files instead"
    )


def _local_roots(roots: list[str]) -> list[str]:
    return [r for r in roots if "://" not in r or r.startswith("file://")]


def _check_url(uri: str, roots: list[str], field: str = "source.uri") -> str:
    url_roots = [r if r.endswith("/") else f"{r}/" for r in roots if "://" in r]
    path = uri.split("://", 1)[1]
    if ".." in path.split("/") or not any(uri.startswith(r) for r in url_roots):
        raise _outside(uri, [r for r in roots if "://" in r], field)
    return uri


def check_under_roots(uri: str, allowed_roots: list[str], field: str = "source.uri") -> None:
    """Raise as `check_source_uri` does, naming `field`, when `uri` is not under an
    allowed root, without looking for the files: a schedule's input (`/data/{date}/`)
    may not exist yet."""
    if not allowed_roots:
        raise _no_roots(field)
    uri = local_path(uri, field)
    if "://" in uri:
        _check_url(uri, allowed_roots, field)
    else:
        _check_local(uri, _local_roots(allowed_roots), field)


def _check_local(uri: str, roots: list[str], field: str = "source.uri") -> None:
    if not os.path.isabs(uri):
        raise BadRequest(f"{field}: {uri} is not an absolute path")
    real_roots = [os.path.realpath(r.removeprefix("file://")) for r in roots]
    if not _under(os.path.realpath(uri), real_roots):
        raise _outside(uri, roots, field)


def _check_path(uri: str, roots: list[str]) -> str:
    _check_local(uri, roots)
    try:  # the reader's own listing: exactly the files the job will open
        files = list_files(uri, ("",))
    except SourceError:
        raise BadRequest(f"source.uri: {uri} matches no file") from None
    try:
        confine(files, roots)
    except SourceError as exc:
        raise Forbidden(f"{exc}; upload the file with POST /v1/files instead") from None
    return os.path.realpath(uri) if not any(c in uri for c in GLOB_CHARS) else uri


def check_source_files(files: list[str], allowed_roots: list[str]) -> list[str]:
    """A submission's explicit `source.files`, each as the server will read it (a local
    file as its real path), if every one lies under an allowed root and a local one is a
    file; Forbidden (403) or BadRequest (400) naming the first that is not. Whether a
    path outside the roots exists is never told: it is a 403 either way."""
    if not allowed_roots:
        raise Forbidden("source.files: this server reads no server-side paths (no allowed_roots)")
    checked = []
    for file in files:
        uri = local_path(file, "source.files")
        if "://" in uri:
            checked.append(_check_url(uri, allowed_roots, "source.files"))
            continue
        local_roots = _local_roots(allowed_roots)
        if not os.path.isabs(uri):
            raise BadRequest(f"source.files: {file} is not an absolute path")
        real = os.path.realpath(uri)
        # Roots first, then the file: a path outside gets one answer, there or not.
        if not _under(real, [os.path.realpath(r.removeprefix("file://")) for r in local_roots]):
            raise Forbidden(f"source.files: {file} is outside the paths this server may read")
        if not os.path.isfile(real):
            raise BadRequest(f"source.files: {file} is not a file")
        checked.append(real)
    return checked


def _under(path: str, roots: list[str]) -> bool:
    return any(path == root or Path(path).is_relative_to(root) for root in roots)
