"""Vision models with random weights: thresher's outputs equal the same model called by
hand on the same preprocessing, written out here rather than taken from thresher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

import thresher
from media_files import (
    LABELS,
    bad_files,
    image_folder,
    onnx_pooling_classifier,
    resnet18,
    save_exported,
)

torch = pytest.importorskip("torch")
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
RECIPE = {"size": 72, "crop": 64}


def by_hand(path: Path, size: int = 72, crop: int = 64) -> np.ndarray:
    """torchvision's Resize(size) + CenterCrop(crop) + ToTensor + Normalize, by hand."""
    image = Image.open(path).convert("RGB")
    w, h = image.size
    new = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    image = image.resize(new, Image.Resampling.BILINEAR)
    left, top = round((new[0] - crop) / 2), round((new[1] - crop) / 2)
    image = image.crop((left, top, left + crop, top + crop))
    pixels = (np.asarray(image, np.float32) / 255 - MEAN) / STD
    return pixels.transpose(2, 0, 1).astype(np.float32)


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def run(tmp_path: Path, folder: Path, model: dict[str, Any], name: str = "out") -> Any:
    spec = {
        "source": {"uri": str(folder), "format": "images", "id_column": "path"},
        "model": model,
        "sink": {"uri": str(tmp_path / name)},
        "run": {"workers": 2},
        "batch": {"size": 4},
    }
    return thresher.run(spec, store=f"sqlite:///{tmp_path / 'store.db'}", progress=False)


@pytest.fixture(scope="module")
def resnet_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    module = resnet18()
    return save_exported(module, tmp_path_factory.mktemp("resnet") / "resnet18.pt2"), module


def test_resnet18_labels_equal_the_model_by_hand(tmp_path: Path, resnet_file: Any) -> None:
    path, module = resnet_file
    folder = tmp_path / "in"
    paths = image_folder(folder, 10)
    bad = bad_files(folder)
    options = {"labels": LABELS, "top_k": 3, "image": RECIPE}
    result = run(
        tmp_path,
        folder,
        {
            "kind": "vision",
            "uri": str(path),
            "options": options,
            "outputs": ["prediction", "proba"],
        },
    )
    rows = {r["path"]: r for r in result.to_arrow().to_pylist()}
    with torch.inference_mode():
        logits = module(torch.from_numpy(np.stack([by_hand(p) for p in paths]))).numpy()
    proba = softmax(logits.astype(np.float64))
    for p, expected in zip(paths, proba, strict=True):
        row = rows[str(p)]
        top = np.argsort(-expected)[:3]
        assert row["top_labels"] == [LABELS[i] for i in top] and row["label"] == LABELS[top[0]]
        assert row["top_scores"] == pytest.approx(expected[top], abs=1e-5)
        assert row["score"] == pytest.approx(expected[top[0]], abs=1e-5)
        assert [row[f"proba_{label}"] for label in LABELS] == pytest.approx(expected, abs=1e-5)
    assert sorted(e["source"].rsplit("/", 1)[-1] for e in result.errors.to_pylist()) == sorted(bad)


def test_the_torch_kind_takes_the_preprocessed_tensor(tmp_path: Path, resnet_file: Any) -> None:
    path, module = resnet_file
    folder = tmp_path / "in"
    paths = image_folder(folder, 5)
    model = {"kind": "torch", "uri": str(path), "options": {"image": RECIPE}}
    rows = {r["path"]: r for r in run(tmp_path, folder, model).to_arrow().to_pylist()}
    with torch.inference_mode():
        logits = module(torch.from_numpy(np.stack([by_hand(p) for p in paths]))).numpy()
    for p, expected in zip(paths, logits, strict=True):
        assert rows[str(p)]["prediction"] == pytest.approx(expected, abs=1e-4)


