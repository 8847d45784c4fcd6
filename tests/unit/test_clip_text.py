"""A CLIP folder's text side (`kind = "vision"`, `text_column`): captions embedded into the
space its images are, equal to the same model called by hand; a tokenizer built offline
(a byte-pair vocabulary of letters), random weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import thresher

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.unit

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def tiny_clip(folder: Path) -> Any:
    """A CLIP model with random weights, its tokenizer and image processor, saved."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

    folder.mkdir()
    tokens = ["<|startoftext|>", "<|endoftext|>", *LETTERS, *(c + "</w>" for c in LETTERS)]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(
        str(folder / "vocab.json"), str(folder / "merges.txt"), unk_token="<|endoftext|>"
    )
    tokenizer.save_pretrained(folder)
    config = CLIPConfig(
        text_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "vocab_size": len(tokens),
            "max_position_embeddings": 16,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "pad_token_id": 1,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=16,
    )
    torch.manual_seed(0)
    model = CLIPModel(config).eval()
    model.save_pretrained(folder)
    CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(folder)
    return model, tokenizer


def test_captions_embed_as_the_model_does_by_hand(tmp_path: Path) -> None:
    model, tokenizer = tiny_clip(tmp_path / "clip")
    captions = ["a cat", "a dog on a sofa", "", "x" * 40, "sky", "the red car"]
    table = pa.table({"id": list(range(len(captions))), "caption": captions})
    out = thresher.predict(
        table,
        str(tmp_path / "clip"),
        kind="vision",
        id_column="id",
        model_options={"task": "embedding", "text_column": "caption", "normalize": True},
        batch_size=4,
        progress=False,
    )
    got = out.sort_by("id")["embedding"].to_pylist()
    for caption, vector in zip(captions, got, strict=True):
        tokens = tokenizer([caption], truncation=True, max_length=16, return_tensors="pt")
        with torch.inference_mode():
            features = model.get_text_features(**tokens)
        expected = getattr(features, "pooler_output", features)[0]
        expected = (expected / expected.norm()).numpy()
        assert vector == pytest.approx(expected, abs=1e-5), caption


def test_text_needs_a_clip_folder_and_the_embedding_task(tmp_path: Path) -> None:
    tiny_clip(tmp_path / "clip")
    table = pa.table({"id": [1], "caption": ["a cat"]})
    with pytest.raises(thresher.ThresherError, match="text_column"):
        thresher.predict(
            table,
            str(tmp_path / "clip"),
            kind="vision",
            id_column="id",
            model_options={"text_column": "caption"},  # classification
            progress=False,
        )
