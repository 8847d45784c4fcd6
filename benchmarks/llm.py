"""Generation on a small CPU causal LM: thresher's `kind = "llm"` adapter beside a
per-prompt `generate` loop and one padded batched `generate` at its best fixed batch
size, over the same prompts, in one run.

    python benchmarks/llm.py --prompts 64 --max-tokens 32 --out benchmarks/results/llm.md

The model is made here: a random Llama (hidden 128, 4 layers) and a byte-level BPE
tokenizer trained on generated sentences; nothing is downloaded. Prompts are 4 to 120
words, shuffled. Decoding is greedy for all three, so all three produce the same tokens
(checked: thresher's token ids must equal the per-prompt loop's); tokens/s is generated
tokens (an EOS ends a completion early, the same for all) over wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from thresher.models import LoadContext, load_model
from thresher.models.llm.hf import TransformersEngine
from thresher.models.llm.model import Request
from thresher.models.llm.params import Sampling
from thresher.spec import ModelSection

WORDS = (  # noqa: SIM905 (a list literal of 75 words reads worse)
    "the of and to in is was for on that with as by at from his her they have been which one"
    " this had not but are were their all there an when would who will more other so if out"
    " what about up time into some can them these only two may first new then also could any"
    " after most made over such our people years work world city state day house part water"
).split()


def make_model(folder: Path, seed: int = 0) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = np.random.default_rng(seed)
    corpus = [" ".join(rng.choice(WORDS, 12)) for _ in range(500)]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<pad>", "<s>", "</s>"], initial_alphabet=alphabet
    )
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).eval().save_pretrained(folder)


def make_prompts(count: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 121, count)
    return [" ".join(rng.choice(WORDS, int(n))) for n in lengths]


def timed(run: Callable[[], list[list[int]]]) -> tuple[float, list[list[int]]]:
    started = time.perf_counter()
    tokens = run()
    return time.perf_counter() - started, tokens


def completion(row: Any, start: int, pad: int, eos: int) -> list[int]:
    """generate's new tokens of one row, up to and with its EOS (then padding follows)."""
    tokens = [int(t) for t in row[start:]]
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def per_prompt(model: Any, tokenizer: Any, prompts: list[str], new: int) -> list[list[int]]:
    out = []
    with torch.inference_mode():
        for prompt in prompts:
            inputs = tokenizer(prompt, return_tensors="pt")
            ids = model.generate(**inputs, do_sample=False, max_new_tokens=new)
            width = inputs["input_ids"].shape[1]
            out.append(completion(ids[0], width, tokenizer.pad_token_id, tokenizer.eos_token_id))
    return out


def batched(model: Any, tokenizer: Any, prompts: list[str], new: int, size: int) -> list[list[int]]:
    out = []
    tokenizer.padding_side = "left"
    with torch.inference_mode():
        for start in range(0, len(prompts), size):
            inputs = tokenizer(prompts[start : start + size], return_tensors="pt", padding=True)
            ids = model.generate(**inputs, do_sample=False, max_new_tokens=new)
            width = inputs["input_ids"].shape[1]
            pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
            out += [completion(row, width, pad, eos) for row in ids]
    return out


def thresher_adapter(
    folder: Path, prompts: list[str], new: int, budget: int, merge: bool, *, lengths: Any = None
) -> Any:
    """thresher's adapter, as a worker calls it: predict on a batch of prompt rows (with
    each row's own max_tokens, when `lengths` gives them)."""
    options: dict[str, Any] = {"max_tokens": new, "token_budget": budget, "device": "cpu"}
    columns: dict[str, Any] = {"prompt": prompts}
    if lengths is not None:
        options |= {"prompt_column": "prompt", "params_column": "params"}
        columns["params"] = [json.dumps({"max_tokens": int(n)}) for n in lengths]
    spec = ModelSection(kind="llm", uri=str(folder), options=options)
    context = LoadContext(features=tuple(columns), threads=torch.get_num_threads())
    model = load_model(spec, context)
    if not merge:  # static token-budget batches: what the engine falls back to
        model._engine._merges = False
    batch = pa.table(columns)
    model.predict(batch.slice(0, 2))  # warm-up, as for the loop

    def run() -> list[list[int]]:
        outputs = model.predict(batch)
        return [[0] * int(n) for n in outputs["completion_tokens"]]  # counts; ids below

    return run


def round_robin(
    systems: dict[str, Callable[[], list[list[int]]]], repeat: int
) -> tuple[dict[str, float], dict[str, list[list[int]]]]:
    """Each system's fastest of `repeat` runs (round robin, so a burst of other load
    hits all alike), and its outputs."""
    seconds: dict[str, list[float]] = {name: [] for name in systems}
    outputs: dict[str, list[list[int]]] = {}
    for _ in range(repeat):
        for name, run in systems.items():
            took, outputs[name] = timed(run)
            seconds[name].append(took)
    return {name: min(times) for name, times in seconds.items()}, outputs


