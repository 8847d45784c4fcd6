"""The transformers engine: token-budget batches of length-sorted prompts, decoded with
a KV cache in one loop of our own.

Why not `model.generate`: it samples every row of a batch from one random stream, so a
row's `seed` could not make it reproducible whatever its batch mates, and it takes one
set of sampling parameters per call. The loop here is what generate does for greedy
search — left-padded prefill, position ids from the attention mask, one token a step
from the cache — so greedy outputs equal `generate(do_sample=False)` token for token.

Batching: sequences (a row's `n` choices are `n` sequences) are sorted by prompt length
and cut into batches whose padded size, rows x (longest prompt + most new tokens), stays
within `token_budget`: short prompts make wide batches, long ones narrow, and rows of
similar length pad little. A sequence that finishes (EOS, a stop string, its own
`max_tokens`) leaves the batch at once — its rows are dropped from the cache — so the
rest step faster. Waiting sequences do not join a running batch (continuous batching):
see benchmarks/results/llm.md for why that is not done.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from thresher.models.llm.model import Completion, Request
from thresher.models.llm.params import Sampling

_GOLDEN = 0x9E3779B9  # an odd step: choices' seeds differ in their low 32 bits


class _Sequence:
    """One choice being generated: its tokens so far and, once done, why it ended."""

    def __init__(
        self, request: int, prompt: list[int], sampling: Sampling, choice: int, context: int
    ) -> None:
        self.request = request
        self.prompt = prompt
        self.sampling = sampling
        # The model's context ends a completion as max_tokens does.
        self.max_tokens = min(sampling.max_tokens, context - len(prompt))
        self.generator: torch.Generator | None = None
        # Choice 0 samples from the row's seed itself; torch's CPU generator keeps only
        # the low 32 bits of a seed, so the other choices move those.
        self.seed = None if sampling.seed is None else (sampling.seed + choice * _GOLDEN) % 2**63
        self.tokens: list[int] = []
        self.finish_reason: str | None = None
        self.text: str | None = None  # set when a stop string cut it

    def push(self, token: int, eos: frozenset[int], tokenizer: Any) -> bool:
        """Add a generated token; True when the sequence is finished."""
        self.tokens.append(token)
        if token in eos or (self.sampling.stop and self._stopped(tokenizer)):
            self.finish_reason = "stop"
        elif len(self.tokens) >= self.max_tokens:
            self.finish_reason = "length"
        return self.finish_reason is not None

    def _stopped(self, tokenizer: Any) -> bool:
        text = tokenizer.decode(self.tokens, skip_special_tokens=True)
        cuts = [i for stop in self.sampling.stop if (i := text.find(stop)) >= 0]
        if cuts:
            self.text = text[: min(cuts)]
        return bool(cuts)

    def completion(self, tokenizer: Any) -> Completion:
        text = self.text
        if text is None:  # the EOS that ended it is no part of the text
            ended = self.finish_reason == "stop"
            text = tokenizer.decode(
                self.tokens[:-1] if ended else self.tokens, skip_special_tokens=True
            )
        return Completion(self.tokens, text, self.finish_reason or "length")


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

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        """`n` completions per request, in request order. ValueError for a prompt that
        fills the model's context, with no room for a token."""
        for request in requests:
            if len(request.prompt) >= self._context:
                raise ValueError(
                    f"prompt of {len(request.prompt)} tokens; the model's context holds"
                    f" {self._context}, with room for at least one new token"
                )
        sequences = [
            _Sequence(index, request.prompt, request.sampling, choice, self._context)
            for index, request in enumerate(requests)
            for choice in range(request.sampling.n)
        ]
        order = sorted(sequences, key=lambda s: len(s.prompt))
        with torch.inference_mode():
            for batch in budget_batches(order, self._budget):
                self._decode(batch)
        results: list[list[Completion]] = [[] for _ in requests]
        for sequence in sequences:
            results[sequence.request].append(sequence.completion(self._tokenizer))
        return results

    def _decode(self, batch: list[_Sequence]) -> None:
        """Generate every sequence of the batch to its end."""
        for sequence in batch:
            if sequence.seed is not None:
                sequence.generator = torch.Generator(self._device).manual_seed(sequence.seed)
        inputs, mask = self._left_padded([s.prompt for s in batch])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = _new_cache(self._model)
        alive = list(batch)
        while alive:
            logits = self._forward(inputs, mask, positions, cache)
            chosen = pick_tokens(logits, alive).tolist()
            keep = [i for i, (s, t) in enumerate(zip(alive, chosen, strict=True))
                    if not s.push(t, self._eos, self._tokenizer)]  # fmt: skip
            if not keep:
                return
            if len(keep) < len(alive):  # finished rows leave the batch and its cache
                index = torch.tensor(keep, device=self._device)
                cache.batch_select_indices(index)
                mask, positions = mask[index], positions[index]
                alive = [alive[i] for i in keep]
                chosen = [chosen[i] for i in keep]
            inputs = torch.tensor(chosen, device=self._device).unsqueeze(1)
            positions = positions[:, -1:] + 1
            mask = torch.cat([mask, mask.new_ones((len(alive), 1))], dim=1)

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


def budget_batches(sequences: list[_Sequence], budget: int) -> Iterator[list[_Sequence]]:
    """Consecutive batches of `sequences` (sorted by prompt length) whose padded size,
    rows x (longest prompt + most new tokens), is within `budget`; one sequence over
    the budget makes a batch alone."""
    batch: list[_Sequence] = []
    longest = most_new = 0
    for sequence in sequences:
        wide = max(longest, len(sequence.prompt))
        new = max(most_new, sequence.max_tokens)
        if batch and (len(batch) + 1) * (wide + new) > budget:
            yield batch
            batch, wide, new = [], len(sequence.prompt), sequence.max_tokens
        batch.append(sequence)
        longest, most_new = wide, new
    if batch:
        yield batch


def pick_tokens(logits: torch.Tensor, sequences: Sequence[_Sequence]) -> torch.Tensor:
    """The next token of every row: the most likely for a greedy row, else a sample at
    its temperature from its top-p nucleus, drawn from its own seeded generator."""
    chosen = logits.argmax(dim=-1)
    for row, sequence in enumerate(sequences):
        sampling = sequence.sampling
        if sampling.greedy:
            continue
        probs = torch.softmax(logits[row] / sampling.temperature, dim=-1)
        if sampling.top_p < 1.0:
            ordered, index = probs.sort(descending=True)
            outside = ordered.cumsum(-1) - ordered > sampling.top_p  # the best always stays
            probs = probs.scatter(0, index[outside], 0.0)
        chosen[row] = torch.multinomial(probs, 1, generator=sequence.generator)[0]
    return chosen


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every token that ends a completion: the generation config's EOS (one or a list)
    and the tokenizer's."""
    found: set[int] = set()
    config = getattr(model, "generation_config", None)
    for value in (getattr(config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            found.add(value)
        elif isinstance(value, list | tuple):
            found |= {int(v) for v in value}
    return found


def context_length(model: Any) -> int:
    """The most tokens (prompt and completion) the model attends to."""
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2**31


def _new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers 4 builds it without the config
        return DynamicCache()
