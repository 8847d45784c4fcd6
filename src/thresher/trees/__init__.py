"""Tree ensembles (XGBoost, LightGBM) compiled to machine code in process: each tree as
if/else code (`codegen.py`), compiled by LLVM through llvmlite (`engine.py`), one cached
object per model (`compiled.py` checks it against the library and falls back to it)."""

from __future__ import annotations

__all__: list[str] = []
