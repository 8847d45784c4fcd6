"""Vision models: `kind = "vision"`, image classification (top-k labels and scores) and
image embeddings, over an `images` source.

    [model]
    kind = "vision"
    uri = "models/vit-pets"     # a transformers folder, or a .onnx / .pt2 / .pt / .ts file
    options = { task = "classification", top_k = 3 }

`model.uri` is one of:

- a transformers folder (`save_pretrained`): its image processor prepares the images
  (`preprocessor_config.json`, with Pillow), and `AutoModelForImageClassification` (for
  `classification`; labels from the config's `id2label`) or, for `embedding`, a CLIP
  model's image features (projected into the space its text shares) or another model's
  pooled output;
- an ONNX graph, a `torch.export` program or a TorchScript file taking a float32
  `(rows, 3, height, width)` batch: `options.image` says how to preprocess (media/
  preprocess.py; ImageNet's recipe by default) and `options.labels` names the classes.

Outputs, `classification`: `label` and `score` (the top class and its probability), with
`top_k` above 1 also `top_labels` and `top_scores` (k of each per row, best first), and
with `proba` in `model.outputs` one `proba_<label>` column per class. Scores are the
softmax of the model's logits (`scores = "none"`: the model's outputs are probabilities
already). `embedding`: an `embedding` column (FixedSizeList<float32>), of unit length
with `normalize = true`; a CLIP folder with `text_column` embeds that column's texts into
the space of its images instead (clip_text.py).

Images are decoded and preprocessed by the worker on its reading thread, a chunk ahead
of the model (models/images.py); one that fails is a bad record at stage `decode` or
`preprocess`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from thresher.errors import ModelLoadError, ModelOutputError
from thresher.media.preprocess import ImageOptions, Transform, processor_transform, recipe
from thresher.models.base import Column, LoadContext, Model
from thresher.models.images import Head, ImageTensorModel, Runner
from thresher.models.outputs import as_column, proba_columns, proba_names
from thresher.plugins import Options
from thresher.spec import ModelSection

TORCH_FILES = (".pt2", ".pt", ".pth", ".ts")


class VisionOptions(Options):
    """`model.options` of `kind = "vision"`."""

    task: Literal["classification", "embedding"] = "classification"
    top_k: int = Field(default=1, ge=1)
    labels: list[str] | None = None  # a file model's classes, in output order
    scores: Literal["softmax", "none"] = "softmax"
    normalize: bool = False  # embeddings of unit length
    image: ImageOptions | None = None  # a file model's preprocessing
    image_column: str | None = None  # which image column, when the input has several
    text_column: str | None = None  # a CLIP folder: embed this column's texts instead
    device: str | None = None  # "auto", "cpu", "cuda" or "cuda:N"


def load_vision(spec: ModelSection, context: LoadContext) -> Model:
    """The vision model `spec.uri` names, with its preprocessing and output head."""
    options = VisionOptions.model_validate(spec.options)
    if options.task == "embedding" and "proba" in spec.outputs:
        raise ModelLoadError("model.outputs: an embedding has no class probabilities")
    path = Path(spec.uri)
    if options.text_column is not None:
        from thresher.models.clip_text import load_clip_text

        if options.task != "embedding" or not path.is_dir():
            raise ModelLoadError(
                "model.options.text_column: texts are embedded by a CLIP folder with"
                ' task = "embedding"'
            )
        head = embedding_head(options.normalize)
        return load_clip_text(path, options.text_column, head, options.device, context)
    if path.is_dir():
        runner, transform, labels = _transformers(path, options, context)
    elif path.is_file():
        runner = _file_runner(path, options, spec.trust)
        transform = recipe(options.image or ImageOptions())
        labels = options.labels
    else:
        raise ModelLoadError(
            f"model.uri: {spec.uri} is neither a transformers folder nor a model file"
        )
    head = (
        embedding_head(options.normalize)
        if options.task == "embedding"
        else ClassificationHead(labels, options.top_k, options.scores, spec.outputs)
    )
    return ImageTensorModel(runner, head, transform, context.threads, options.image_column)


def _file_runner(path: Path, options: VisionOptions, trust: bool) -> Runner:
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        import onnxruntime as ort

        from thresher.models.onnx import session_runner

        return session_runner(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]))
    if suffix in TORCH_FILES:
        from thresher.models.torch import module_runner, read_module, torch_device

        device = torch_device(options.device)
        return module_runner(read_module(path, device, trust), device)
    known = ", ".join((".onnx", *TORCH_FILES))
    raise ModelLoadError(f"model.uri: {path.name}: a vision model file is one of {known}")


def _transformers(
    folder: Path, options: VisionOptions, context: LoadContext
) -> tuple[Runner, Transform, list[str] | None]:
    """The folder's model as a runner, its own processor as the transform, its labels."""
    import torch
    import transformers

    from thresher.models.text import prepare_hub
    from thresher.models.torch import torch_device

    prepare_hub()
    torch.set_num_threads(context.threads)
    device = torch_device(options.device)
    # The Pillow backend: the default one needs torchvision, and decoding is Pillow's.
    processor = transformers.AutoImageProcessor.from_pretrained(str(folder), backend="pil")
    config = transformers.AutoConfig.from_pretrained(str(folder))
    if options.task == "classification":
        model = transformers.AutoModelForImageClassification.from_pretrained(str(folder))
        labels = [str(config.id2label[i]) for i in sorted(config.id2label)]
        forward = _logits
    else:
        clip = config.model_type == "clip"
        cls = transformers.CLIPModel if clip else transformers.AutoModel
        model, labels = cls.from_pretrained(str(folder)), None
        forward = _clip_features if clip else _pooled
    model = model.to(device).eval()

    def run(batch: np.ndarray) -> np.ndarray:
        writable = np.require(batch, requirements=["W"])  # Arrow's view is read-only
        with torch.inference_mode():
            result = forward(model, torch.from_numpy(writable).to(device))
        return np.asarray(result.detach().float().cpu().numpy())

    return run, processor_transform(processor), labels


