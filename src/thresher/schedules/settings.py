"""A schedule as the server config declares it (`[schedules.NAME]`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from thresher.schedules.catchup import Catchup
from thresher.schedules.ticks import Cron

__all__ = ["ScheduleSettings"]


class ScheduleSettings(BaseModel):
    """When a schedule fires, what it does about missed and overlapping runs, and the
    job it starts: the body of a `POST /v1/jobs`, submitted for `tenant`."""

    model_config = ConfigDict(extra="forbid")

    cron: str
    timezone: str = "UTC"
    tenant: str = Field(min_length=1, max_length=200)
    job: dict[str, Any]
    catchup: Catchup = Catchup.LATEST
    max_catchup: int = Field(default=10, ge=0, le=1000)
    starting_deadline: float | None = Field(default=None, gt=0)  # seconds after its time
    overlap: Literal["skip", "queue", "replace"] = "skip"
    paused: StrictBool = False

    @model_validator(mode="after")
    def _valid_cron(self) -> ScheduleSettings:
        Cron(self.cron, self.timezone)  # CronError (a ValueError) names cron or timezone
        return self

    @property
    def schedule(self) -> Cron:
        return Cron(self.cron, self.timezone)

    @property
    def deadline(self) -> timedelta | None:
        return None if self.starting_deadline is None else timedelta(seconds=self.starting_deadline)
