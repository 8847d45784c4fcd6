"""`/v1/files`: upload an input file (JSONL, CSV or Parquet), list, read, download and
delete a tenant's files. The file object is OpenAI's (`id`, `object`, `bytes`,
`created_at` in Unix seconds, `filename`, `purpose`, `status`, `expires_at`) with
thresher's `format` and `sha256` beside it, so the official `openai` client's
`files.create/list/retrieve/content/delete` work unchanged. A `purpose = "batch"` upload
is JSONL whatever its name (the client sends raw bytes as `upload`); a batch's results
are files of purpose `batch_output`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from thresher.places import infer_format
from thresher.service.archives import ARCHIVE_FORMATS, is_archive, unpack
from thresher.service.errors import BadRequest, Conflict, TooLarge, Unprocessable
from thresher.service.limits import Pace, paced
from thresher.service.policies.auth import Tenant
from thresher.service.schemas import FileDeleted, FileInfo, FileList
from thresher.service.state import StateDep
from thresher.service.uploads import (
    FRAMING_ALLOWANCE,
    Received,
    check_stored,
    compression_of,
    find_file,
    new_file_id,
    receive_upload,
    record_file,
    remove_stored,
)
from thresher.store import FileRecord, now

router = APIRouter(prefix="/v1/files", tags=["files"])

UPLOAD_FORMATS = ("jsonl", "csv", "parquet", *ARCHIVE_FORMATS)  # what an upload is read as
# What a tenant may upload as (OpenAI's purposes); `batch_output` files are the server's.
PURPOSES = ("batch", "user_data", "fine-tune", "assistants", "vision", "evals")

UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            }
        },
    }
}


@router.post(
    "",
    status_code=201,
    summary="Upload an input file",
    description="Send a JSONL, CSV or Parquet file as the multipart field `file`. The format "
    "comes from the file name's suffix unless `format` says it. Returns the file's id, to "
    "name as `input_file_id` in `POST /v1/jobs`. Uploads past the server's "
    "`max_upload_bytes` answer 413, and uploads that come too slowly 408; either leaves "
    "nothing behind.",
    openapi_extra=UPLOAD_BODY,
)
async def upload_file(
    request: Request,
    state: StateDep,
    tenant: Tenant,
    file_format: Annotated[
        str | None,
        Query(alias="format", description="jsonl | csv | parquet (default: from the suffix)"),
    ] = None,
) -> FileInfo:
    """Stream the upload to `data_dir/uploads/<id>.<format>` and record it for the tenant."""
    limit = state.config.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + FRAMING_ALLOWANCE:
        raise TooLarge(f"the upload is larger than this server's limit of {limit:,} bytes")
    if file_format is not None and file_format not in UPLOAD_FORMATS:
        raise Unprocessable([f"format: must be one of {', '.join(UPLOAD_FORMATS)}"])
    stored_bytes = state.config.limits(tenant).stored_bytes
    await run_in_threadpool(check_stored, state.store, tenant, stored_bytes)
    file_id = new_file_id()
    state.uploads_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = state.uploads_dir / f"{file_id}.upload"
    pace = Pace(state.config.body_timeout, state.config.body_min_rate)
    received = await receive_upload(
        request.headers.get("content-type", ""), paced(request.stream(), pace), staging, limit
    )
    purpose, fmt = _kind_of(received, file_format, staging)
    if fmt in ARCHIVE_FORMATS:
        folder = state.uploads_dir / file_id
        limit = state.config.upload_max_decompressed_bytes
        path, size = folder, await run_in_threadpool(_unpacked, staging, folder, limit)
    else:
        path, size = _stored(received, staging, fmt, state.uploads_dir / file_id), received.bytes
    record = FileRecord(
        file_id, tenant, received.filename, fmt, size, received.sha256, str(path), now(), purpose
    )
    await run_in_threadpool(record_file, state.store, record, stored_bytes)
    return FileInfo(**record.public())


def _stored(received: Received, staging: Path, fmt: str, stem: Path) -> Path:
    """The upload kept as it came, under the suffix its format and compression say."""
    try:
        compression = compression_of(received.filename, staging, fmt)
    except ValueError as exc:
        staging.unlink(missing_ok=True)
        raise Unprocessable([f"file: {exc}"]) from None
    return staging.rename(stem.with_name(f"{stem.name}.{fmt}{compression}"))


def _unpacked(staging: Path, folder: Path, limit: int) -> int:
    """An images or documents upload: its archive unpacked into `folder` (the archive
    then removed); the bytes unpacked (what the upload keeps)."""
    try:
        if not is_archive(staging):
            raise Unprocessable(["file: an images or documents upload is a .zip or .tar archive"])
        return unpack(staging, folder, limit)
    finally:
        staging.unlink(missing_ok=True)


def _kind_of(received: Received, file_format: str | None, staging: Path) -> tuple[str, str]:
    """The upload's purpose and format (a `batch` file is JSONL whatever its name);
    the staged file is removed when either cannot be told."""
    purpose = received.purpose or "user_data"
    if purpose not in PURPOSES:
        staging.unlink(missing_ok=True)
        raise BadRequest(f"purpose: {purpose!r} is not one of {', '.join(PURPOSES)}")
    fmt = file_format or ("jsonl" if purpose == "batch" else infer_format(received.filename))
    if fmt not in UPLOAD_FORMATS:
        staging.unlink(missing_ok=True)
        raise Unprocessable(
            [
                f"format: cannot tell the format of {received.filename!r}; name it *.jsonl, "
                "*.csv or *.parquet, or pass ?format="
            ]
        )
    return purpose, fmt


@router.get("/{file_id}", summary="An uploaded file's metadata")
def get_file(
    file_id: str,
    state: StateDep,
    tenant: Tenant,
) -> FileInfo:
    """Name, format, size and sha256 of one of the tenant's files (404 for any other)."""
    return FileInfo(**find_file(state.store, tenant, file_id).public())


@router.get("", summary="List files")
def list_files(
    state: StateDep,
    tenant: Tenant,
    *,
    purpose: Annotated[str | None, Query(max_length=64)] = None,
    order: Annotated[Literal["asc", "desc"], Query()] = "desc",
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
    after: Annotated[str | None, Query(max_length=64)] = None,
) -> FileList:
    """The tenant's files, newest first (`order=asc`: oldest first), `limit` a page;
    pass the page's `last_id` as `after` for the next."""
    found = state.store.files.of_tenant(tenant, purpose, order == "desc", limit + 1, after)
    page = [FileInfo(**f.public()) for f in found[:limit]]
    return FileList(
        data=page,
        first_id=page[0].id if page else None,
        last_id=page[-1].id if page else None,
        has_more=len(found) > limit,
    )


@router.get("/{file_id}/content", summary="A file's bytes")
def file_content(file_id: str, state: StateDep, tenant: Tenant) -> FileResponse:
    """The file as stored (an upload as it came; a batch's output or error JSONL)."""
    record = find_file(state.store, tenant, file_id)
    if Path(record.path).is_dir():
        raise Conflict(f"file {file_id!r} is an unpacked archive: its files are a job's input")
    return FileResponse(record.path, media_type="application/octet-stream")


@router.delete("/{file_id}", summary="Delete a file")
def delete_file(file_id: str, state: StateDep, tenant: Tenant) -> FileDeleted:
    """Forget the file and remove its bytes; a job already reading it may fail."""
    record = find_file(state.store, tenant, file_id)
    state.store.files.remove(tenant, file_id)
    remove_stored(Path(record.path))
    return FileDeleted(id=file_id)
