"""documents.py's hand-written loop, and the do-nothing model of its extract-only job.

    python benchmarks/document_hand.py PDF_DIR MODEL_DIR OUT_DIR --batch-size 64 --threads 2

The loop a person writes: in batches of `--batch-size` files, in name order, each PDF's
text extracted with pypdf as thresher extracts it (pages' text stripped and joined by a
blank line), then the same classifier (a transformers folder) on the batch's texts,
truncated at the model's limit, in one call; `path`, `label` and `score` (its softmax
probability) written as Parquet at the end. Prints its own split as JSON on its last
line: seconds extracting and seconds in the model.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa


class TextLength:
    """A `python`-kind model that does nothing worth timing: each text's length. The job
    that runs it is thresher's extraction, reading and writing without a model."""

    def predict(self, batch: pa.Table) -> Any:
        import pyarrow.compute as pc

        return {"prediction": pc.utf8_length(batch.column("text"))}


def extract(data: bytes) -> str:
    """A PDF's text, as thresher's documents source extracts it."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    return "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pdfs", type=Path)
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(str(args.model))
    model = AutoModelForSequenceClassification.from_pretrained(str(args.model)).eval()
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    paths = sorted(args.pdfs.glob("*.pdf"))
    found: dict[str, list[Any]] = {"path": [], "label": [], "score": []}
    extracting = modelling = 0.0
    for start in range(0, len(paths), args.batch_size):
        batch = paths[start : start + args.batch_size]
        clock = time.perf_counter()
        texts = [extract(path.read_bytes()) for path in batch]
        extracting += time.perf_counter() - clock
        clock = time.perf_counter()
        tokens = tokenizer(texts, truncation=True, padding=True, return_tensors="pt")
        with torch.inference_mode():
            proba = torch.softmax(model(**tokens).logits.double(), dim=1)
        score, best = proba.max(dim=1)
        modelling += time.perf_counter() - clock
        found["path"] += [str(path.resolve()) for path in batch]
        found["label"] += [labels[i] for i in best.tolist()]
        found["score"] += score.float().tolist()
    args.out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(found), args.out / "part-0.parquet")
    print(json.dumps({"extract": extracting, "model": modelling}))


if __name__ == "__main__":
    main()
