"""A model written as a plain Python class: thresher calls setup() once per worker, then
predict(batch) for every batch. Here, a hand-written risk score over the demo's columns."""

from __future__ import annotations

import numpy as np


class RiskRules:
    def __init__(self, late_weight: float = 0.8) -> None:
        self.late_weight = late_weight

    def setup(self) -> None:
        # Load lookup tables, open clients, warm caches: once per worker, not per batch.
        self.bias = -2.5

    def predict(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        z = (
            self.bias
            + 2.0 * batch["debt_ratio"]
            + self.late_weight * batch["late_payments_30d"]
            + 1.5 * batch["late_payments_90d"]
        )
        risk = 1.0 / (1.0 + np.exp(-z))
        return {"risk": risk, "flag": risk > 0.5}
