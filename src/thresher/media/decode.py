"""Bytes to pixels: an image file decoded to RGB, or a reason it cannot be.

Pillow decodes every format; JPEGs go through simplejpeg when it is installed, which gave
the same pixels (both are libjpeg-turbo) in about half the time on 256x256 photos
(benchmarks/results/image-decoders.md); a JPEG it refuses (CMYK, progressive oddities)
goes to Pillow, whose answer stands.

A decompression bomb (a small file that claims a huge canvas) is refused from the
header, before any pixel is decoded: more than `max_pixels` is an error. Pillow's own
limit (`Image.MAX_IMAGE_PIXELS`) stays on, set to the same number in the worker, and its
warning is an error there too, so the two checks agree.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np

from thresher.media.kinds import sniff
from thresher.records import Stage


class MediaError(Exception):
    """One image that cannot be used: `stage` is where it failed (`fetch`, `decode`,
    `preprocess`), `error` a short name for the reason."""

    def __init__(self, stage: Stage, error: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.error = error


def pillow_limit(max_pixels: int) -> None:
    """Keep Pillow's decompression-bomb check on, at `max_pixels`, its warning an error
    (called once per worker, which owns its process)."""
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = max_pixels
    warnings.simplefilter("error", Image.DecompressionBombWarning)


def decode(data: bytes, max_pixels: int) -> Any:
    """The RGB `PIL.Image` of a file's bytes; MediaError (stage `decode`) if the bytes are
    empty, not an image, over `max_pixels`, or corrupt."""
    if not data:
        raise MediaError("decode", "EmptyFile", "the file is empty (0 bytes)")
    kind = sniff(data[:16])
    if kind is None:
        raise MediaError("decode", "NotAnImage", f"not an image file (starts {data[:8]!r})")
    if kind == "jpeg":
        pixels = _simplejpeg(data, max_pixels)
        if pixels is not None:
            from PIL import Image

            return Image.fromarray(pixels)
    return _pillow(data, max_pixels)


def decode_array(data: bytes, max_pixels: int) -> np.ndarray:
    """The file's pixels as a `(height, width, 3)` uint8 array (see `decode`)."""
    return np.asarray(decode(data, max_pixels))


def _pillow(data: bytes, max_pixels: int) -> Any:
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
        _check_pixels(image.width, image.height, max_pixels)
        image.load()
        return image if image.mode == "RGB" else image.convert("RGB")
    except MediaError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise MediaError("decode", "DecompressionBomb", str(exc)) from exc
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, ...
        raise MediaError("decode", type(exc).__name__, f"cannot decode: {exc}") from exc


def _simplejpeg(data: bytes, max_pixels: int) -> np.ndarray | None:
    """A JPEG's RGB pixels by simplejpeg, or None when it is not installed or refuses
    the file (Pillow then decodes it, or says why not)."""
    try:
        import simplejpeg
    except ImportError:
        return None
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None
    _check_pixels(width, height, max_pixels)
    try:
        # strict: a truncated or corrupt stream is an error, not a half-grey picture
        pixels: np.ndarray = simplejpeg.decode_jpeg(data, colorspace="RGB", strict=True)
    except ValueError:
        return None
    return pixels


def _check_pixels(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise MediaError(
            "decode",
            "DecompressionBomb",
            f"{width}x{height} = {width * height:,} pixels, more than the {max_pixels:,}"
            " allowed; raise source.options.max_pixels if the file is trusted",
        )
