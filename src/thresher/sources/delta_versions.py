"""What a run of Delta table versions added: the data files of their `add` actions, when
every one of them only added (an append), or why the whole table must be read instead.

Each version's commit is its own file in the log (`_delta_log/<version, 20 digits>.json`,
one action a line), so the run's commits are read as they are: a commit with a `remove`
action (an overwrite, a DELETE, UPDATE or MERGE, an OPTIMIZE that rewrote files) did
more than add rows, and so did one whose commit file is gone (the log's cleanup after
`logRetentionDuration`). deltalake's `history()` is not used for this: for a table
opened at an older version it numbers the newest commits as if they were that
version's.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from thresher.errors import SourceError
from thresher.sources.files import filesystem
from thresher.sources.table_changes import ChangesRead

__all__ = ["read_versions"]


def read_versions(uri: str, first: int, last: int) -> ChangesRead:
    """The files versions `first`..`last` of the table at `uri` added, each commit read
    from the log; the whole table when one of them did more than add."""
    fs, root = filesystem(uri.rstrip("/"))
    added: set[str] = set()
    for version in range(first, last + 1):
        path = f"{root}/_delta_log/{version:020d}.json"
        try:
            with fs.open(path, "rb") as f:
                actions = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            gone = f"version {version}'s commit is no longer in the log"
            return ChangesRead("version", first, last, None, gone)
        except (OSError, ValueError) as exc:
            raise SourceError(f"source.uri: cannot read version {version} of {uri}: {exc}") from exc
        why = _rewrote(version, actions)
        if why is not None:
            return ChangesRead("version", first, last, None, why)
        added.update(unquote(a["add"]["path"]) for a in actions if "add" in a)
    return ChangesRead("version", first, last, frozenset(added))


def _rewrote(version: int, actions: list[dict[str, Any]]) -> str | None:
    """Why the commit of `version` did more than add files; None when it only added."""
    removes = sum(1 for a in actions if "remove" in a)
    if not removes:
        return None
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    parts = (info.get("operation"), info.get("operationParameters", {}).get("mode"))
    what = " ".join(str(p) for p in parts if p) or "a commit"
    return f"version {version} ({what}) removed or rewrote {removes} files"
