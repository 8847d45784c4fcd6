"""A dataset-arrival trigger as the server config declares it (`[triggers.NAME]`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

__all__ = ["TriggerSettings"]

# With no marker, a set is complete when nothing was added or changed for this long.
DEFAULT_SETTLE_SECONDS = 30.0


class TriggerSettings(BaseModel):
    """Which files a trigger watches for, when a set of new ones is complete, and the job
    each set starts: the body of a `POST /v1/jobs` with no input of its own (the trigger
    gives it `source.files`), submitted for `tenant`.

    >>> t = TriggerSettings(watch="/srv/in", tenant="acme", job={"model": "m"})
    >>> t.settle, t.pattern
    (30.0, '*')
    """

    model_config = ConfigDict(extra="forbid")

    watch: str = Field(min_length=1)  # a local folder or an fsspec URL prefix
    pattern: str = Field(default="*", min_length=1)  # fnmatch, on the path below `watch`
    marker: str | None = Field(default=None, min_length=1)  # fnmatch, on a file's name
    # Seconds every file of a set must be unchanged (and, with no marker, no file added)
    # before the set is taken. Default: 30 with no marker, 0 with one.
    settle_seconds: float | None = Field(default=None, ge=0, le=7 * 86400)
    reprocess_changed: StrictBool = False
    poll_seconds: float = Field(default=10.0, ge=0.05, le=86400)
    tenant: str = Field(min_length=1, max_length=200)
    job: dict[str, Any]
    paused: StrictBool = False

    @property
    def settle(self) -> float:
        if self.settle_seconds is not None:
            return self.settle_seconds
        return 0.0 if self.marker else DEFAULT_SETTLE_SECONDS
