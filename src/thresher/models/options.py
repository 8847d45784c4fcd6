"""The options each built-in model adapter takes, as typed models: a key not listed here
is a spec error naming `model.options.<key>`. Values are checked by the adapters, which
know what each value means; these models check the keys and the obvious types."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool

from thresher.media.preprocess import ImageOptions
from thresher.plugins import Options

__all__ = [
    "TORCH_LIBRARIES",
    "BoosterOptions",
    "LlmOptions",
    "ObjectOptions",
    "OnnxOptions",
    "SentenceTransformerOptions",
    "TorchOptions",
    "TransformersOptions",
]

# The libraries whose objects `kind = "object"` loads in the zygote before it forks the
# workers, which then share the weights' pages (executors/zygote.py).
TORCH_LIBRARIES = frozenset({"torch", "sentence_transformers", "transformers"})


class OnnxOptions(Options):
    classes: list[Any] | None = None  # labels of the probability columns, in index order
    device: str | None = None  # "auto", "cpu" or "cuda"
    spinning: StrictBool = False  # intra-op threads spin between batches (see models/onnx.py)
    image: ImageOptions | None = None  # fed images, preprocessed so (models/images.py)
    image_column: str | None = None  # which image column, when the input has several


class BoosterOptions(Options):
    classes: list[Any] | None = None
    compile: Any = "auto"  # true, false or "auto" (the adapter explains a bad value)


class TorchOptions(Options):
    """`kind = "torch"`'s own options; a `pkg.module:Class` model's others are its class's
    keyword arguments, checked against the class's `__init__` (`models/user_code.py`)."""

    device: str | None = None  # "auto", "cpu", "cuda" or "cuda:N"
    weights: str | None = None  # a `pkg.module:Class` model's state dict file
    image: ImageOptions | None = None  # fed images, preprocessed so (models/images.py)
    image_column: str | None = None  # which image column, when the input has several


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


class LlmOptions(Options):
    """`kind = "llm"`: generation with a causal language model (see models/llm)."""

    engine: Literal["transformers", "vllm"] = "transformers"
    prompt_column: str | None = None  # a text column, or
    messages_column: str | None = None  # a list of {role, content} (or its JSON)
    params_column: str | None = None  # per-row sampling parameters (a struct or JSON)
    # Sampling defaults for rows that do not set their own. Temperature 0 is greedy.
    max_tokens: int = Field(default=128, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0)
    n: int = Field(default=1, ge=1)
    token_budget: int = Field(default=16384, ge=1)  # padded prompt + new tokens per batch
    device: str | None = None
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    tensor_parallel_size: int = Field(default=1, ge=1)  # vllm
    gpu_memory_fraction: float = Field(default=0.9, gt=0.0, le=1.0)  # vllm


class ObjectOptions(Options):
    """`model.options` of `kind = "object"`: a model handed to `thresher.predict` or
    `thresher.run` as a Python object (inmemory/objects.py)."""

    library: str = ""  # the object's top-level package (`sklearn`, `torch`, …)
    text_column: str | None = None  # a text model's input column, if not the only one
    normalize: bool = False  # a SentenceTransformer's: unit-length embeddings
    device: str | None = None  # a torch model's: "cpu", "cuda", "cuda:1"
