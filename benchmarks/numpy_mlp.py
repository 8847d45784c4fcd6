"""A `python`-kind model as a user writes one: a numpy MLP in their own class.

    [model]
    kind = "python"
    uri = "benchmarks/numpy_mlp.py:NumpyMLP"
    batch_format = "numpy"
    options = { weights = "mlp-weights.npz" }

The weights are scikit-learn's MLPClassifier (30-64-64-1, ReLU, logistic output) trained on
the benchmark's training set (`workloads.train_numpy_mlp`), saved as plain arrays: the
forward pass is three matrix products in numpy, so the model's cost is numpy's and the
rest is the pipeline's. The hand-written baselines call the same class on the same
batches (`workloads.load_predictor`), so every system computes the same predictions.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class NumpyMLP:
    """`predict({column: 1-D array})` -> `{"prediction": 0 or 1 per row}`."""

    def __init__(self, weights: str) -> None:
        self.path = weights
        self.layers: list[tuple[np.ndarray, np.ndarray]] = []

    def setup(self) -> None:
        with np.load(self.path) as saved:
            count = len([name for name in saved.files if name.startswith("w")])
            self.layers = [(saved[f"w{i}"], saved[f"b{i}"]) for i in range(count)]

    def predict(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        x = np.column_stack(list(batch.values()))
        for weights, bias in self.layers[:-1]:
            x = np.maximum(x @ weights + bias, 0.0)
        weights, bias = self.layers[-1]
        logit = (x @ weights + bias)[:, 0]
        return {"prediction": (logit > 0.0).astype(np.int64)}
