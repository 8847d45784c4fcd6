"""Generative models: a causal language model completes each row's prompt.

    [model]
    kind = "llm"
    uri = "models/my-chat-model"         # a folder from save_pretrained (model + tokenizer)
    options = { messages_column = "messages", max_tokens = 64 }

Input, one of:

- `prompt_column`: text, tokenized as it is (with the tokenizer's special tokens), as
  OpenAI's `/v1/completions` `prompt`;
- `messages_column`: a list of `{role, content}` (a list of structs or its JSON text),
  rendered with the chat template of the model folder, `add_generation_prompt=True`, as
  `/v1/chat/completions` `messages`.

With neither, the job's only feature is the prompt. Sampling: `max_tokens` (default
128), `temperature` (default 0: greedy, deterministic), `top_p`, `stop` (a string or up
to 4), `seed`, `n` are the defaults of every row; `params_column` names a column (a
struct, a map or a JSON object, with OpenAI's names, `max_completion_tokens` too) whose
set fields override them row by row.

Outputs: `text`, `finish_reason` (`stop`: EOS or a stop string; `length`: max_tokens or
the model's context), `prompt_tokens`, `completion_tokens`, `total_tokens`. With `n > 1`
in the options, `text` and `finish_reason` are lists of the choices (a row may ask for
fewer) and `completion_tokens` counts all of them.

Engines (`engine`): `transformers` (the default; CPU or GPU: `device`, `dtype`, and
`token_budget`, the padded tokens per batch, see `hf`) and `vllm` (GPUs:
`tensor_parallel_size`, `gpu_memory_fraction`, `dtype`; see `vllm`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from thresher.errors import ModelLoadError
from thresher.models.base import LoadContext, Model
from thresher.models.llm.model import Engine, GenerativeModel
from thresher.models.llm.params import defaults
from thresher.models.llm.prompts import PromptReader
from thresher.models.options import LlmOptions
from thresher.spec import ModelSection

__all__ = ["load_llm"]


def load_llm(spec: ModelSection, context: LoadContext) -> Model:
    """The generative model in the folder `spec.uri`, on the engine its options name.

    Raises ModelLoadError for a missing folder, a missing engine package, an input
    column that is ambiguous or not a feature, or a chat input without a chat template.
    """
    from thresher.models.text import local_model_folder, prepare_hub
    from thresher.models.torch import refuse_proba

    refuse_proba(spec, "generated text")
    options = LlmOptions.model_validate(spec.options)
    folder = local_model_folder(spec.uri)
    column, chat = _input_column(options, context)
    prepare_hub()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    prompts = PromptReader(tokenizer, column, chat)
    engine: Engine
    if options.engine == "vllm":
        from thresher.models.llm.vllm import load_vllm

        engine = load_vllm(folder, options)
    else:
        engine = _transformers_engine(folder, tokenizer, options, context)
    base = defaults(options)
    return GenerativeModel(engine, prompts, options.params_column, base, options.n)


def _transformers_engine(
    folder: Path, tokenizer: Any, options: LlmOptions, context: LoadContext
) -> Engine:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    from thresher.models.llm.hf import TransformersEngine
    from thresher.models.torch import torch_device

    torch.set_num_threads(context.threads)
    device = torch_device(options.device)
    dtype: Any = options.dtype if options.dtype == "auto" else getattr(torch, options.dtype)
    # `dtype` is transformers 5's name; 4.x calls it `torch_dtype` (deprecated in 5).
    name = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    model: Any = AutoModelForCausalLM.from_pretrained(str(folder), **{name: dtype})
    return TransformersEngine(model.to(device).eval(), tokenizer, device, options.token_budget)


def _input_column(options: LlmOptions, context: LoadContext) -> tuple[str, bool]:
    """The column that holds each row's prompt, and whether it holds chat messages."""
    if options.prompt_column and options.messages_column:
        raise ModelLoadError("model.options: set prompt_column or messages_column, not both")
    name = options.messages_column or options.prompt_column
    field = "messages_column" if options.messages_column else "prompt_column"
    features = context.features
    if name is None:
        if len(features) != 1:
            raise ModelLoadError(
                f"model.options.prompt_column: the job has {len(features)} features"
                f" ({', '.join(features) or 'none named'}); set prompt_column (text) or"
                " messages_column (chat messages)"
            )
        return features[0], False
    if features and name not in features:
        raise ModelLoadError(
            f"model.options.{field}: {name!r} is not among the job's features"
            f" ({', '.join(features)}); add it to source.columns"
        )
    if options.params_column and features and options.params_column not in features:
        raise ModelLoadError(
            f"model.options.params_column: {options.params_column!r} is not among the job's"
            f" features ({', '.join(features)}); add it to source.columns"
        )
    return name, bool(options.messages_column)
