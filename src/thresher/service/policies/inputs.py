"""Which server-side inputs a tenant's job may read: files under the server's
`allowed_roots`, or one of the tenant's own batch files (the request buffer's, an
OpenAI-style batch's prepared input), which no other tenant may name."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from thresher.service.errors import NotFound
from thresher.service.policies.roots import check_source_uri

if TYPE_CHECKING:
    from thresher.service.state import ServiceState

__all__ = ["buffered_batch_owner", "prepared_batch_owner", "readable_input"]


def readable_input(state: ServiceState, tenant: str, uri: str) -> tuple[str, list[str]]:
    """A server-side input the tenant may read — under `allowed_roots`, or one of the
    tenant's own request-buffer batch files (which the buffer submits as jobs) — and the
    roots the job's planner confines its files to: the configured ones, or the batch
    file alone."""
    owner = buffered_batch_owner(state, uri) or prepared_batch_owner(state, uri)
    if owner is None:
        return check_source_uri(uri, state.config.allowed_roots), list(state.config.allowed_roots)
    if owner != tenant:
        raise NotFound(f"source.uri: no such input {uri!r}")
    return uri, [uri]


def buffered_batch_owner(state: ServiceState, uri: str) -> str | None:
    """The tenant whose request-buffer batch file `uri` is, or None when `uri` is not a
    batch file. Only that tenant's submission may read it."""
    path = Path(uri.removeprefix("file://"))
    if os.path.realpath(path.parent) != os.path.realpath(state.buffer_dir):
        return None
    return state.store.requests.batch_tenant(path.stem)


def prepared_batch_owner(state: ServiceState, uri: str) -> str | None:
    """The tenant whose OpenAI-style batch's prepared input `uri` is, or None when it is
    not one (`data_dir/batches/<batch id>.jsonl`, written by the batch worker)."""

    path = Path(uri.removeprefix("file://"))
    if os.path.realpath(path.parent) != os.path.realpath(state.data_dir / "batches"):
        return None
    batch = state.store.batches.find(path.stem)
    return batch.tenant if batch is not None else None
