"""One choice being generated, and how each next token is picked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from thresher.models.llm.model import Completion
from thresher.models.llm.params import Sampling

_GOLDEN = 0x9E3779B9  # an odd step: choices' seeds differ in their low 32 bits


class Generation:
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
        # A stop string that the newest token completes lies within the last few tokens
        # (a character is at most 4 bytes, a token at least 1): look there first, so a
        # long completion is not decoded whole at every step.
        window = 4 * max(map(len, self.sampling.stop)) + 4
        tail = tokenizer.decode(self.tokens[-window:], skip_special_tokens=True)
        if not any(stop in tail for stop in self.sampling.stop):
            return False
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


def pick_tokens(logits: torch.Tensor, sequences: Sequence[Generation]) -> torch.Tensor:
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
