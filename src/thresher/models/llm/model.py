"""The generative model the worker sees: rows in, completions and token counts out.

An engine (transformers or vLLM) does the generating; this layer reads prompts and
sampling parameters from the batch and writes the output columns, the same for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from thresher.models.base import Column
from thresher.models.llm.params import Sampling, row_params
from thresher.models.llm.prompts import PromptReader


@dataclass(frozen=True)
class Request:
    """One row to complete: its prompt's token ids and how to sample."""

    prompt: list[int]
    sampling: Sampling


@dataclass(frozen=True)
class Completion:
    """One choice: the generated token ids (with a final EOS, if one was generated),
    the text (stop string and special tokens cut), and why it ended: `stop` (EOS or a
    stop string) or `length` (max_tokens reached)."""

    token_ids: list[int]
    text: str
    finish_reason: str


class Engine(Protocol):
    """Generates `request.sampling.n` completions for every request, in request order."""

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]: ...


class GenerativeModel:
    """`text`, `finish_reason`, `prompt_tokens`, `completion_tokens`, `total_tokens`
    for each row; with `model.options.n > 1`, `text` and `finish_reason` are lists of
    the choices and `completion_tokens` counts them all (as OpenAI's usage does)."""

    # Its engine packs the rows it is given by its own token budget (and, continuously,
    # refills as sequences finish): the worker hands it rows, not a token budget's worth.
    batches_itself = True

    def __init__(
        self,
        engine: Engine,
        prompts: PromptReader,
        params_column: str | None,
        base: Sampling,
        max_n: int,
    ) -> None:
        self._engine = engine
        self._prompts = prompts
        self._params_column = params_column
        self._base = base
        self._max_n = max_n

    def sort_key(self, batch: pa.Table) -> np.ndarray:
        """Each row's prompt length in tokens (0 for a row that has no usable prompt)."""
        try:
            ids = self._prompts.token_ids(batch)
        except ValueError:  # an ordering hint never fails a shard; predict names the row
            return np.zeros(batch.num_rows, dtype=np.int64)
        return np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))

    def predict(self, batch: pa.Table) -> Mapping[str, Column]:
        """Output columns for one batch: every row's prompt is read and its parameters
        checked before anything is generated, so a bad row costs no generation."""
        prompts = self._prompts.token_ids(batch)
        params = row_params(batch, self._params_column, self._base, self._max_n)
        requests = [Request(p, s) for p, s in zip(prompts, params, strict=True)]
        choices = self._engine.generate(requests) if requests else []
        return output_columns(requests, choices, listed=self._max_n > 1)


def output_columns(
    requests: Sequence[Request], choices: Sequence[Sequence[Completion]], listed: bool
) -> dict[str, Column]:
    """The output columns of completed requests; `listed`: one list of choices a row."""
    prompt_tokens = np.fromiter((len(r.prompt) for r in requests), np.int64, len(requests))
    completion_tokens = np.fromiter(
        (sum(len(c.token_ids) for c in row) for row in choices), np.int64, len(requests)
    )
    texts = [[c.text for c in row] for row in choices]
    reasons = [[c.finish_reason for c in row] for row in choices]
    kind = pa.list_(pa.string()) if listed else pa.string()
    return {
        "text": pa.array(texts if listed else [t[0] for t in texts], kind),
        "finish_reason": pa.array(reasons if listed else [r[0] for r in reasons], kind),
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
