"""Documents: a folder, a glob or an fsspec URL of PDF, Word (DOCX), HTML or plain-text
files, one row per document, its text extracted on the reading thread, for the text
models that exist (classification, embedding, generation with the `llm` kind).

    [source]
    uri = "inbox/"           # or "inbox/**/*.pdf", "s3://bucket/uploads/"
    format = "documents"
    id_column = "path"
    [model]
    kind = "sentence-transformers"
    uri = "models/minilm"
    options = { text_column = "text" }

A row is the file's `path`, `size`, `mtime` and `format` (`pdf`, `docx`, `html`, `text`:
what the bytes are, whatever the name says; `file_rows.py` lists, shards and reads the
files), its `text` (pages joined by a blank line; paragraphs for Word; the visible text
for HTML, scripts and styles left out) and `pages` (a PDF's; null for the others). A file
that is none of these, a PDF that is encrypted (with a password: one that opens with an
empty password is read) or corrupt, or a document with no text at all, is a bad record
of stage `decode` naming why. PDFs are read with pypdf, Word files with python-docx (the
`documents` extra); HTML and text with the standard library.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import pyarrow as pa
from pydantic import Field

from thresher.sources.file_rows import FileRowsOptions, FileRowsSource, Refused
from thresher.spec import SourceSection

__all__ = ["DocumentContent", "DocumentSourceOptions", "document_source", "sniff_document"]


class DocumentSourceOptions(FileRowsOptions):
    """`source.options` of `format = "documents"`."""

    chunk_documents: int = Field(default=64, ge=1)  # documents read and held at once


def sniff_document(head: bytes) -> str | None:
    """The document format `head` (a file's first bytes) starts, or None: a PDF's
    `%PDF-`, a Word file's ZIP whose first entry is Word's, HTML's first tag, or text
    that decodes as UTF-8 and holds no NUL."""
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return "docx" if b"word/" in head or b"[Content_Types].xml" in head else None
    start = head.lstrip()[:15].lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return "html"
    if b"\x00" in head:
        return None
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return "text" if exc.start >= len(head) - 3 else None  # cut inside a character
    return "text"


@dataclass(frozen=True)
class DocumentContent:
    """A document's row: its extracted `text` and `pages`."""

    chunk_documents: int = 64

    def fields(self) -> list[pa.Field]:
        return [pa.field("text", pa.string()), pa.field("pages", pa.int32())]

    def chunk_rows(self) -> int:
        return self.chunk_documents

    def row(self, data: bytes) -> tuple[str, dict[str, Any]]:
        kind = sniff_document(data[:4096])
        if kind is None:
            raise Refused(
                "decode", "NotADocument", f"not a PDF, DOCX, HTML or text file ({data[:8]!r}…)"
            )
        pages: int | None = None
        if kind == "pdf":
            text, pages = _pdf_text(data)
        elif kind == "docx":
            text = _docx_text(data)
        elif kind == "html":
            text = _html_text(data.decode("utf-8", errors="replace"))
        else:
            text = _plain_text(data)
        if not text.strip():
            raise Refused("decode", "NoText", f"the {kind} document holds no text")
        return kind, {"text": text, "pages": pages}


def _pdf_text(data: bytes) -> tuple[str, int]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise Refused("decode", "EncryptedPDF", "the PDF is encrypted with a password")
        pages = [page.extract_text() or "" for page in reader.pages]
    except Refused:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise Refused("decode", "CorruptPDF", f"the PDF cannot be read: {exc}") from None
    return "\n\n".join(p.strip() for p in pages), len(pages)


def _docx_text(data: bytes) -> str:
    import zipfile

    from docx import Document

    try:
        document = Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise Refused("decode", "CorruptDOCX", f"the Word file cannot be read: {exc}") from None
    return "\n".join(p.text for p in document.paragraphs)


class _VisibleText(HTMLParser):
    """The text a browser shows of a page: no scripts, styles or templates."""

    HIDDEN = frozenset({"script", "style", "template", "noscript", "head"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self._hidden += tag in self.HIDDEN

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in self.HIDDEN and self._hidden > 0

    def handle_data(self, data: str) -> None:
        if not self._hidden and data.strip():
            self.parts.append(" ".join(data.split()))


def _html_text(page: str) -> str:
    parser = _VisibleText()
    parser.feed(page)
    parser.close()
    return "\n".join(parser.parts)


def _plain_text(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Refused("decode", "NotUTF8", f"not UTF-8 text at byte {exc.start}") from None


def document_source(
    section: SourceSection, keep_columns: Sequence[str], min_shards: int
) -> FileRowsSource:
    """The `documents` source plug-in."""
    options = DocumentSourceOptions.model_validate(section.options)
    return FileRowsSource(
        section.uri,
        section.shard_bytes,
        options,
        DocumentContent(options.chunk_documents),
        min_shards=min_shards,
        roots=tuple(section.allowed_roots),
        files=tuple(section.files),
        id_column=section.id_column,
    )
