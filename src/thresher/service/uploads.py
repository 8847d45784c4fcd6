"""Uploaded input files: received as a multipart stream straight to disk under a
server-generated name, and recorded per tenant in the `thresher_files` table.

The client's filename is kept as metadata only — it never becomes part of a path — and an
upload is cut off (and its partial file deleted) the moment it passes `max_upload_bytes`.
A body that ends before its closing boundary is refused, as it may be a file cut short.
The file is readable by the server's user only (0600).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool

from thresher.service.errors import BadRequest, NotFound, TooLarge, TooManyRequests
from thresher.service.policies.quotas import over_limit
from thresher.store import AtLimit, FileRecord, Store

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

FILE_FIELD = "file"
PURPOSE_FIELD = "purpose"  # OpenAI's clients send it before the file
MAX_FIELD_BYTES = 256  # a small form field's value; past it, the field is refused
# Multipart framing (boundaries, part headers, small fields) on top of the file itself.
FRAMING_ALLOWANCE = 64 * 1024


def new_file_id() -> str:
    """`file-` and 24 random hex digits: unguessable, and safe as a file name."""
    return f"file-{secrets.token_hex(12)}"


def record_file(store: Store, record: FileRecord, limit: int | None = None) -> None:
    """Add an uploaded (or buffered) file, already complete on disk, to the table;
    TooManyRequests (the file removed) if it would take its tenant's files past `limit`
    bytes (`stored_bytes`)."""
    try:
        store.files.add(record, limit)
    except AtLimit as exc:
        remove_stored(Path(record.path))
        raise _over_stored(record.tenant, exc.limit, exc.used, record.bytes) from None


def remove_stored(path: Path) -> None:
    """Remove an upload's bytes: a file, or an unpacked archive's folder."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def check_stored(store: Store, tenant: str, limit: int) -> None:
    """TooManyRequests if the tenant's files hold `limit` bytes already: refused before
    an upload is received, not after."""
    used = store.files.bytes_of(tenant)
    if used >= limit:
        raise _over_stored(tenant, limit, used, 0)


def _over_stored(tenant: str, limit: int, used: int, adding: int) -> TooManyRequests:
    has = f"{used:,} bytes in files" + (f" and this one's {adding:,} more" if adding else "")
    return over_limit(tenant, "stored_bytes", limit, has, "delete files it no longer needs")


def find_file(store: Store, tenant: str, file_id: str) -> FileRecord:
    """The tenant's file `file_id`; NotFound when there is none (or it is another's)."""
    found = store.files.find(tenant, file_id)
    if found is None:
        raise NotFound(f"no file {file_id!r}; upload one with POST /v1/files")
    return found


# Compressed text uploads are stored under a suffix that makes the reader decompress
# them; a file's first bytes say which compression it has, whatever its name claims.
COMPRESSIONS = {".gz": b"\x1f\x8b", ".bz2": b"BZh", ".zst": b"\x28\xb5\x2f\xfd", ".xz": b"\xfd7zXZ"}


def compression_of(filename: str, path: Path, fmt: str) -> str:
    """The compression suffix the upload at `path` is stored with: `.gz` for a gzip
    file (`in.csv.gz`, or a gzip file named `in.csv`), and so on; "" for a plain one. A
    compressed Parquet file is refused (ValueError): Parquet compresses inside."""
    with path.open("rb") as f:
        head = f.read(8)
    found = next((s for s, magic in COMPRESSIONS.items() if head.startswith(magic)), "")
    if found and fmt == "parquet":
        raise ValueError(f"{filename!r} is a compressed Parquet file; upload it uncompressed")
    return found


@dataclass
class Received:
    """What came in the upload's file part, and its `purpose` field (OpenAI's)."""

    filename: str
    bytes: int
    sha256: str
    purpose: str | None = None


