"""The options each built-in model adapter takes, as typed models: a key not listed here
is a spec error naming `model.options.<key>`. Values are checked by the adapters, which
know what each value means; these models check the keys and the obvious types."""

from __future__ import annotations

from typing import Any

from thresher.plugins import Options

__all__ = [
    "BoosterOptions",
    "OnnxOptions",
    "SentenceTransformerOptions",
    "TransformersOptions",
]


class OnnxOptions(Options):
    classes: list[Any] | None = None  # labels of the probability columns, in index order
    device: str | None = None  # "auto", "cpu" or "cuda"


class BoosterOptions(Options):
    classes: list[Any] | None = None
    compile: Any = "auto"  # true, false or "auto" (the adapter explains a bad value)


class _TextOptions(Options):
    text_column: str | None = None
    device: str | None = None


class SentenceTransformerOptions(_TextOptions):
    output: str = "embedding"  # "embedding" or "columns"
    engine: str = "auto"  # "auto" or "sentence-transformers"
    normalize: bool = False
    tokens: bool = False  # also a `tokens` column: each text's token count, as truncated


class TransformersOptions(_TextOptions):
    task: str = "text-classification"
    pooling: str = "mean"
