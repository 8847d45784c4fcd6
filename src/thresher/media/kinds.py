"""What a file is, by its first bytes: a `.jpg` that holds text is not an image.

Names lie (a renamed file, a download saved as `.jpg`); the first bytes of every image
format thresher decodes say what it is, so a source tells its kind by content alone.
"""

from __future__ import annotations

# (kind, offset, magic): the format's signature at that offset. WebP is a RIFF file whose
# form type, at offset 8, is WEBP; TIFF comes in both byte orders.
_SIGNATURES: tuple[tuple[str, int, bytes], ...] = (
    ("jpeg", 0, b"\xff\xd8\xff"),
    ("png", 0, b"\x89PNG\r\n\x1a\n"),
    ("gif", 0, b"GIF87a"),
    ("gif", 0, b"GIF89a"),
    ("webp", 8, b"WEBP"),
    ("tiff", 0, b"II*\x00"),
    ("tiff", 0, b"MM\x00*"),
    ("bmp", 0, b"BM"),
)
IMAGE_KINDS = ("jpeg", "png", "gif", "webp", "tiff", "bmp")
SNIFF_BYTES = 16  # enough for every signature above


def sniff(head: bytes) -> str | None:
    """The image format `head` (a file's first bytes) starts, or None.

    >>> sniff(b"\\xff\\xd8\\xff\\xe0..."), sniff(b"hello, world")
    ('jpeg', None)
    """
    for kind, offset, magic in _SIGNATURES:
        if head[offset : offset + len(magic)] == magic:
            if kind == "webp" and not head.startswith(b"RIFF"):
                continue
            return kind
    return None