async def receive_upload(
    content_type: str, body: AsyncIterator[bytes], dest: Path, limit: int
) -> Received:
    """Stream the multipart part named `file` to `dest`, counting and hashing as it
    goes. Raises TooLarge past `limit` bytes and BadRequest for anything but one file
    part; `dest` is removed whenever it raises."""
    kind, options = parse_options_header(content_type)
    if kind != b"multipart/form-data" or b"boundary" not in options:
        raise BadRequest("send the file as multipart/form-data, in a field named 'file'")
    sink = _PartSink(dest, limit)
    try:
        parser = MultipartParser(options[b"boundary"], sink.callbacks())
        async for chunk in body:
            parser.write(chunk)
            await run_in_threadpool(sink.flush)
        parser.finalize()
        sink.close()
        _check_complete(sink)
    except FormParserError as exc:  # a bad boundary (over 256 characters), a bad part
        sink.discard()
        raise BadRequest(f"invalid multipart body: {exc}") from None
    except BaseException:
        sink.discard()
        raise
    purpose = sink.fields.get(PURPOSE_FIELD)
    return Received(sink.filename or "", sink.size, sink.hasher.hexdigest(), purpose)


def _check_complete(sink: _PartSink) -> None:
    if not sink.ended:
        raise BadRequest(
            "the multipart body ended before its closing boundary; the file may be cut short"
        )
    if sink.filename is None:
        raise BadRequest("no file in the upload; send it in a multipart field named 'file'")


class _PartSink:
    """Multipart callbacks that send the `file` part's bytes to disk and skip the rest."""

    def __init__(self, dest: Path, limit: int) -> None:
        self.dest, self.limit = dest, limit
        self.filename: str | None = None
        self.size = 0
        self.hasher = hashlib.sha256()
        self._file: BinaryIO | None = None
        self._in_file_part = False
        self._header = b""
        self._disposition = b""
        self._pending: list[bytes] = []
        self.ended = False  # the closing boundary came
        self.fields: dict[str, str] = {}  # small form fields (`purpose`)
        self._field: str | None = None
        self._value = b""

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    def _part_begin(self) -> None:
        self._header, self._disposition, self._in_file_part = b"", b"", False
        self._field, self._value = None, b""

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        if self._header.lower() == b"content-disposition":
            self._disposition += data[start:end]

    def _header_end(self) -> None:
        self._header = b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if options.get(b"name") == PURPOSE_FIELD.encode() and b"filename" not in options:
            self._field = PURPOSE_FIELD
            return
        if options.get(b"name") != FILE_FIELD.encode() or b"filename" not in options:
            return  # another form field: ignored
        if self.filename is not None:
            raise BadRequest("send one file per upload")
        self.filename = options[b"filename"].decode("utf-8", "replace")[:255]
        self._in_file_part = True
        self._file = os.fdopen(
            os.open(self.dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb"
        )

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._field is not None:
            self._value += data[start:end]
            if len(self._value) > MAX_FIELD_BYTES:
                raise BadRequest(f"{self._field}: longer than {MAX_FIELD_BYTES} bytes")
            return
        if not self._in_file_part:
            return
        self.size += end - start
        if self.size > self.limit:
            raise TooLarge(f"the upload is larger than this server's limit of {self.limit:,} bytes")
        piece = data[start:end]
        self.hasher.update(piece)
        self._pending.append(piece)

    def _part_end(self) -> None:
        self._in_file_part = False
        if self._field is not None:
            self.fields[self._field] = self._value.decode("utf-8", "replace")
            self._field = None

    def _end(self) -> None:
        self.ended = True

    def flush(self) -> None:
        """Write what the last chunk brought (called off the event loop)."""
        if self._file is not None and self._pending:
            self._file.writelines(self._pending)
        self._pending.clear()

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()

    def discard(self) -> None:
        """Close and remove the partial file."""
        self._pending.clear()
        if self._file is not None:
            self._file.close()
        self.dest.unlink(missing_ok=True)
