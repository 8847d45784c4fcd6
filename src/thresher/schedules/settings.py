"""A schedule's settings: as the server config declares it (`[schedules.NAME]`, with the
tenant its jobs run for) and as a tenant sends it (`POST /v1/schedules`, with its name;
the tenant is the caller's)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from thresher.schedules.catchup import Catchup
from thresher.schedules.ticks import Cron

__all__ = [
    "ScheduleFields",
    "ScheduleNotify",
    "ScheduleRequest",
    "ScheduleSettings",
    "valid_name",
]

NAME_CHARS = "-_."


def valid_name(name: str, what: str = "schedule") -> str:
    """A schedule's (or trigger's) name: letters, digits, '-', '_', '.' (so `tenant/name`
    is unambiguous)."""
    if not name or len(name) > 200 or not all(c.isalnum() or c in NAME_CHARS for c in name):
        raise ValueError(f"{what} names are letters, digits, '-', '_', '.'; not {name!r}")
    return name


class ScheduleNotify(BaseModel):
    """Who hears of the schedule's own troubles (its jobs' ends are their `notify`'s)."""

    model_config = ConfigDict(extra="forbid")

    on_missed: str = Field(
        max_length=2048,
        description="A webhook URL: a signed POST for each tick recorded missed or failed.",
    )


class ScheduleFields(BaseModel):
    """When a schedule fires, what it does about missed and overlapping runs, and the
    job it starts: the body of a `POST /v1/jobs`, in which `{date}` (the fire time's
    date in the schedule's zone, `2026-12-01`) and `{nominal_time}` (the fire time in
    UTC, `20261201T020000Z`) are filled in in `name` and `source.uri`."""

    model_config = ConfigDict(extra="forbid")

    cron: str = Field(max_length=200)
    timezone: str = Field(default="UTC", max_length=64)  # IANA names: 30 at most
    job: dict[str, Any]
    catchup: Catchup = Catchup.LATEST
    max_catchup: int = Field(default=10, ge=0, le=1000)
    starting_deadline: float | None = Field(default=None, gt=0)  # seconds after its time
    overlap: Literal["skip", "queue", "replace"] = "skip"
    paused: StrictBool = False
    notify: ScheduleNotify | None = None

    @model_validator(mode="after")
    def _valid_cron(self) -> ScheduleFields:
        Cron(self.cron, self.timezone)  # CronError (a ValueError) names cron or timezone
        return self

    @property
    def schedule(self) -> Cron:
        return Cron(self.cron, self.timezone)

    @property
    def deadline(self) -> timedelta | None:
        return None if self.starting_deadline is None else timedelta(seconds=self.starting_deadline)


class ScheduleSettings(ScheduleFields):
    """A schedule of the server config, whose jobs are submitted for `tenant`."""

    tenant: str = Field(min_length=1, max_length=200)


class ScheduleRequest(ScheduleFields):
    """The body of `POST /v1/schedules`."""

    name: str = Field(min_length=1, max_length=200)

    @model_validator(mode="after")
    def _valid_name(self) -> ScheduleRequest:
        valid_name(self.name)
        return self

    def settings(self, tenant: str) -> ScheduleSettings:
        fields = self.model_dump(exclude={"name"})
        return ScheduleSettings.model_validate({**fields, "tenant": tenant})
