"""The transformers engine: length-sorted prompts, prefilled in small groups and decoded
together, with finished rows leaving the batch and waiting ones joining it.

Why not `model.generate`: it samples every row of a batch from one random stream, so a
row's `seed` could not make it reproducible whatever its batch mates, it takes one set
of sampling parameters per call, and a batch runs until its last row is done. The loop
here is what generate does for greedy search — left-padded prefill, position ids from
the attention mask, one token a step from the KV cache — so greedy outputs equal
`generate(do_sample=False)` token for token.

Scheduling (continuous batching): the generations (a row's `n` choices are `n`) wait
sorted by prompt length. Before each decoding step, waiting ones join the running batch
while its padded size, rows x (longest cached length + most tokens still to come), stays
within `token_budget`: they are prefilled in groups of similar length (little padding,
at most `PREFILL_TOKENS` a group) and merged into the batch (see `batch`). A generation
that ends (EOS, a stop string, its `max_tokens`, the model's context) leaves at once.
Prefilling short groups and decoding wide is what beats one padded `generate`: padding
a whole batch to its longest prompt costs prefill time, and narrow batches cost decode
steps (benchmarks/results/llm.md).
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Sequence
from typing import Any

import torch

from thresher.models.llm.batch import Running, cost, merge, mergeable
from thresher.models.llm.decoding import Generation, context_length, eos_ids, pick_tokens
from thresher.models.llm.model import Completion, Request

# Prompt tokens (padding included) prefilled in one forward pass: enough to keep the
# matrix products efficient, few enough that a group's prompts are of similar length.
PREFILL_TOKENS = 2048
# Waiting generations join a running batch once at least this fraction of its rows can:
# each join costs a prefill pass and a copy of the batch's cache, and joining a row
# whenever one left measured slower than this (benchmarks/results/llm.md).
JOIN_FRACTION = 0.5


class TransformersEngine:
    """Generates with a loaded causal LM and its tokenizer (see the module docstring)."""

    def __init__(self, model: Any, tokenizer: Any, device: torch.device, budget: int) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self._device = device
        self._budget = budget
        self._context = context_length(model)
        self._eos = frozenset(eos_ids(model, tokenizer))
        pad = tokenizer.pad_token_id
        self._pad = int(pad if pad is not None else min(self._eos, default=0))
        # transformers 5 renamed forward's `past_key_values` to `cache`.
        parameters = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"
        self._merges = mergeable(_new_cache(model))  # else: static batches

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        """`n` completions per request, in request order. ValueError for a prompt that
        fills the model's context, with no room for a token."""
        for request in requests:
            if len(request.prompt) >= self._context:
                raise ValueError(
                    f"prompt of {len(request.prompt)} tokens; the model's context holds"
                    f" {self._context}, with room for at least one new token"
                )
        generations = [
            Generation(index, request.prompt, request.sampling, choice, self._context)
            for index, request in enumerate(requests)
            for choice in range(request.sampling.n)
        ]
        for generation in generations:
            if generation.seed is not None:
                generator = torch.Generator(self._device).manual_seed(generation.seed)
                generation.generator = generator
        with torch.inference_mode():
            self._run(deque(sorted(generations, key=lambda g: len(g.prompt))))
        results: list[list[Completion]] = [[] for _ in requests]
        for generation in generations:
            results[generation.request].append(generation.completion(self._tokenizer))
        return results

    def _run(self, waiting: deque[Generation]) -> None:
        """Generate everything waiting (shortest prompt first) to its end."""
        running: Running | None = None
        while waiting or running is not None:
            group = self._joining(waiting, running)
            if group:
                joined = self._prefill(group)
                if running is None or joined is None:
                    running = running or joined
                else:
                    running = merge(running, joined)
            elif running is not None:
                running = self._step(running)

    def _joining(self, waiting: deque[Generation], running: Running | None) -> list[Generation]:
        """The next group to prefill: the shortest waiting prompts, as many as fit both
        PREFILL_TOKENS and, with the running batch, the token budget. An empty batch
        always takes one, however long; a cache that cannot merge waits for an empty
        batch (static batching)."""
        if running is not None and not self._merges:
            return []
        rows = running.generations if running is not None else []
        width = running.width if running is not None else 0
        group: list[Generation] = []
        while waiting:
            candidate = [*group, waiting[0]]
            longest = len(waiting[0].prompt)  # sorted: the newest is the longest
            too_wide = cost(rows + candidate, max(width, longest)) > self._budget
            too_long = self._merges and len(candidate) * longest > PREFILL_TOKENS
            if (too_wide or too_long) and (group or rows):
                if too_wide and len(group) < len(rows) * JOIN_FRACTION:
                    waiting.extendleft(reversed(group))  # too few to be worth a merge yet
                    return []
                break
            group.append(waiting.popleft())
        return group

    def _prefill(self, group: list[Generation]) -> Running | None:
        """Run the group's prompts and pick each one's first token."""
        inputs, mask = self._left_padded([g.prompt for g in group])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = _new_cache(self._model)
        logits = self._forward(inputs, mask, positions, cache)
        return self._advance(Running(group, cache, mask, positions[:, -1:], inputs[:, -1:]), logits)

    def _step(self, running: Running) -> Running | None:
        """One token for every running generation."""
        mask = torch.cat([running.mask, running.mask.new_ones((len(running.generations), 1))], 1)
        logits = self._forward(running.pending, mask, running.positions, running.cache)
        running.mask = mask
        return self._advance(running, logits)

    def _advance(self, running: Running, logits: torch.Tensor) -> Running | None:
        """Pick and add each row's next token; the finished rows leave."""
        chosen = pick_tokens(logits, running.generations)
        pairs = zip(running.generations, chosen.tolist(), strict=True)
        done = [generation.push(token, self._eos, self._tokenizer) for generation, token in pairs]
        running.pending = chosen.unsqueeze(1)
        running.positions = running.positions + 1
        return running.keep([row for row, finished in enumerate(done) if not finished])

    def _forward(
        self, inputs: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """The next-token logits of every row (float32), the cache updated in place."""
        output = self._model(
            input_ids=inputs,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_arg: cache},
        )
        return output.logits[:, -1, :].float()  # type: ignore[no-any-return]

    def _left_padded(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(map(len, prompts))
        inputs = torch.full((len(prompts), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            if prompt:
                inputs[row, width - len(prompt) :] = torch.tensor(prompt)
                mask[row, width - len(prompt) :] = 1
        return inputs.to(self._device), mask.to(self._device)


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers 4 builds it without the config
        return DynamicCache()
