"""Generative models (`kind = "llm"`) on a small causal LM made here: random weights from
a config and a tokenizer trained offline on a few sentences, nothing downloaded."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from thresher.errors import ModelLoadError, SpecError  # noqa: E402
from thresher.models import LoadContext, load_model  # noqa: E402
from thresher.models.llm.hf import TransformersEngine  # noqa: E402
from thresher.models.llm.model import Request  # noqa: E402
from thresher.models.llm.params import Sampling, override  # noqa: E402
from thresher.models.llm.prompts import PromptReader, chat_messages  # noqa: E402
from thresher.spec import ModelSection, parse_spec  # noqa: E402
from thresher.testing import check_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("hf_offline")

PROMPTS = [
    "hello world",
    "the quick brown fox jumps over the lazy dog, and then",
    "a",
    "batch inference runs a model over every record exactly once, so",
    "how are you",
    "a small model made in a test",
]


@pytest.fixture(scope="module")
def lm_folder(tiny_causal_lm: Callable[[], Path]) -> Path:
    return tiny_causal_lm()


@pytest.fixture(scope="module")
def hf(lm_folder: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(lm_folder)
    return AutoModelForCausalLM.from_pretrained(lm_folder).eval(), tokenizer


def load(folder: Path, features: tuple[str, ...] = ("prompt",), **options: Any) -> Any:
    spec = ModelSection(kind="llm", uri=str(folder), options={"device": "cpu", **options})
    return load_model(spec, LoadContext(features=features, threads=1))


_REFERENCES: dict[tuple[int, ...], list[int]] = {}


def reference(hf: tuple[Any, Any], prompt: list[int], max_new: int) -> list[int]:
    """transformers' own greedy generate, one prompt at a time (greedy: the first
    `max_new` tokens of a longer run are the same, so one run of 24 serves them all)."""
    if max_new <= 24 and tuple(prompt) in _REFERENCES:
        tokens = _REFERENCES[tuple(prompt)]
        eos = hf[1].eos_token_id
        cut = tokens[:max_new]
        return cut[: cut.index(eos) + 1] if eos in cut else cut
    tokens = _generate(hf, prompt, max(max_new, 24))
    if max_new <= 24:
        _REFERENCES[tuple(prompt)] = tokens
        return reference(hf, prompt, max_new)
    return tokens[:max_new]


def _generate(hf: tuple[Any, Any], prompt: list[int], max_new: int) -> list[int]:
    model, tokenizer = hf
    inputs = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(
            inputs,
            attention_mask=torch.ones_like(inputs),
            do_sample=False,
            max_new_tokens=max_new,
            pad_token_id=tokenizer.pad_token_id,
        )
    return [int(t) for t in out[0, len(prompt) :]]


def chats() -> list[str]:
    return [json.dumps([{"role": "user", "content": p}]) for p in PROMPTS]


def test_a_greedy_chat_batch_equals_generate_token_for_token(hf: tuple[Any, Any]) -> None:
    model, tokenizer = hf
    reader = PromptReader(tokenizer, "messages", chat=True)
    prompts = reader.token_ids(pa.table({"messages": chats()}))
    engine = TransformersEngine(model, tokenizer, torch.device("cpu"), budget=200)
    got = engine.generate([Request(p, Sampling(max_tokens=24)) for p in prompts])
    for prompt, choices in zip(prompts, got, strict=True):
        assert choices[0].token_ids == reference(hf, prompt, 24)


@pytest.mark.parametrize(
    ("budget", "merges"), [(60, True), (150, True), (10**5, True), (60, False)]
)
def test_rows_leaving_and_joining_the_batch_still_equal_generate(
    hf: tuple[Any, Any], budget: int, merges: bool
) -> None:
    """Rows of different max_tokens leave the running batch at different steps and
    waiting ones join it (continuous batching); without merging, batches run alone."""
    model, tokenizer = hf
    prompts = [tokenizer(p)["input_ids"] for p in PROMPTS * 2]
    lengths = [3, 17, 8, 24, 5, 12, 1, 20, 9, 2, 15, 6]
    engine = TransformersEngine(model, tokenizer, torch.device("cpu"), budget=budget)
    engine._merges = merges
    requests = [Request(p, Sampling(max_tokens=n)) for p, n in zip(prompts, lengths, strict=True)]
    got = engine.generate(requests)
    for request, choices in zip(requests, got, strict=True):
        assert choices[0].token_ids == reference(hf, request.prompt, request.sampling.max_tokens)


def test_the_adapter_writes_generate_text_and_usage(lm_folder: Path, hf: tuple[Any, Any]) -> None:
    _, tokenizer = hf
    model = load(lm_folder, ("messages",), messages_column="messages", max_tokens=10)
    outputs = check_model(model, pa.table({"messages": chats()}))
    for row, chat in enumerate(chats()):
        rendered = tokenizer.apply_chat_template(
            json.loads(chat), tokenize=False, add_generation_prompt=True
        )
        prompt = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        expected = reference(hf, prompt, 10)
        assert outputs["text"][row].as_py() == tokenizer.decode(expected, skip_special_tokens=True)
        assert outputs["prompt_tokens"][row] == len(prompt)
        assert outputs["completion_tokens"][row] == len(expected)  # an EOS counts
        assert outputs["total_tokens"][row] == len(prompt) + len(expected)
        ended = expected[-1] == tokenizer.eos_token_id
        assert outputs["finish_reason"][row].as_py() == ("stop" if ended else "length")
        assert ended or len(expected) == 10
    assert set(outputs["finish_reason"].to_pylist()) == {"stop", "length"}  # both are seen


def test_the_chat_template_renders_with_a_generation_prompt(hf: tuple[Any, Any]) -> None:
    _, tokenizer = hf
    reader = PromptReader(tokenizer, "messages", chat=True)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    table = pa.table({"messages": [messages]})  # a list of structs, as Parquet holds it
    (ids,) = reader.token_ids(table)
    assert tokenizer.decode(ids) == "<s><|system|>be brief\n<|user|>hi\n<|assistant|>"
    with pytest.raises(ValueError, match="role"):
        chat_messages([{"role": "wizard", "content": "x"}], "messages")
    with pytest.raises(ValueError, match="non-empty list"):
        chat_messages("[]", "messages")


def test_a_folder_without_a_chat_template_is_a_load_error(tmp_path: Path, lm_folder: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(lm_folder)
    tokenizer.chat_template = None
    with pytest.raises(ModelLoadError, match="chat template"):
        PromptReader(tokenizer, "messages", chat=True)


def test_stop_strings_cut_the_text(lm_folder: Path) -> None:
    model = load(lm_folder, max_tokens=20)
    batch = pa.table({"prompt": PROMPTS[:1]})
    full = model.predict(batch)["text"][0].as_py()
    stop = full[6:8]
    assert stop and full.find(stop) == 6
    stopped = load(lm_folder, max_tokens=20, stop=[stop, "never-there"]).predict(batch)
    assert stopped["text"][0].as_py() == full[:6]
    assert stopped["finish_reason"][0].as_py() == "stop"
    assert 0 < stopped["completion_tokens"][0] < 20


def test_a_stop_string_late_in_a_long_completion_is_found(lm_folder: Path) -> None:
    batch = pa.table({"prompt": ["how are you"]})
    full = load(lm_folder, max_tokens=60).predict(batch)["text"][0].as_py()
    at = next(i for i in range(len(full) - 2, 0, -1) if full.find(full[i : i + 2]) == i)
    assert at > len(full) // 2  # far past the first tokens
    stopped = load(lm_folder, max_tokens=60, stop=full[at : at + 2]).predict(batch)
    assert stopped["text"][0].as_py() == full[:at]
    assert stopped["finish_reason"][0].as_py() == "stop"


def test_eos_ends_a_completion_with_stop(tmp_path: Path, hf: tuple[Any, Any]) -> None:
    model, tokenizer = hf
    prompt = tokenizer("hello world")["input_ids"]
    greedy = reference(hf, prompt, 12)
    eos = greedy[3] if greedy[3] not in greedy[:3] else greedy[5]
    model.generation_config.eos_token_id = eos
    try:
        engine = TransformersEngine(model, tokenizer, torch.device("cpu"), budget=1000)
        (choice,) = engine.generate([Request(prompt, Sampling(max_tokens=12))])[0]
    finally:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    assert choice.token_ids == greedy[: greedy.index(eos) + 1]
    assert choice.finish_reason == "stop"
    assert choice.text == tokenizer.decode(greedy[: greedy.index(eos)], skip_special_tokens=True)


@pytest.mark.slow
def test_rows_override_the_options_and_a_row_seed_reproduces(lm_folder: Path) -> None:
    model = load(lm_folder, ("prompt", "params"), prompt_column="prompt", params_column="params")
    params = [
        {"temperature": 1.0, "seed": 7, "max_completion_tokens": 6},
        None,
        {"temperature": 1.0, "seed": 8, "max_tokens": 6, "top_p": 0.9},
        {"temperature": 1.0, "seed": 7, "max_completion_tokens": 6},
    ]
    prompts = ["hello world", "a small", "hello world", "hello world"]
    batch = pa.table({"prompt": prompts, "params": [json.dumps(p) if p else None for p in params]})
    first = model.predict(batch)
    assert first["completion_tokens"].tolist() == [6, 128, 6, 6]  # the default max_tokens: 128
    texts = first["text"].to_pylist()
    assert texts[0] == texts[3] != texts[2]
    again = model.predict(batch.take([3, 1]))["text"].to_pylist()  # other batch mates
    assert again == [texts[3], texts[1]]


def test_n_choices_are_lists_and_differ_under_sampling(lm_folder: Path) -> None:
    model = load(lm_folder, n=3, temperature=1.0, seed=1, max_tokens=5)
    outputs = model.predict(pa.table({"prompt": ["hello world", "a"]}))
    texts = outputs["text"].to_pylist()
    assert [len(t) for t in texts] == [3, 3] and len(set(texts[0])) == 3
    assert outputs["finish_reason"].to_pylist() == [["length"] * 3] * 2
    assert outputs["completion_tokens"].tolist() == [15, 15]


def test_token_budget_batches_give_the_outputs_of_batch_size_one(lm_folder: Path) -> None:
    batch = pa.table({"prompt": PROMPTS})
    wide = load(lm_folder, max_tokens=12, token_budget=100_000).predict(batch)
    alone = load(lm_folder, max_tokens=12, token_budget=1).predict(batch)
    assert wide["text"].to_pylist() == alone["text"].to_pylist()
    assert wide["completion_tokens"].tolist() == alone["completion_tokens"].tolist()


def test_bad_rows_and_bad_parameters_name_what_is_wrong(lm_folder: Path) -> None:
    model = load(lm_folder, ("prompt", "params"), prompt_column="prompt", params_column="params")
    with pytest.raises(ValueError, match="'logit_bias' not supported"):
        model.predict(pa.table({"prompt": ["a"], "params": ['{"logit_bias": {}}']}))
    with pytest.raises(ValueError, match=r"raise model\.options\.n"):
        model.predict(pa.table({"prompt": ["a"], "params": ['{"n": 2}']}))
    with pytest.raises(ValueError, match="null at row 1"):
        model.predict(pa.table({"prompt": ["a", None], "params": [None, None]}))
    assert override(Sampling(), {"stop": "\n", "top_p": None}, 1).stop == ("\n",)
    neutral = {"frequency_penalty": 0, "presence_penalty": 0.0, "logprobs": False}
    assert override(Sampling(), neutral, 1) == Sampling()
    with pytest.raises(ValueError, match="'presence_penalty' not supported"):
        override(Sampling(), {"presence_penalty": 0.5}, 1)
    with pytest.raises(ValueError, match="temperature"):
        override(Sampling(), {"temperature": 5}, 1)


def test_options_are_checked_by_the_spec() -> None:
    base = {"source": {"uri": "in.jsonl"}, "sink": {"uri": "out/"}}
    with pytest.raises(SpecError, match=r"model\.options\.max_tokenz"):
        parse_spec({**base, "model": {"kind": "llm", "uri": "m", "options": {"max_tokenz": 3}}})
    with pytest.raises(SpecError, match=r"model\.options\.engine"):
        parse_spec({**base, "model": {"kind": "llm", "uri": "m", "options": {"engine": "tgi"}}})


def test_vllm_missing_names_the_engine_option_and_the_extra(
    lm_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # as if not installed
    with pytest.raises(ModelLoadError, match=r"model.options.engine: 'vllm'.*thresher\[vllm\]"):
        load(lm_folder, engine="vllm")


def test_an_ambiguous_input_column_is_a_load_error(lm_folder: Path) -> None:
    with pytest.raises(ModelLoadError, match="set prompt_column"):
        load(lm_folder, ("a", "b"))
    with pytest.raises(ModelLoadError, match="not among the job's features"):
        load(lm_folder, ("a",), prompt_column="b")


def test_the_vllm_engine_maps_the_options_and_reads_its_outputs(
    lm_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM is not installed here: a stand-in module records what the adapter asks."""
    import sys
    import types

    made: dict[str, Any] = {}

    class SamplingParams:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    class LLM:
        def __init__(self, **kwargs: Any) -> None:
            made["llm"] = kwargs

        def generate(self, prompts: list[Any], params: list[Any], use_tqdm: bool) -> list[Any]:
            made["prompts"], made["params"] = prompts, [p.kwargs for p in params]
            out = types.SimpleNamespace(token_ids=[5, 6], text="hi", finish_reason="length")
            return [types.SimpleNamespace(outputs=[out] * p.kwargs["n"]) for p in params]

    monkeypatch.setitem(
        sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams)
    )
    options = {"tensor_parallel_size": 2, "gpu_memory_fraction": 0.5, "stop": "x", "n": 2}
    model = load(lm_folder, engine="vllm", **options)
    assert made["llm"]["tensor_parallel_size"] == 2
    assert made["llm"]["gpu_memory_utilization"] == 0.5
    outputs = model.predict(pa.table({"prompt": ["hello world"]}))
    assert made["params"] == [
        {"n": 2, "temperature": 0.0, "top_p": 1.0, "max_tokens": 128, "stop": ["x"], "seed": None}
    ]
    assert list(made["prompts"][0]) == ["prompt_token_ids"]
    assert outputs["text"].to_pylist() == [["hi", "hi"]]
    assert outputs["completion_tokens"].tolist() == [4]
