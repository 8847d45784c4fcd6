"""What of the server a tenant may read in a message: never its private paths.

A job's `message` (why it failed) and a bad record's `message` are written by code that
names files by their paths: an upload as `<data_dir>/uploads/file-….jsonl`, a buffered
batch as `<data_dir>/buffer/batch-….jsonl`, a part under `<data_dir>/outputs/`, the file
of a registered model. What a tenant is shown names each such file by its name alone (an
upload's name is its file id), so the server's layout, users and folders stay its own.
A tenant's own server-side input (under `allowed_roots`) is a path it named, and stays.

Every refusal goes through here too (`public_detail`, applied by the app to each
`ServiceError` it answers), so a check anywhere in the service (a reader's "no readable
record in the first lines of <path>") cannot put a server path in a 4xx.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from thresher.service.state import ServiceState

# Where a path in a message ends: white space, quotes, brackets, and `:` / `,` / `;` as in
# "…/file-1.jsonl: line 3" or "…/double.py:Double".
_PATH_TAIL = r"(?:/[^\s'\"`,;:()\[\]{}<>]*)?"


def private_roots(state: ServiceState) -> list[str]:
    """The server's folders and files a tenant never sees: `data_dir`, and the local
    file (or folder) of each registered model — each as given and as it really is."""
    roots = [str(state.data_dir)]
    for model in state.config.models.values():
        local = model.uri.removeprefix("file://")
        if "://" not in local and os.path.isabs(local):
            roots.append(local.split(":", 1)[0])  # a python model: `path.py:Class`
    return sorted({p for r in roots for p in (r, os.path.realpath(r))}, key=len, reverse=True)


def hide_private_paths(text: str, roots: Iterable[str]) -> str:
    """`text` with every path under one of `roots` replaced by its last name."""
    alternatives = "|".join(re.escape(r.rstrip("/")) for r in roots if r.rstrip("/"))
    if not alternatives:
        return text
    pattern = re.compile(rf"(?:file://)?(?:{alternatives}){_PATH_TAIL}")
    return pattern.sub(lambda match: _last_name(match.group(0)), text)


def public_message(state: ServiceState, message: str | None) -> str | None:
    """A job's or record's message as a tenant may read it."""
    return None if message is None else hide_private_paths(message, private_roots(state))


def public_detail(state: ServiceState, detail: str | list[str]) -> str | list[str]:
    """A refusal's detail (one message or a list of problems) as a tenant may read it."""
    roots = private_roots(state)
    if isinstance(detail, str):
        return hide_private_paths(detail, roots)
    return [hide_private_paths(problem, roots) for problem in detail]


def _last_name(path: str) -> str:
    return os.path.basename(path.rstrip("/")) or "…"