def test_an_onnx_graph_classifies_images(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    weights = onnx_pooling_classifier(tmp_path / "pool.onnx", classes=4)
    folder = tmp_path / "in"
    paths = image_folder(folder, 6)
    labels = ["a", "b", "c", "d"]
    options = {"labels": labels, "image": RECIPE}
    vision = run(
        tmp_path, folder, {"kind": "vision", "uri": str(tmp_path / "pool.onnx"), "options": options}
    )
    plain = run(
        tmp_path,
        folder,
        {"kind": "onnx", "uri": str(tmp_path / "pool.onnx"), "options": {"image": RECIPE}},
        "plain",
    )
    by_vision = {r["path"]: r for r in vision.to_arrow().to_pylist()}
    by_onnx = {r["path"]: r for r in plain.to_arrow().to_pylist()}
    for p in paths:
        logits = by_hand(p).mean(axis=(1, 2)) @ weights
        assert by_onnx[str(p)]["prediction"] == pytest.approx(logits, abs=1e-4)
        assert by_vision[str(p)]["label"] == labels[int(np.argmax(logits))]
        assert by_vision[str(p)]["score"] == pytest.approx(softmax(logits).max(), abs=1e-5)


def tiny_vit(folder: Path) -> None:
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    labels = {0: "cat", 1: "dog", 2: "fish"}
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    torch.manual_seed(0)
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)


def test_a_transformers_vit_uses_its_own_processor(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from transformers import AutoImageProcessor, ViTForImageClassification

    tiny_vit(tmp_path / "vit")
    folder = tmp_path / "in"
    paths = image_folder(folder, 6)
    model = {"kind": "vision", "uri": str(tmp_path / "vit"), "options": {"top_k": 2}}
    rows = {r["path"]: r for r in run(tmp_path, folder, model).to_arrow().to_pylist()}
    processor = AutoImageProcessor.from_pretrained(tmp_path / "vit", backend="pil")
    vit = ViTForImageClassification.from_pretrained(tmp_path / "vit").eval()
    images = [Image.open(p).convert("RGB") for p in paths]
    with torch.inference_mode():
        pixels = processor(images=images, return_tensors="pt")["pixel_values"]
        proba = softmax(vit(pixel_values=pixels).logits.numpy().astype(np.float64))
    for p, expected in zip(paths, proba, strict=True):
        top = np.argsort(-expected)[:2]
        assert rows[str(p)]["top_labels"] == [["cat", "dog", "fish"][i] for i in top]
        assert rows[str(p)]["top_scores"] == pytest.approx(expected[top], abs=1e-5)


def test_clip_image_embeddings_share_the_text_space(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    config = CLIPConfig(
        text_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "vocab_size": 1000,
            "max_position_embeddings": 32,
            "bos_token_id": 0,
            "eos_token_id": 2,
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
    clip = CLIPModel(config).eval()
    clip.save_pretrained(tmp_path / "clip")
    CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(tmp_path / "clip")
    folder = tmp_path / "in"
    paths = image_folder(folder, 4)
    options = {"task": "embedding", "normalize": True}
    rows = {
        r["path"]: r
        for r in run(
            tmp_path, folder, {"kind": "vision", "uri": str(tmp_path / "clip"), "options": options}
        )
        .to_arrow()
        .to_pylist()
    }
    processor = CLIPImageProcessor.from_pretrained(tmp_path / "clip")
    with torch.inference_mode():
        pixels = processor(
            images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt"
        )["pixel_values"]
        ids = torch.tensor([[0, 5, 2]])
        both = clip(input_ids=ids, pixel_values=pixels)
    expected = both.image_embeds.numpy()  # normalised, in the space of both.text_embeds
    assert both.text_embeds.shape[-1] == expected.shape[-1] == 16
    for p, vector in zip(paths, expected, strict=True):
        assert rows[str(p)]["embedding"] == pytest.approx(vector, abs=1e-5)


def test_thresher_predict_takes_a_folder_of_images(tmp_path: Path, resnet_file: Any) -> None:
    path, module = resnet_file
    paths = image_folder(tmp_path / "in", 5)
    bad_files(tmp_path / "in")
    options = {"labels": LABELS, "image": RECIPE}
    kwargs = {"kind": "vision", "format": "images", "id_column": "path", "model_options": options}
    with pytest.raises(thresher.BadInputError):  # predict stops at bad input unless told
        thresher.predict(str(tmp_path / "in"), str(path), **kwargs)
    table = thresher.predict(str(tmp_path / "in"), str(path), on_bad_input="skip", **kwargs)
    assert table["path"].to_pylist() == [str(p) for p in paths]
    with torch.inference_mode():
        logits = module(torch.from_numpy(np.stack([by_hand(p) for p in paths]))).numpy()
    assert table["label"].to_pylist() == [LABELS[i] for i in logits.argmax(axis=1)]
