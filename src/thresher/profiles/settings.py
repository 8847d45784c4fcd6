"""`[monitor]`: profiling in the same pass, drift thresholds, and where alerts go.

[monitor]
profile = true            # profile every model input and output column (the default)
segment_by = "region"     # and each of the column's values apart (data skew by group)
psi_warn = 0.1            # a column's verdict: PSI >= psi_warn is "warn",
psi_drift = 0.25          # PSI >= psi_drift is "drift" (the credit-risk convention)
bins = 10                 # baseline quantile bins, frozen (deciles)
alert_webhook = "https://hooks.example.com/thresher"
alert_on = "drift"        # or "warn": which job verdicts send an alert
prediction_column = "score"  # what quality compares with actuals (default: prediction)
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

__all__ = ["MonitorSection"]


class MonitorSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: StrictBool = True
    segment_by: str | None = None
    # Rows per job the profile's sketches see: a uniform random sample, so its cost does
    # not grow with the data (0: every row). Rows, nulls, NaN/inf counts and an output's
    # class counts always see every row; the rest are the sample's (README: each
    # figure's error). At 16,384 the sample's own error (DKW, 1.3%
    # at 99%) is the KLL sketch's own; twice the rows took the profiler twice the time a
    # shard to sort and sketch, for a KS bound between two jobs of 0.051 instead of 0.058.
    sample_rows: int = Field(default=16_384, ge=0)
    bins: int = Field(default=10, ge=2, le=100)
    psi_warn: float = Field(default=0.1, gt=0)
    psi_drift: float = Field(default=0.25, gt=0)
    # The family-wise false-discovery rate for the columns' KS and chi-square tests,
    # controlled across columns by Benjamini-Hochberg.
    fdr: float = Field(default=0.05, gt=0, lt=1)
    baseline: str | None = None  # a job id, job name or reference file to compare with
    alert_webhook: str | None = None
    alert_on: Literal["drift", "warn"] = "drift"
    # The output column quality compares with the actuals (`thresher actuals add
    # --prediction-column` names another for one part).
    prediction_column: str = Field(default="prediction", min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> MonitorSection:
        if self.psi_warn > self.psi_drift:
            raise ValueError("psi_warn must not be above psi_drift")
        return self
