"""Decoded images made into the tensor a model expects: resized, cropped, normalised.

Two ways to say how, and nothing for the user to code:

- a transformers model folder: its own image processor (`preprocessor_config.json`,
  `AutoImageProcessor`), called on each decoded image;
- any other model (TorchScript, `torch.export`, ONNX): `model.options.image`, the
  torchvision recipe most vision models were trained with:

      image = { size = 256, crop = 224, mean = [0.485, 0.456, 0.406], std = [0.229, 0.224, 0.225] }

  resize (the shorter side to `size`, or to `[height, width]` exactly), centre-crop to
  `crop`, scale to [0, 1], subtract `mean` and divide by `std` per channel, channels first
  (`layout = "nchw"`, or `"nhwc"`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from thresher.plugins import Options

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
Transform = Callable[[Any], np.ndarray]  # a decoded RGB PIL image -> its model input


class ImageOptions(Options):
    """`model.options.image`: how to preprocess for a model without its own processor."""

    size: int | list[int] = Field(default=256)
    crop: int | list[int] | None = 224
    mean: list[float] = Field(default_factory=lambda: list(IMAGENET_MEAN))
    std: list[float] = Field(default_factory=lambda: list(IMAGENET_STD))
    scale: float = Field(default=1 / 255, gt=0)
    resample: Literal["bilinear", "bicubic", "nearest", "lanczos"] = "bilinear"
    layout: Literal["nchw", "nhwc"] = "nchw"

    @model_validator(mode="after")
    def _shapes(self) -> ImageOptions:
        for name in ("size", "crop"):
            value = getattr(self, name)
            sides = value if isinstance(value, list) else [value] if value is not None else []
            if len(sides) not in (0, 1, 2) or any(side < 1 for side in sides):
                raise ValueError(f"{name}: one side or [height, width], each at least 1")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError("mean, std: three numbers each (R, G, B), std above 0")
        return self


def recipe(options: ImageOptions) -> Transform:
    """The transform `options` describe (see the module docstring)."""
    from PIL import Image

    resample = getattr(Image.Resampling, options.resample.upper())
    mean = np.asarray(options.mean, np.float32)
    std = np.asarray(options.std, np.float32)

    def transform(image: Any) -> np.ndarray:
        image = image.resize(_resized(image.width, image.height, options.size), resample)
        if options.crop is not None:
            image = _centre_crop(image, options.crop)
        pixels = np.asarray(image, dtype=np.float32) * np.float32(options.scale)
        pixels = (pixels - mean) / std
        return pixels.transpose(2, 0, 1) if options.layout == "nchw" else pixels

    return transform


def processor_transform(processor: Any) -> Transform:
    """A transformers image processor as a transform of one image."""

    def transform(image: Any) -> np.ndarray:
        values: np.ndarray = processor(images=image, return_tensors="np")["pixel_values"][0]
        return values

    return transform


def _resized(width: int, height: int, size: int | list[int]) -> tuple[int, int]:
    """(width, height) after resizing: the shorter side to `size` keeping the aspect
    ratio (as torchvision's Resize(int)), or exactly `[height, width]`."""
    if isinstance(size, list):
        return (size[-1], size[0])
    if width <= height:
        return size, max(1, int(size * height / width))
    return max(1, int(size * width / height)), size


def _centre_crop(image: Any, crop: int | list[int]) -> Any:
    """The centre `crop` of the image, as torchvision's CenterCrop rounds it."""
    height, width = (crop[0], crop[-1]) if isinstance(crop, list) else (crop, crop)
    top = round((image.height - height) / 2.0)
    left = round((image.width - width) / 2.0)
    return image.crop((left, top, left + width, top + height))
