"""A dataset-arrival trigger: as the server config declares it (`[triggers.NAME]`, with
the tenant its jobs run for) and as a tenant sends it (`POST /v1/triggers`, with its
name; the tenant is the caller's, whatever the body says)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, model_validator

from thresher.schedules.settings import valid_name
from thresher.texts import printable

__all__ = ["TriggerFields", "TriggerRequest", "TriggerSettings"]

# With no marker, a set is complete when nothing was added or changed for this long.
DEFAULT_SETTLE_SECONDS = 30.0

# A path or URL prefix, and a pattern: bounded, and no control character (a NUL makes
# every path call raise ValueError) nor lone surrogate (no file name can hold one).
Where = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(printable)]
Pattern = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(printable)]


class TriggerFields(BaseModel):
    """Which files a trigger watches for, when a set of new ones is complete, and the job
    each set starts: the body of a `POST /v1/jobs` with no input of its own (the trigger
    gives it `source.files`), submitted for `tenant`.

    >>> t = TriggerSettings(watch="/srv/in", tenant="acme", job={"model": "m"})
    >>> t.settle, t.pattern
    (30.0, '*')
    """

    model_config = ConfigDict(extra="forbid")

    watch: Where  # a local folder or an fsspec URL prefix; with `table`, the table (an
    # Iceberg table by its name in the catalog of `job.source.options.catalog`; Kafka
    # topics as `kafka://host:port/topic,…`)
    # A table format: `watch` is such a table, and each run of new versions is a set
    # (`triggers/tables.py`); None: new files are.
    table: Literal["delta", "iceberg", "kafka"] | None = None
    pattern: Pattern = "*"  # fnmatch, on the path below `watch`
    marker: Pattern | None = None  # fnmatch, on a file's name
    # Seconds every file of a set must be unchanged (and, with no marker, no file added)
    # before the set is taken. Default: 30 with no marker, 0 with one.
    settle_seconds: float | None = Field(default=None, ge=0, le=7 * 86400)
    reprocess_changed: StrictBool = False
    poll_seconds: float = Field(default=10.0, ge=0.05, le=86400)
    job: dict[str, Any]
    paused: StrictBool = False

    @model_validator(mode="after")
    def _files_or_table(self) -> TriggerFields:
        """A table trigger takes versions: the fields about files do not apply."""
        if self.table is None:
            return self
        given = {
            "pattern": self.pattern != "*",
            "marker": self.marker is not None,
            "settle_seconds": self.settle_seconds is not None,
            "reprocess_changed": self.reprocess_changed,
        }
        for name, set_ in given.items():
            if set_:
                raise ValueError(f"{name}: a table trigger takes new versions, not files;"
                                 " remove it")  # fmt: skip
        return self

    @property
    def settle(self) -> float:
        if self.settle_seconds is not None:
            return self.settle_seconds
        if self.table is not None:
            return 0.0  # a table's version is committed whole
        return 0.0 if self.marker else DEFAULT_SETTLE_SECONDS


class TriggerSettings(TriggerFields):
    """A trigger as the watcher runs it: its fields and the tenant its jobs are for."""

    tenant: str = Field(min_length=1, max_length=200)


class TriggerRequest(TriggerFields):
    """The body of `POST /v1/triggers`: a trigger's fields and its name. A `tenant` sent
    is ignored: the trigger is the caller's."""

    name: str = Field(min_length=1, max_length=200)
    tenant: str | None = None  # ignored

    @model_validator(mode="after")
    def _valid_name(self) -> TriggerRequest:
        valid_name(self.name, "trigger")
        return self

    def settings(self, tenant: str) -> TriggerSettings:
        fields = self.model_dump(exclude={"name", "tenant"})
        return TriggerSettings.model_validate({**fields, "tenant": tenant})
