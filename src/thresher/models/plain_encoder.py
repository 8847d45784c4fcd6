"""Sentence-transformers folders of the common shape, run with transformers alone.

Most sentence-transformers models on disk are three steps (`modules.json`): a transformer,
a pooling of its token embeddings (mean, CLS or max), and maybe an L2 normalisation.
Importing sentence-transformers costs each worker ~2 s and ~120 MiB more than transformers
alone (it brings scikit-learn, scipy and pandas for its training and evaluation code): for
20,000 sentences on two cores, the difference between keeping up with the bare model and
falling behind it. `load_plain` runs exactly those steps as sentence-transformers 6 does —
the tokenizer with padding and `longest_first` truncation at `max_seq_length`, the model's
`last_hidden_state`, the pooling, the normalisation — and returns None for any other
folder (Dense layers, prompts, other pooling modes, lower-casing, custom code), which
sentence-transformers then loads itself. Tests hold both to the same vectors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

TRANSFORMER = {
    "sentence_transformers.models.Transformer",
    "sentence_transformers.base.modules.transformer.Transformer",
}
POOLING = {
    "sentence_transformers.models.Pooling",
    "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
}
NORMALIZE = {
    "sentence_transformers.models.Normalize",
    "sentence_transformers.base.modules.normalize.Normalize",
}
POOLING_MODES = ("mean", "cls", "max")
# Pooling flags of folders saved before sentence-transformers 6, by the mode they name.
LEGACY_FLAGS = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# sentence_bert_config.json of a version-6 text encoder, key by key.
V6_TRANSFORMER = {
    "transformer_task": "feature-extraction",
    "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
    "module_output_name": "token_embeddings",
}


@dataclass(frozen=True)
class Shape:
    """What a plain folder's modules say: the pooling, and whether vectors are normalised."""

    pooling: str
    dimension: int
    normalized: bool
    max_seq_length: int | None  # None: the tokenizer's own model_max_length


class PlainEncoder:
    """A transformer, a pooling and maybe a normalisation, run as sentence-transformers
    runs them; `tokenizer` and `max_seq_length` as on a SentenceTransformer."""

    def __init__(self, model: Any, tokenizer: Any, shape: Shape, device: torch.device) -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.max_seq_length = int(tokenizer.model_max_length)
        self.dimension = shape.dimension
        self._shape = shape
        self._device = device

    def encode(self, texts: list[str], normalize: bool) -> np.ndarray:
        """One float32 vector per text."""
        features = self.tokenizer(
            texts,
            padding=True,
            truncation="longest_first",
            max_length=self.max_seq_length,
            return_tensors="pt",
        )
        with torch.inference_mode():
            features = {name: tensor.to(self._device) for name, tensor in features.items()}
            tokens = self.model(**features, return_dict=True).last_hidden_state
            vectors = pool(tokens, features["attention_mask"], self._shape.pooling)
            if self._shape.normalized:
                vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
            if normalize:  # as encode(normalize_embeddings=True) does, after the modules
                vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
            return vectors.float().cpu().numpy()


def pool(tokens: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Token embeddings (batch, length, dim) to one vector per row, padding left out."""
    if mode == "cls":  # the first token that is not padding (left padding allowed)
        first = attention_mask.to(torch.int).argmax(dim=1)
        index = first.unsqueeze(-1).unsqueeze(1).expand(-1, 1, tokens.shape[-1])
        return torch.gather(tokens, 1, index).squeeze(1)
    if mode == "max":
        mask = attention_mask.unsqueeze(-1).expand_as(tokens).to(tokens.dtype)
        return tokens.masked_fill(mask == 0, float("-inf")).max(dim=1).values
    # mean, summed in float32 at least (half-precision sums lose too much)
    wide = torch.float32 if tokens.dtype in (torch.float16, torch.bfloat16) else tokens.dtype
    mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
    total = (tokens * mask).sum(dim=1, dtype=wide)
    count = torch.clamp(mask.sum(dim=1, dtype=wide), min=1e-9)
    return (total / count).to(tokens.dtype)


def load_plain(folder: Path, device: torch.device) -> PlainEncoder | None:
    """The folder's encoder run with transformers alone, or None when its shape is not the
    plain one (sentence-transformers must load it then)."""
    shape = plain_shape(folder)
    if shape is None:
        return None
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    if getattr(config, "hidden_size", None) != shape.dimension:
        return None
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if not getattr(tokenizer, "is_fast", False):
        return None
    if shape.max_seq_length is not None:
        tokenizer.model_max_length = shape.max_seq_length  # as sentence-transformers sets it
    model = AutoModel.from_pretrained(folder, config=config, local_files_only=True)
    return PlainEncoder(model, tokenizer, shape, device)


def plain_shape(folder: Path) -> Shape | None:
    """What the folder's `modules.json` and module configs say, if that is a transformer
    (at the folder's root), one plain pooling and maybe a normalisation; else None."""
    modules = _json(folder / "modules.json")
    if not isinstance(modules, list) or len(modules) not in (2, 3):
        return None
    types = [m.get("type") if isinstance(m, dict) else None for m in modules]
    normalized = len(types) == 3
    if (
        types[0] not in TRANSFORMER
        or modules[0].get("path") != ""
        or types[1] not in POOLING
        or (normalized and types[2] not in NORMALIZE)
    ):
        return None
    settings = _json(folder / "config_sentence_transformers.json") or {}
    if not isinstance(settings, dict) or settings.get("default_prompt_name"):
        return None  # every text gets a prompt: sentence-transformers handles prompts
    plain, max_seq_length = _plain_transformer(_json(folder / "sentence_bert_config.json"))
    mode, dimension = _plain_pooling(_json(folder / str(modules[1].get("path")) / "config.json"))
    if not plain or mode is None or dimension is None:
        return None
    return Shape(mode, dimension, normalized, max_seq_length)


def _plain_transformer(config: Any) -> tuple[bool, int | None]:
    """Whether a transformer's config asks for nothing but tokenize-and-run (no
    lower-casing, no processor arguments), and the max_seq_length it sets (None: the
    tokenizer's own)."""
    if not isinstance(config, dict):
        return False, None
    if set(config) <= {"max_seq_length", "do_lower_case"}:
        length = config.get("max_seq_length")
        plain = not config.get("do_lower_case") and isinstance(length, int)
        return plain, length if plain else None
    return config == V6_TRANSFORMER, None


def _plain_pooling(config: Any) -> tuple[str | None, int | None]:
    """The pooling mode and dimension, or None for anything but one of mean/CLS/max over
    every token (prompts included)."""
    if not isinstance(config, dict) or config.get("include_prompt", True) is not True:
        return None, None
    dimension = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        if isinstance(mode, list) and len(mode) == 1:
            mode = mode[0]
        modes = [mode] if isinstance(mode, str) else []
    else:
        modes = [name for flag, name in LEGACY_FLAGS.items() if config.get(flag)]
    known = set(LEGACY_FLAGS) | {
        "pooling_mode",
        "embedding_dimension",
        "word_embedding_dimension",
        "include_prompt",
    }
    if len(modes) != 1 or modes[0] not in POOLING_MODES or not set(config) <= known:
        return None, None
    return modes[0], dimension if isinstance(dimension, int) else None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
