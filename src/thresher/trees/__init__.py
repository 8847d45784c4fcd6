"""Tree ensembles (XGBoost, LightGBM) compiled to native code: QuickScorer kernels beside
tl2cgen's if/else code, one cached library per model (`compiled.py` picks the fastest)."""

from __future__ import annotations

__all__: list[str] = []
