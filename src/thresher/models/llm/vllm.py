"""The vLLM engine (GPUs): the same options and outputs as the transformers engine, with
vLLM doing the batching (continuous batching, paged KV cache) itself.

vLLM is imported only when a job asks for `engine = "vllm"`; it is not part of any
thresher extra but its own (`pip install 'thresher[vllm]'`), since it pins its torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from thresher.errors import ModelLoadError
from thresher.models.llm.model import Completion, Request
from thresher.models.llm.params import Sampling


def load_vllm(folder: Path, options: Any) -> VllmEngine:
    """`vllm.LLM` over the model folder, with the options that map to it."""
    try:
        import vllm
    except ModuleNotFoundError as exc:
        raise ModelLoadError(
            "model.options.engine: 'vllm' needs the vllm package, which is not installed;"
            " pip install 'thresher[vllm]' on a machine with a GPU, or set"
            f" engine = 'transformers' ({exc})"
        ) from exc
    llm = vllm.LLM(
        model=str(folder),
        tokenizer=str(folder),
        tensor_parallel_size=int(options.tensor_parallel_size),
        gpu_memory_utilization=float(options.gpu_memory_fraction),
        dtype=str(options.dtype),
    )
    return VllmEngine(llm, vllm.SamplingParams)


class VllmEngine:
    """Hands every request of a batch to `LLM.generate` as token ids, at once."""

    def __init__(self, llm: Any, sampling_params: Any) -> None:
        self._llm = llm
        self._sampling_params = sampling_params

    def generate(self, requests: Sequence[Request]) -> list[list[Completion]]:
        """`n` completions per request, in request order."""
        prompts = [{"prompt_token_ids": request.prompt} for request in requests]
        params = [self.sampling_params(request.sampling) for request in requests]
        outputs = self._llm.generate(prompts, params, use_tqdm=False)
        return [
            [
                Completion(list(c.token_ids), str(c.text), _reason(c.finish_reason))
                for c in output.outputs
            ]
            for output in outputs
        ]

    def sampling_params(self, sampling: Sampling) -> Any:
        """vLLM's SamplingParams for one row."""
        return self._sampling_params(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            stop=list(sampling.stop) or None,
            seed=sampling.seed,
        )


def _reason(reason: Any) -> str:
    """vLLM's `stop` and `length` as they are; anything else (an abort) as `length`."""
    return "stop" if reason == "stop" else "length"
