"""The image-classification job done by Ray Data, Daft and a hand-written DataLoader loop,
each run as its own process so images.py measures it like thresher.

    python benchmarks/image_peers.py ray|daft|loop IMAGES_DIR MODEL.pt2 OUT_DIR \
        --batch-size 64 --workers 2 --threads 1

Each reads the folder's JPEGs, decodes them to RGB, prepares them with `prepare` (the
recipe thresher's `options.image = { size = 256, crop = 224 }` names: the shorter side
resized to 256 with Pillow's bilinear filter, the centre 224x224 cut out, scaled to
[0, 1] and normalised with ImageNet's mean and std, channels first), runs the
`torch.export` ResNet-18 in batches of `--batch-size` and writes `path`, `label` (the
top class's index) and `score` (its softmax probability) as Parquet. Set up as each
system's own example sets up batch inference, with the same workers and threads:

- **ray**: Ray's batch-inference example: `read_images(mode="RGB", include_paths=True)`
  -> `map_batches(preprocess)` (stateless tasks) -> `map_batches(Classifier)` on an
  `ActorPoolStrategy` of `--workers` actors, each `--threads` intra-op threads and half
  a CPU (whole-CPU actors leave none for the read and preprocessing tasks on a small
  machine, and Ray waits: raydata.py) -> `write_parquet`.
- **daft**: Daft's image benchmark: `from_glob_path` -> `download()` ->
  `decode_image(mode="RGB")` (Daft 0.7's names for `url.download`, `image.decode`; its
  own JPEG decoder, whose pixels differ slightly from libjpeg-turbo's) -> a
  `@daft.cls(max_concurrency=workers)` class whose
  batch method prepares the images and runs the model -> `write_parquet`.
- **loop**: a `torch.utils.data.DataLoader` over the files with `--workers` worker
  processes decoding (Pillow) and preparing, the model in the main process with
  `--workers x --threads` intra-op threads (the cores), Parquet written at the end.

Only numpy, Pillow, pyarrow and torch are imported here (and the system's own package),
so the Daft side runs in a virtual environment of its own (daft_env.sh).
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

_LOADING = threading.Lock()
SIZE, CROP = 256, 224
MEAN = np.asarray([0.485, 0.456, 0.406], np.float32)
STD = np.asarray([0.229, 0.224, 0.225], np.float32)


def prepare(pixels: np.ndarray) -> np.ndarray:
    """An RGB `(height, width, 3)` uint8 picture as the model's `(3, 224, 224)` float32
    input: torchvision's Resize(256) + CenterCrop(224) + Normalize, done with Pillow."""
    from PIL import Image

    image = Image.fromarray(pixels)
    width, height = image.size
    if width <= height:
        size = (SIZE, max(1, int(SIZE * height / width)))
    else:
        size = (max(1, int(SIZE * width / height)), SIZE)
    image = image.resize(size, Image.Resampling.BILINEAR)
    top = round((image.height - CROP) / 2.0)
    left = round((image.width - CROP) / 2.0)
    image = image.crop((left, top, left + CROP, top + CROP))
    values = (np.asarray(image, dtype=np.float32) * np.float32(1 / 255) - MEAN) / STD
    return np.ascontiguousarray(values.transpose(2, 0, 1))


