"""The modules loading a model imports, named without importing any of them.

A service's job processes are forked from one process that imported these once for the
server's registered models (`service/background/warm.py`), so a job's zygote is forked
with torch, transformers and the model's architecture already in memory and only reads
the weights: for MiniLM that is 0.1 s instead of ~4 s of imports before the first batch.
"""

from __future__ import annotations

import json
from pathlib import Path

from thresher.plugins import Kind, PluginError, find
from thresher.spec import ModelSection

__all__ = ["library_modules"]

# Kinds loaded through transformers' Auto classes from a folder with a config.json.
_HUGGING_FACE = frozenset({"sentence-transformers", "transformers", "llm"})


def library_modules(spec: ModelSection) -> list[str]:
    """Dotted names of what loading `spec` imports, heaviest last: its adapter's module
    and, for the Hugging Face kinds, transformers and the module of the folder's
    architecture (`model_type` in its config.json; importing BERT's code alone is ~1.3 s).
    Names that turn out not to import are the importer's to skip."""
    try:
        adapter = find(Kind.MODEL, spec.kind).factory.partition(":")[0]
    except PluginError:
        return []
    modules = [adapter]
    if spec.kind in _HUGGING_FACE:
        modules.append("transformers")
        architecture = _model_type(Path(spec.uri))
        if architecture is not None:
            modules.append(f"transformers.models.{architecture}.modeling_{architecture}")
        if spec.options.get("engine") == "sentence-transformers":
            modules.append("sentence_transformers")
    return modules


def _model_type(folder: Path) -> str | None:
    """The folder's `model_type` as transformers names its package (`gpt2`, `llama`,
    `xlm-roberta` → `xlm_roberta`), or None for no readable config."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    name = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(name, str) or not name.replace("-", "_").isidentifier():
        return None
    return name.replace("-", "_")
