"""Real image files and real vision models with random weights, made in the test.

torchvision's PyPI wheels are CUDA builds that do not load against the CPU torch the
tests pin, so ResNet-18 is written here with torch.nn (torchvision's layout: BasicBlock
stages of 64-512 channels) and saved with torch.export; the ONNX graph is made with onnx's
helper (no exporter needed).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

FORMATS = ("JPEG", "PNG", "WEBP", "TIFF")
LABELS = [f"class_{i}" for i in range(10)]


def photo(seed: int, height: int = 72, width: int = 96) -> np.ndarray:
    """A smooth RGB picture with some noise, like a photo to a JPEG encoder."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    channels = [(np.sin(x / (5 + seed % 7) + c) + np.cos(y / 9 - c)) * 60 + 128 for c in range(3)]
    pixels = np.stack(channels, -1) + rng.normal(0, 8, (height, width, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def image_bytes(pixels: np.ndarray, fmt: str) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def image_folder(folder: Path, count: int, start: int = 0) -> list[Path]:
    """`count` images, JPEG, PNG, WebP and TIFF in turn, of a few sizes."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(start, start + count):
        fmt = FORMATS[i % len(FORMATS)]
        path = folder / f"img{i:04d}.{fmt.lower()}"
        path.write_bytes(image_bytes(photo(i, 60 + i % 5 * 7, 80 + i % 3 * 11), fmt))
        paths.append(path)
    return paths


def bad_files(folder: Path) -> dict[str, str]:
    """One file of each kind of bad media, by name: the error each must give."""
    from PIL import Image

    good = image_bytes(photo(99), "JPEG")
    (folder / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (folder / "text.jpg").write_text("this is not a picture\n")
    (folder / "empty.png").write_bytes(b"")
    # A decompression bomb: a few KB of PNG claiming 10,000 x 10,000 = 100M pixels, over
    # Pillow's default limit of 89.5M.
    buffer = io.BytesIO()
    Image.new("1", (10_000, 10_000)).save(buffer, "PNG")
    (folder / "bomb.png").write_bytes(buffer.getvalue())
    return {
        "truncated.jpg": "decode",
        "text.jpg": "decode",
        "empty.png": "decode",
        "bomb.png": "decode",
    }


def resnet18(classes: int = len(LABELS)) -> object:
    """ResNet-18 with random weights (torchvision's architecture), in eval mode."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, inputs: int, outputs: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(outputs)
            self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(outputs)
            self.down = (
                nn.Sequential(
                    nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
                )
                if stride != 1 or inputs != outputs
                else nn.Identity()
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + self.down(x))

    torch.manual_seed(0)
    stages, inputs = [], 64
    for outputs, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages += [Block(inputs, outputs, stride), Block(outputs, outputs, 1)]
        inputs = outputs
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        *stages,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(512, classes),
    ).eval()


def save_exported(module: object, path: Path, side: int = 64) -> Path:
    """`module` saved with torch.export, any batch size."""
    import torch

    batch = torch.export.Dim("batch", min=1)
    example = (torch.randn(2, 3, side, side),)
    program = torch.export.export(module, example, dynamic_shapes=({0: batch},))  # type: ignore[arg-type]
    torch.export.save(program, str(path))
    return path


def onnx_pooling_classifier(path: Path, classes: int = 4, seed: int = 0) -> np.ndarray:
    """An ONNX graph: global average pool of a (N, 3, H, W) batch, then a (3, classes)
    matrix; returns the matrix, so a test computes the logits by hand."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(seed).normal(size=(3, classes)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["pixels"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("MatMul", ["flat", "weights"], ["logits"]),
        ],
        "pool",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        [numpy_helper.from_array(weights, "weights")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return weights