def _logits(model: Any, pixels: Any) -> Any:
    return model(pixel_values=pixels).logits


def _clip_features(model: Any, pixels: Any) -> Any:
    """A CLIP model's projected image features (the space its text features share)."""
    features = model.get_image_features(pixel_values=pixels)
    return getattr(features, "pooler_output", features)  # transformers 5 wraps them


def _pooled(model: Any, pixels: Any) -> Any:
    output = model(pixel_values=pixels)
    pooled = getattr(output, "pooler_output", None)
    return pooled if pooled is not None else output.last_hidden_state[:, 0]


class ClassificationHead:
    """Logits (or probabilities) to `label`, `score`, the top k and `proba_<label>`."""

    def __init__(
        self, labels: Sequence[str] | None, top_k: int, scores: str, outputs: Sequence[str]
    ) -> None:
        self._labels = list(labels) if labels is not None else None
        self._top_k = top_k
        self._softmax = scores == "softmax"
        self._prediction = "prediction" in outputs
        self._proba = "proba" in outputs

    def __call__(self, output: Any) -> Mapping[str, Column]:
        logits = np.asarray(output, dtype=np.float64)
        if logits.ndim != 2:
            raise ModelOutputError(f"a classifier's output is (rows, classes), not {logits.shape}")
        labels = self._labels or [str(i) for i in range(logits.shape[1])]
        if len(labels) != logits.shape[1]:
            raise ModelOutputError(
                f"the model scores {logits.shape[1]} classes; model.options.labels names"
                f" {len(labels)}"
            )
        proba = _softmax(logits) if self._softmax else logits
        columns: dict[str, Column] = {}
        if self._prediction:
            columns.update(self._top(proba, labels))
        if self._proba:
            columns.update(proba_columns(proba_names(labels), proba.astype(np.float32)))
        return columns

    def _top(self, proba: np.ndarray, labels: list[str]) -> dict[str, Column]:
        k = min(self._top_k, proba.shape[1])
        order = np.argsort(-proba, axis=1, kind="stable")[:, :k]
        best = np.take_along_axis(proba, order, axis=1).astype(np.float32)
        names = np.asarray(labels, dtype=object)[order]
        columns: dict[str, Column] = {
            "label": pa.array(names[:, 0].tolist(), pa.string()),
            "score": best[:, 0],
        }
        if self._top_k > 1:
            flat = pa.array(names.reshape(-1).tolist(), pa.string())
            columns["top_labels"] = pa.FixedSizeListArray.from_arrays(flat, k)
            columns["top_scores"] = as_column(best, "top_scores")
        return columns


def embedding_head(normalize: bool) -> Head:
    """A model's output rows as an `embedding` column."""

    def head(output: Any) -> Mapping[str, Column]:
        vectors = np.asarray(output, dtype=np.float32).reshape(len(output), -1)
        if normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, np.finfo(np.float32).tiny)
        return {"embedding": as_column(vectors, "embedding")}

    return head


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    result: np.ndarray = shifted / shifted.sum(axis=1, keepdims=True)
    return result
