"""Hugging Face transformers pipelines over a local model folder.

    [model]
    kind = "transformers"
    uri = "models/sentiment"             # a folder from save_pretrained (model + tokenizer)
    outputs = ["prediction", "proba"]
    options = { task = "text-classification", text_column = "review" }

Tasks (`model.options.task`, default `text-classification`):

- `text-classification` (alias `sentiment-analysis`): `prediction` gives a `label`
  column (the most probable label) and its `score`; `proba` gives `proba_<label>` for
  every label of the model's config, in label-id order. Texts longer than the model's
  limit are truncated.
- `feature-extraction`: an `embedding` column (FixedSizeList<float32>) pooled from the
  last hidden states: `pooling = "mean"` over the real tokens (the default) or `"cls"`
  (the first token).

Another task: wrap the pipeline in a `kind = "python"` model. Options `text_column` and
`device` are as for `sentence-transformers`; the model measures its rows (`sort_key`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from thresher.errors import ModelLoadError
from thresher.models.base import Column, LoadContext, Model
from thresher.models.outputs import as_column, proba_columns, proba_names
from thresher.models.text import (
    local_model_folder,
    prepare_hub,
    row_texts,
    text_column,
    token_lengths,
)
from thresher.models.torch import refuse_proba, torch_device
from thresher.spec import ModelSection

CLASSIFICATION_TASKS = ("text-classification", "sentiment-analysis")
FEATURE_TASKS = ("feature-extraction",)
POOLINGS = ("mean", "cls")


def load_transformers(spec: ModelSection, context: LoadContext) -> Model:
    """Build `pipeline(task, model=spec.uri)` on its device, offline.

    Raises ModelLoadError for a missing folder, an unsupported task or pooling, or an
    ambiguous text column.
    """
    task = str(spec.options.get("task", "text-classification"))
    if task not in CLASSIFICATION_TASKS + FEATURE_TASKS:
        raise ModelLoadError(
            f"model.options.task: thresher runs {', '.join(CLASSIFICATION_TASKS + FEATURE_TASKS)};"
            f" for {task!r}, wrap the pipeline in a kind = 'python' model"
        )
    if task in FEATURE_TASKS:
        refuse_proba(spec, "embeddings")
    pooling = spec.options.get("pooling", "mean")
    if pooling not in POOLINGS:
        raise ModelLoadError(f"model.options.pooling: {pooling!r}; use 'mean' or 'cls'")
    folder = local_model_folder(spec.uri)
    column = text_column(spec, context)
    prepare_hub()
    torch.set_num_threads(context.threads)
    from transformers import pipeline

    device = torch_device(spec.options.get("device"))
    # `task` is checked against the tasks above; pipeline's overloads want a literal.
    pipe = pipeline(task, model=str(folder), device=device)  # type: ignore[call-overload]
    return _pipeline_model(pipe, task, spec, column)


def pipeline_model(pipe: Any, spec: ModelSection, context: LoadContext) -> Model:
    """A transformers pipeline already built (given to `thresher.predict`), by its task."""
    task = str(pipe.task)
    if task not in CLASSIFICATION_TASKS + FEATURE_TASKS:
        raise ModelLoadError(
            f"model: a {task!r} pipeline; thresher runs"
            f" {', '.join(CLASSIFICATION_TASKS + FEATURE_TASKS)}, or wrap it in a function"
        )
    return _pipeline_model(pipe, task, spec, text_column(spec, context))


def _pipeline_model(pipe: Any, task: str, spec: ModelSection, column: str | None) -> Model:
    if task in FEATURE_TASKS:
        refuse_proba(spec, "embeddings")
        return FeatureExtractor(pipe, column, spec.options.get("pooling", "mean") == "mean")
    return TextClassifier(pipe, column, spec.outputs)


class _TextPipeline:
    """What both tasks share: the pipeline, the text column and row measuring."""

    def __init__(self, pipe: Any, column: str | None) -> None:
        self._pipe = pipe
        self._column = column

    def sort_key(self, batch: pa.Table) -> np.ndarray:
        """Each row's length in tokens, as the pipeline truncates it."""
        texts = row_texts(batch, self._column, null_as_empty=True)
        return self._lengths(texts)

    def _lengths(self, texts: list[str]) -> np.ndarray:
        tokenizer = self._pipe.tokenizer
        limit = getattr(tokenizer, "model_max_length", None)
        # Tokenizers without a known limit report a huge sentinel (int(1e30)).
        return token_lengths(tokenizer, texts, limit if limit and limit < 1_000_000 else None)


class TextClassifier(_TextPipeline):
    """`label` and `score` (and `proba_<label>`) for each row's text."""

    def __init__(self, pipe: Any, column: str | None, outputs: Sequence[str]) -> None:
        super().__init__(pipe, column)
        id2label = pipe.model.config.id2label
        self._labels = [str(id2label[i]) for i in sorted(id2label)]
        self._index = {label: i for i, label in enumerate(self._labels)}
        self._want_prediction = "prediction" in outputs
        self._proba_names = proba_names(self._labels) if "proba" in outputs else None

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """Output columns for one batch of texts."""
        texts = row_texts(batch, self._column)
        results = self._pipe(texts, batch_size=max(len(texts), 1), truncation=True, top_k=None)
        proba = np.zeros((len(texts), len(self._labels)), dtype=np.float32)
        for row, scores in enumerate(results):
            for item in scores:  # sorted by score, not by label: place each by its label
                proba[row, self._index[str(item["label"])]] = item["score"]
        columns: dict[str, Column] = {}
        if self._want_prediction:
            best = np.argmax(proba, axis=1)
            columns["label"] = pa.array([self._labels[i] for i in best], pa.string())
            columns["score"] = proba[np.arange(len(texts)), best]
        if self._proba_names is not None:
            columns.update(proba_columns(self._proba_names, proba))
        return columns


class FeatureExtractor(_TextPipeline):
    """An `embedding` for each row's text, pooled from the token vectors."""

    def __init__(self, pipe: Any, column: str | None, mean: bool) -> None:
        super().__init__(pipe, column)
        self._mean = mean

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """Output columns for one batch of texts."""
        texts = row_texts(batch, self._column)
        if not texts:
            width = int(self._pipe.model.config.hidden_size)
            return {
                "embedding": pa.FixedSizeListArray.from_arrays(pa.array([], pa.float32()), width)
            }
        results = self._pipe(
            texts,
            batch_size=max(len(texts), 1),
            tokenize_kwargs={"truncation": True},
            return_tensors=True,
        )
        lengths = self._lengths(texts) if self._mean else None
        right = getattr(self._pipe.tokenizer, "padding_side", "right") == "right"
        vectors = [self._pool(result, lengths, row, right) for row, result in enumerate(results)]
        return {"embedding": as_column(np.stack(vectors), "embedding")}

    def _pool(self, result: Any, lengths: np.ndarray | None, row: int, right: bool) -> np.ndarray:
        # Batched texts come back padded to the batch's longest: (1, padded tokens, hidden).
        tokens = torch.as_tensor(result).detach().cpu().float().reshape(-1, result.shape[-1])
        if lengths is None:
            return tokens[0].numpy()
        real = int(lengths[row])
        kept = tokens[:real] if right else tokens[tokens.shape[0] - real :]
        return kept.mean(dim=0).numpy()
