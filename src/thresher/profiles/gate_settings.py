"""`[publish]`: the publish gate, conditions a job's output must meet before it is published.

[publish.checks]
rows_out_ratio = [0.8, 1.25]      # rows out within 80%..125% of the previous run's
max_error_rate = 0.01             # bad rows / rows in at most 1%
max_null_share = { score = 0.0 }  # share of null or NaN values in an output column
no_drift = true                   # the drift verdict against the baseline is not "drift"
custom = ["my_checks:plausible"]  # your function(profile, manifest): None/True or a reason

A job that fails any check is `held` (its output staged, the previous output live) until
`thresher approve` publishes or `thresher reject` discards it. The checks are judged in
`thresher.monitor.gate`; this section sits low, beside the spec that holds it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

__all__ = ["PublishChecks", "PublishSection", "gate_needs_profile"]

FUNCTION_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class PublishChecks(BaseModel):
    """What must hold for the output to be published. Unset checks are not judged."""

    model_config = ConfigDict(extra="forbid")

    # (low, high): rows_out / the previous succeeded run's rows_out (same job name).
    rows_out_ratio: tuple[float, float] | None = None
    max_error_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    # output (or input) column -> the highest share of its rows that may be null or NaN
    max_null_share: dict[str, float] = Field(default_factory=dict)
    no_drift: StrictBool = False
    custom: list[str] = Field(default_factory=list)  # "module:function"

    @field_validator("rows_out_ratio")
    @classmethod
    def _a_range(cls, ratio: tuple[float, float] | None) -> tuple[float, float] | None:
        if ratio is not None and not 0 <= ratio[0] <= ratio[1]:
            raise ValueError("must be [low, high] with 0 <= low <= high, e.g. [0.8, 1.25]")
        return ratio

    @field_validator("max_null_share")
    @classmethod
    def _shares(cls, shares: dict[str, float]) -> dict[str, float]:
        bad = sorted(name for name, share in shares.items() if not 0 <= share <= 1)
        if bad:
            raise ValueError(f"{bad[0]}: a share is between 0 and 1")
        return shares

    @field_validator("custom")
    @classmethod
    def _function_paths(cls, paths: list[str]) -> list[str]:
        bad = [p for p in paths if not FUNCTION_PATH.match(p)]
        if bad:
            raise ValueError(f"{bad[0]!r}: name a function as 'module:function'")
        return paths

    @property
    def reads_profile(self) -> bool:
        """Whether a check is judged from the job's profile."""
        return bool(self.max_null_share) or self.no_drift


class PublishSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checks: PublishChecks | None = None


def gate_needs_profile(publish: PublishSection, profiled: bool) -> list[str]:
    """A spec problem when a check reads the profile of a job that is not profiled."""
    checks = publish.checks
    if checks is None or not checks.reads_profile or profiled:
        return []
    return [
        "publish.checks: max_null_share and no_drift are judged from the job's profile;"
        " set [monitor] profile = true"
    ]
