"""A CLIP folder's text side: captions embedded into the space its images are, so an
image and its caption can be compared (`kind = "vision"`, `task = "embedding"`, with
`text_column`).

    [model]
    kind = "vision"
    uri = "models/clip"
    options = { task = "embedding", text_column = "caption", normalize = true }

The folder's own tokenizer cuts each text at the model's most positions; rows are sorted
by their length in tokens before batching (`SortsByLength`), as for the text models, so
a batch pads little. The same folder with an image source embeds the images (vision.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.errors import ModelLoadError
from thresher.models.base import Column, LoadContext
from thresher.models.images import Head
from thresher.models.text import row_texts, token_lengths


class ClipText:
    """A CLIP model's projected text features of a batch's `column`, through `head`."""

    def __init__(self, model: Any, tokenizer: Any, column: str, head: Head, device: Any) -> None:
        self._model, self._tokenizer, self._column = model, tokenizer, column
        self._head, self._device = head, device
        self._max_length = int(model.config.text_config.max_position_embeddings)

    def sort_key(self, batch: pa.Table) -> np.ndarray:
        return token_lengths(self._tokenizer, row_texts(batch, self._column), self._max_length)

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        import torch

        texts = row_texts(batch, self._column)
        tokens = self._tokenizer(
            texts, padding=True, truncation=True, max_length=self._max_length, return_tensors="pt"
        ).to(self._device)
        with torch.inference_mode():
            features = self._model.get_text_features(**tokens)
        features = getattr(features, "pooler_output", features)  # transformers 5 wraps them
        return self._head(features.detach().float().cpu().numpy())


def load_clip_text(
    folder: Path, column: str, head: Head, device: str | None, context: LoadContext
) -> ClipText:
    """The CLIP model in `folder` embedding the texts of `column`; ModelLoadError if the
    folder holds another kind of model."""
    import torch
    import transformers

    from thresher.models.text import prepare_hub
    from thresher.models.torch import torch_device

    prepare_hub()
    config = transformers.AutoConfig.from_pretrained(str(folder))
    if config.model_type != "clip":
        raise ModelLoadError(
            f"model.options.text_column: {folder} is a {config.model_type!r} model;"
            " only a CLIP folder embeds texts and images into one space"
        )
    torch.set_num_threads(context.threads)
    placed = torch_device(device)
    model: Any = transformers.CLIPModel.from_pretrained(str(folder))
    model = model.to(placed).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    return ClipText(model, tokenizer, column, head, placed)