def mixed_lengths(folder: Path, args: Any) -> list[str]:
    """Continuous against static batching where it matters: more prompts than one batch
    holds, each with its own max_tokens (8 to 64), so rows end at different steps."""
    prompts = make_prompts(args.pool, seed=2)
    lengths = np.random.default_rng(3).integers(8, 65, args.pool)
    systems = {
        f"thresher llm, {how}, token_budget {budget}": thresher_adapter(
            folder, prompts, 64, budget, merge, lengths=lengths
        )
        for budget in args.budgets
        for merge, how in ((True, "continuous"), (False, "static"))
    }
    seconds, outputs = round_robin(systems, args.repeat)
    lines = [
        "",
        f"## Continuous against static batching: {args.pool} prompts, max_tokens 8 to 64 a row",
        "",
        "| system | seconds | tokens | tokens/s |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, took in seconds.items():
        count = sum(map(len, outputs[name]))
        lines.append(f"| {name} | {took:.2f} | {count} | {count / took:.0f} |")
    lines.append("")
    for budget in args.budgets:
        ratio = (
            seconds[f"thresher llm, static, token_budget {budget}"]
            / seconds[f"thresher llm, continuous, token_budget {budget}"]
        )
        lines.append(f"- token_budget {budget}: continuous / static tokens/s **{ratio:.2f}x**")
    return lines


def engine_ids(folder: Path, prompts: list[str], new: int, budget: int) -> list[list[int]]:
    """thresher's token ids (the engine under the adapter), for the equality check."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    engine = TransformersEngine(model, tokenizer, torch.device("cpu"), budget)
    requests = [Request(tokenizer(p)["input_ids"], Sampling(max_tokens=new)) for p in prompts]
    return [choices[0].token_ids for choices in engine.generate(requests)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--budgets", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the fastest counts")
    parser.add_argument("--pool", type=int, default=256, help="prompts of the mixed run; 0: none")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    folder = Path(tempfile.mkdtemp(prefix="thresher-llm-bench-"))
    make_model(folder)
    prompts, new = make_prompts(args.prompts), args.max_tokens
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    per_prompt(model, tokenizer, prompts[:2], 4)  # warm-up: first calls allocate
    systems: dict[str, Callable[[], list[list[int]]]] = {
        "per-prompt generate loop": lambda: per_prompt(model, tokenizer, prompts, new)
    }
    for size in args.sizes:
        name = f"padded batched generate, batch {size}"
        systems[name] = lambda s=size: batched(model, tokenizer, prompts, new, s)
    for budget in args.budgets:
        for merge, how in ((True, "continuous"), (False, "static")):
            name = f"thresher llm, {how}, token_budget {budget}"
            systems[name] = thresher_adapter(folder, prompts, new, budget, merge)
    load_avg = os.getloadavg()[0]
    seconds, outputs = round_robin(systems, args.repeat)
    loop = outputs["per-prompt generate loop"]
    same = engine_ids(folder, prompts, new, max(args.budgets)) == loop
    rows = [(name, seconds[name], sum(map(len, outputs[name]))) for name in systems]
    extra = mixed_lengths(folder, args) if args.pool else []
    report(rows, args, same, (load_avg, os.getloadavg()[0]), extra)


def report(
    rows: list[tuple[str, float, int]], args: Any, same: bool, load: Any, extra: list[str]
) -> None:
    speed = {name: tokens / seconds for name, seconds, tokens in rows}
    loop = speed["per-prompt generate loop"]
    best_batch = max((v, k) for k, v in speed.items() if k.startswith("padded"))
    best_thresher = max((v, k) for k, v in speed.items() if k.startswith("thresher"))
    best_static = max((v, k) for k, v in speed.items() if ", static," in k)
    best_continuous = max((v, k) for k, v in speed.items() if ", continuous," in k)
    lines = [
        "# Generation on a small CPU causal LM",
        "",
        f"`python benchmarks/llm.py --prompts {args.prompts} --max-tokens {args.max_tokens}"
        f" --threads {args.threads} --pool {args.pool}`,"
        f" run {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC."
        f" Load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end, on"
        f" {os.cpu_count()} cores shared with other work: the figures are noisy.",
        "",
        f"- {platform.processor() or platform.machine()}, Python {platform.python_version()},"
        f" torch {torch.__version__}, transformers {__import__('transformers').__version__}",
        "- model: random Llama, hidden 128, 4 layers, vocab 512 (made in the run); greedy",
        f"- thresher's tokens equal the per-prompt loop's, token for token: {same}",
        f"- seconds: the fastest of {args.repeat} runs of each, taken round robin",
        "",
        "| system | seconds | tokens | tokens/s |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {n} | {s:.2f} | {t} | {t / s:.0f} |" for n, s, t in rows]

    lines += [
        "",
        f"- thresher ({best_thresher[1]}) / per-prompt loop: **{best_thresher[0] / loop:.2f}x**"
        " (target >= 3)",
        f"- thresher / best padded batched generate ({best_batch[1]}):"
        f" **{best_thresher[0] / best_batch[0]:.2f}x** (target >= 1.2)",
        f"- continuous ({best_continuous[1]}) / static ({best_static[1]}) token-budget"
        f" batching: **{best_continuous[0] / best_static[0]:.2f}x**",
    ]
    text = "\n".join(lines + extra) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
