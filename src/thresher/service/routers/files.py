"""`/v1/files`: upload an input file (JSONL, CSV or Parquet) and read its metadata."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from thresher.service.errors import TooLarge, Unprocessable
from thresher.service.limits import Pace, paced
from thresher.service.policies.auth import Tenant
from thresher.service.schemas import FileInfo
from thresher.service.state import StateDep
from thresher.service.uploads import (
    FRAMING_ALLOWANCE,
    compression_of,
    find_file,
    new_file_id,
    receive_upload,
    record_file,
)
from thresher.spec import FILE_FORMATS, infer_format
from thresher.store.db import now
from thresher.store.uploads import FileRecord

router = APIRouter(prefix="/v1/files", tags=["files"])

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
    if file_format is not None and file_format not in FILE_FORMATS:
        raise Unprocessable([f"format: must be one of {', '.join(FILE_FORMATS)}"])
    file_id = new_file_id()
    state.uploads_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = state.uploads_dir / f"{file_id}.upload"
    pace = Pace(state.config.body_timeout, state.config.body_min_rate)
    received = await receive_upload(
        request.headers.get("content-type", ""), paced(request.stream(), pace), staging, limit
    )
    fmt = file_format or infer_format(received.filename)
    if fmt is None:
        staging.unlink(missing_ok=True)
        raise Unprocessable(
            [
                f"format: cannot tell the format of {received.filename!r}; name it *.jsonl, "
                "*.csv or *.parquet, or pass ?format="
            ]
        )
    try:
        compression = compression_of(received.filename, staging, fmt)
    except ValueError as exc:
        staging.unlink(missing_ok=True)
        raise Unprocessable([f"file: {exc}"]) from None
    path = staging.rename(state.uploads_dir / f"{file_id}.{fmt}{compression}")
    record = FileRecord(
        file_id, tenant, received.filename, fmt, received.bytes, received.sha256, str(path), now()
    )
    await run_in_threadpool(record_file, state.store, record)
    return FileInfo(**record.public())


@router.get("/{file_id}", summary="An uploaded file's metadata")
def get_file(
    file_id: str,
    state: StateDep,
    tenant: Tenant,
) -> FileInfo:
    """Name, format, size and sha256 of one of the tenant's files (404 for any other)."""
    return FileInfo(**find_file(state.store, tenant, file_id).public())
