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

WORDS = (
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


def thresher_adapter(folder: Path, prompts: list[str], new: int, budget: int) -> Any:
    options = {"max_tokens": new, "token_budget": budget, "device": "cpu"}
    spec = ModelSection(kind="llm", uri=str(folder), options=options)
    model = load_model(spec, LoadContext(features=("prompt",), threads=torch.get_num_threads()))
    batch = pa.table({"prompt": prompts})
    model.predict(batch.slice(0, 2))  # warm-up, as for the loop

    def run() -> list[list[int]]:
        outputs = model.predict(batch)
        return [[0] * int(n) for n in outputs["completion_tokens"]]  # counts; ids below

    return run


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
    load_avg = os.getloadavg()[0]
    rows: list[tuple[str, float, int]] = []
    seconds, loop = timed(lambda: per_prompt(model, tokenizer, prompts, new))
    rows.append(("per-prompt generate loop", seconds, sum(map(len, loop))))
    for size in args.sizes:
        seconds, out = timed(lambda s=size: batched(model, tokenizer, prompts, new, s))
        rows.append((f"padded batched generate, batch {size}", seconds, sum(map(len, out))))
    for budget in args.budgets:
        run = thresher_adapter(folder, prompts, new, budget)
        seconds, out = timed(run)
        rows.append((f"thresher llm adapter, token_budget {budget}", seconds, sum(map(len, out))))
    same = engine_ids(folder, prompts, new, max(args.budgets)) == loop
    report(rows, args, same, (load_avg, os.getloadavg()[0]))


def report(rows: list[tuple[str, float, int]], args: Any, same: bool, load: Any) -> None:
    speed = {name: tokens / seconds for name, seconds, tokens in rows}
    loop = speed["per-prompt generate loop"]
    best_batch = max((v, k) for k, v in speed.items() if k.startswith("padded"))
    best_thresher = max((v, k) for k, v in speed.items() if k.startswith("thresher"))
    lines = [
        "# Generation on a small CPU causal LM",
        "",
        f"`python benchmarks/llm.py --prompts {args.prompts} --max-tokens {args.max_tokens}"
        f" --threads {args.threads}`, run {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC."
        f" Load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end, on"
        f" {os.cpu_count()} cores shared with other work: the figures are noisy.",
        "",
        f"- {platform.processor() or platform.machine()}, Python {platform.python_version()},"
        f" torch {torch.__version__}, transformers {__import__('transformers').__version__}",
        "- model: random Llama, hidden 128, 4 layers, vocab 512 (made in the run); greedy",
        f"- thresher's tokens equal the per-prompt loop's, token for token: {same}",
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
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
