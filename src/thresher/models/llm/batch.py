"""The running batch of the transformers engine: the generations decoding together and
their KV cache, which rows leave (`keep`, then `trim` of the columns none needs any
more) and join (`merge`) between steps.

Every row is left-padded: its cache entries sit at the right end, the mask marks them,
and its position ids count only its own tokens. Two batches merge by left-padding the
shorter one's cache and mask to the longer one's length; the padding is masked out of
attention, so each row attends to exactly its own tokens, as it would alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from thresher.models.llm.decoding import Generation


@dataclass
class Running:
    """Generations that decode together: `cache` holds their keys and values, `mask`
    (rows, cached tokens) marks the real ones, `pending` (rows, 1) is each row's newest
    token, not yet in the cache, and `positions` (rows, 1) its position."""

    generations: list[Generation]
    cache: Any
    mask: torch.Tensor
    positions: torch.Tensor
    pending: torch.Tensor

    @property
    def width(self) -> int:
        """Cached tokens per row, padding included."""
        return int(self.mask.shape[1])

    def keep(self, rows: list[int]) -> Running | None:
        """Only these rows (the others finished), or None when none is left."""
        if not rows:
            return None
        if len(rows) == len(self.generations):
            return self
        index = torch.tensor(rows, device=self.mask.device)
        self.cache.batch_select_indices(index)
        kept = Running(
            [self.generations[i] for i in rows],
            self.cache,
            self.mask[index],
            self.positions[index],
            self.pending[index],
        )
        kept.trim()
        return kept

    def trim(self) -> None:
        """Drop the leading cache columns that are padding in every row (the rows that
        needed them have left), so a long-lived batch does not grow ever wider."""
        start = int(self.mask.any(dim=0).int().argmax())
        if start:
            tensors = [[t[..., start:, :] for t in layer] for layer in _tensors(self.cache)]
            _set_tensors(self.cache, tensors)
            self.mask = self.mask[:, start:]


def cost(generations: list[Generation], width: int) -> int:
    """Padded tokens a batch holds by its end: rows x (its longest cached length + the
    most tokens any row may still generate)."""
    remaining = max((g.max_tokens - len(g.tokens) for g in generations), default=0)
    return len(generations) * (width + remaining)


def mergeable(cache: Any) -> bool:
    """Whether the cache is plain per-layer keys and values, which `merge` can pad and
    join. Sliding-window, quantized or recurrent caches are not: their batches run alone."""
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers 5
        return all(type(layer).__name__ == "DynamicLayer" for layer in layers)
    return type(cache).__name__ == "DynamicCache" and hasattr(cache, "key_cache")


def merge(first: Running, second: Running) -> Running:
    """One batch of both (the cache of `first`, grown to hold `second`'s rows)."""
    width = max(first.width, second.width)
    pairs = zip(_tensors(first.cache), _tensors(second.cache), strict=True)
    joined = [
        [torch.cat([_left_pad(a, width), _left_pad(b, width)]) for a, b in zip(x, y, strict=True)]
        for x, y in pairs
    ]
    _set_tensors(first.cache, joined)
    mask = torch.cat([_left_pad(first.mask, width, dim=1), _left_pad(second.mask, width, dim=1)])
    return Running(
        first.generations + second.generations,
        first.cache,
        mask,
        torch.cat([first.positions, second.positions]),
        torch.cat([first.pending, second.pending]),
    )


def _left_pad(tensor: torch.Tensor, width: int, dim: int = -2) -> torch.Tensor:
    """Zeros before the `dim` axis (the sequence axis: -2 of a (rows, heads, tokens,
    head size) key or value tensor) up to `width`."""
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    pad = [0, 0] * (tensor.dim() - 1 - (dim % tensor.dim())) + [missing, 0]
    return F.pad(tensor, pad)


def _tensors(cache: Any) -> list[list[torch.Tensor]]:
    """`[[keys, values], ...]`, one pair a layer."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [[layer.keys, layer.values] for layer in layers]
    return [[k, v] for k, v in zip(cache.key_cache, cache.value_cache, strict=True)]


def _set_tensors(cache: Any, tensors: list[list[torch.Tensor]]) -> None:
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for layer, (keys, values) in zip(layers, tensors, strict=True):
            layer.keys, layer.values = keys, values
    else:
        cache.key_cache[:] = [keys for keys, _ in tensors]
        cache.value_cache[:] = [values for _, values in tensors]