class Classifier:
    """The model, loaded once: a batch of prepared images to (label, score)."""

    def __init__(self, model: str, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        with _LOADING:  # torch.export.load is not thread-safe, and Daft may use threads
            self.module = torch.export.load(model).module()

    def predict(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        import torch

        with torch.inference_mode():
            logits = self.module(torch.from_numpy(np.ascontiguousarray(batch)))
            proba = torch.softmax(logits.double(), dim=1)
            score, label = proba.max(dim=1)
        return label.numpy().astype(np.int64), score.numpy().astype(np.float32)


def files(folder: str) -> list[str]:
    return sorted(str(p) for p in Path(folder).glob("*.jpg"))


def run_ray(args: argparse.Namespace) -> None:
    import shutil
    import tempfile

    import ray

    temp = tempfile.mkdtemp(prefix="ray-images-", dir="/tmp")
    ray.init(
        address="local",
        num_cpus=args.workers * args.threads,
        include_dashboard=False,
        _temp_dir=temp,
        log_to_driver=False,
    )
    ray.data.DataContext.get_current().enable_progress_bars = False

    def preprocess(batch: dict[str, Any]) -> dict[str, Any]:
        images = np.stack([prepare(np.asarray(image)) for image in batch["image"]])
        return {"path": batch["path"], "image": images}

    class Predict:
        def __init__(self) -> None:
            self.classifier = Classifier(args.model, args.threads)

        def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
            label, score = self.classifier.predict(batch["image"])
            return {"path": batch["path"], "label": label, "score": score}

    ds = ray.data.read_images(args.images, mode="RGB", include_paths=True)
    ds = ds.map_batches(preprocess, batch_size=args.batch_size)
    ds = ds.map_batches(
        Predict,
        batch_size=args.batch_size,
        compute=ray.data.ActorPoolStrategy(size=args.workers),
        num_cpus=0.5,
    )
    ds.write_parquet(args.out)
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)  # kept when Ray fails: its logs are there


def run_daft(args: argparse.Namespace) -> None:
    import daft
    import pyarrow as pa

    returns = daft.DataType.struct(
        {"label": daft.DataType.int64(), "score": daft.DataType.float32()}
    )

    @daft.cls(max_concurrency=args.workers)
    class Predict:
        def __init__(self) -> None:
            self.classifier = Classifier(args.model, args.threads)

        @daft.method.batch(return_dtype=returns, batch_size=args.batch_size)
        def __call__(self, images: daft.Series) -> pa.Array:
            batch = np.stack([prepare(np.asarray(image)) for image in images.to_pylist()])
            label, score = self.classifier.predict(batch)
            return pa.StructArray.from_arrays(
                [pa.array(label), pa.array(score)], ["label", "score"]
            )

    df = daft.from_glob_path(f"{args.images}/*.jpg")
    df = df.with_column("image", df["path"].download().decode_image(mode="RGB"))
    df = df.with_column("prediction", Predict()(df["image"]))
    df = df.select("path", df["prediction"]["label"], df["prediction"]["score"])
    df.write_parquet(args.out)


class _Files:
    """The DataLoader's dataset: a file's prepared pixels and its index."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import torch
        from PIL import Image

        with Image.open(self.paths[index]) as image:
            pixels = np.asarray(image.convert("RGB"))
        return torch.from_numpy(prepare(pixels)), index


def run_loop(args: argparse.Namespace) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from torch.utils.data import DataLoader

    paths = files(args.images)
    classifier = Classifier(args.model, args.workers * args.threads)
    loader = DataLoader(
        _Files(paths),  # type: ignore[arg-type]
        batch_size=args.batch_size,
        num_workers=args.workers,
        persistent_workers=False,
    )
    indices, labels, scores = [], [], []
    for batch, index in loader:
        label, score = classifier.predict(batch.numpy())
        indices.append(index.numpy())
        labels.append(label)
        scores.append(score)
    order = np.concatenate(indices)
    table = pa.table(
        {
            "path": pa.array([paths[i] for i in order]),
            "label": np.concatenate(labels),
            "score": np.concatenate(scores),
        }
    )
    os.makedirs(args.out, exist_ok=True)
    pq.write_table(table, os.path.join(args.out, "part-0.parquet"))


SYSTEMS = {"ray": run_ray, "daft": run_daft, "loop": run_loop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=list(SYSTEMS))
    parser.add_argument("images")
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    SYSTEMS[args.system](args)


if __name__ == "__main__":
    # Run as the module `image_peers`, not `__main__`: the UDFs' classes are then pickled
    # by reference (Daft refuses to pickle the module-level lock they use).
    import image_peers

    image_peers.main()
