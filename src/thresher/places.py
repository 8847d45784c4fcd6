"""Which places an output may name: a folder, never nothing or a whole filesystem.

A sink's overwrite replaces what its folder holds; an empty path would be the working
directory and a root the machine's, so the spec refuses both (`sink.uri`,
`sink.staging`) before anything is touched. Which folders are thresher's to replace is
the sink's question (`sinks/publish.written_by_thresher`); which may never be a sink's
(the job store, the job's input) is the guard's (`sinks/guard.py`).
"""

from __future__ import annotations

import os

__all__ = ["check_output_place"]


def check_output_place(uri: str) -> str:
    """`uri`, unless it names no place or a whole filesystem (empty, `/`, `file:///`,
    `s3://`): overwrite replaces what a folder holds, an empty path would be the working
    directory and a root the machine's. ValueError says why."""
    scheme, sep, rest = uri.partition("://")
    if sep and scheme != "file":
        if rest.strip("/"):
            return uri
    elif uri.strip() and os.path.normpath(rest if sep else uri).strip("/"):
        return uri
    raise ValueError(f"names no folder or a filesystem root ({uri!r}); name the output's folder")
