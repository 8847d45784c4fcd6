"""Media: images told apart by content, decoded and prepared the way a model expects.

Sources read a file's bytes; the worker decodes and preprocesses them (on its reading
thread, a chunk ahead of the model) through the model's `prepare` hook, and an image that
does not decode is one bad record, never a crash. Pillow is imported only where an image
is decoded (the `images` extra).
"""

from __future__ import annotations

from thresher.media.kinds import IMAGE_KINDS, sniff

__all__ = ["IMAGE_KINDS", "sniff"]
