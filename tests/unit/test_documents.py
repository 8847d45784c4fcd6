"""Documents in: PDFs, Word files, HTML and text, their text extracted on the reading
thread; a document that cannot be read is one bad record naming why."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from docx import Document
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter

import thresher
from thresher.sources.documents import DocumentContent, DocumentSourceOptions, sniff_document
from thresher.sources.file_rows import FileRowsSource
from thresher.testing import check_source

MODEL = """
import numpy as np

class Words:
    def predict(self, batch):
        return {"words": np.array([len(t.split()) for t in batch["text"]])}
"""


def pdf(pages: list[str]) -> bytes:
    made = FPDF()
    made.set_font("helvetica", size=12)
    for text in pages:
        made.add_page()
        if text:
            made.cell(text=text)
    return bytes(made.output())


def encrypted(data: bytes) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt("secret")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx(paragraphs: list[str]) -> bytes:
    document = Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


GOOD = {
    "a-invoice.pdf": (pdf(["Invoice 42 total due", "Thank you for your order"]), "pdf"),
    "b-letter.docx": (docx(["Dear customer", "Your refund is on its way"]), "docx"),
    "c-page.html": (
        b"<!DOCTYPE html><html><head><title>t</title><script>var x = 1;</script></head>"
        b"<body><h1>Order shipped</h1><p>Tracking &amp; details</p></body></html>",
        "html",
    ),
    "d-note.txt": ("Plain words, caf\u00e9 included".encode(), "text"),
    "e-misnamed.bin": (pdf(["a PDF by any other name"]), "pdf"),
}
BAD = {
    "f-locked.pdf": (encrypted(pdf(["secret plans"])), "EncryptedPDF"),
    "g-broken.pdf": (pdf(["cut short"])[:200], "CorruptPDF"),
    "h-picture.pdf": (b"\x89PNG\r\n\x1a\n" + bytes(64), "NotADocument"),
    "i-empty.txt": (b"", "EmptyFile"),
    "j-blank.pdf": (pdf([""]), "NoText"),
}


def folder(tmp_path: Path) -> Path:
    root = tmp_path / "inbox"
    root.mkdir()
    for name, (data, _) in {**GOOD, **BAD}.items():
        (root / name).write_bytes(data)
    return root


def source(root: Path, **options: Any) -> FileRowsSource:
    settings = DocumentSourceOptions(**options)
    return FileRowsSource(str(root), 1 << 26, settings, DocumentContent(4))


def test_formats_are_told_by_content() -> None:
    assert [sniff_document(GOOD[n][0][:4096]) for n in sorted(GOOD)] == [
        "pdf", "docx", "html", "text", "pdf",
    ]  # fmt: skip
    assert sniff_document(b"\x00\x01binary") is None
    assert sniff_document(b"PK\x03\x04 a zip of something else") is None


def test_the_source_keeps_its_contract_and_extracts_each_kind(tmp_path: Path) -> None:
    found = source(folder(tmp_path), shard_files=3)
    plan = check_source(found, rows_per_chunk=2)
    assert len(plan.shards) == 4  # ten files, three a shard
    reader = found.reader(plan.schema, ["path", "format", "text", "pages"])
    rows, bad = [], []
    for shard in plan.shards:
        for chunk in reader.read(shard, 64):
            rows += chunk.table.to_pylist()
            bad += chunk.bad
    got = {Path(r["path"]).name: r for r in rows}
    assert sorted(got) == sorted(GOOD)
    assert {n: r["format"] for n, r in got.items()} == {n: k for n, (_, k) in GOOD.items()}
    invoice = got["a-invoice.pdf"]
    assert invoice["pages"] == 2
    assert "Invoice 42 total due" in invoice["text"] and "Thank you" in invoice["text"]
    assert got["b-letter.docx"]["text"] == "Dear customer\nYour refund is on its way"
    assert got["c-page.html"]["text"] == "Order shipped\nTracking & details"  # no script
    assert got["d-note.txt"]["text"] == "Plain words, caf\u00e9 included"
    assert got["b-letter.docx"]["pages"] is None
    reasons = {Path(b.source).name: (b.stage, b.error) for b in bad}
    assert reasons == {n: ("decode", e) for n, (_, e) in BAD.items()}
    assert all(b.row is not None and "text" not in b.raw for b in bad)


def test_a_job_over_a_folder_of_documents_places_each_once(tmp_path: Path) -> None:
    root = folder(tmp_path)
    (tmp_path / "words.py").write_text(MODEL)
    spec = {
        "source": {"uri": str(root), "format": "documents", "id_column": "path"},
        "model": {"kind": "python", "uri": f"{tmp_path / 'words.py'}:Words",
                  "batch_format": "numpy", "options": {}},
        "sink": {"uri": str(tmp_path / "out"), "keep_columns": ["format", "pages"]},
        "run": {"workers": 2},
    }  # fmt: skip
    spec["source"]["columns"] = ["text"]
    result = thresher.run(spec, store=f"sqlite:///{tmp_path / 'store.db'}", progress=False)
    output = result.to_arrow().to_pylist()
    assert sorted(Path(r["path"]).name for r in output) == sorted(GOOD)
    words = {Path(r["path"]).name: r["words"] for r in output}
    assert words["b-letter.docx"] == 8 and words["a-invoice.pdf"] == 9
    errors = {Path(e["source"]).name: e["error"] for e in result.errors.to_pylist()}
    assert errors == {n: e for n, (_, e) in BAD.items()}
    assert result.manifest["rows_in"] == len(GOOD) + len(BAD)


def test_a_misspelt_option_is_a_spec_error() -> None:
    from thresher.errors import SpecError
    from thresher.spec import parse_spec

    with pytest.raises(SpecError, match=r"source\.options\.chunk_documnets"):
        parse_spec(
            {
                "source": {"uri": "inbox/", "format": "documents",
                           "options": {"chunk_documnets": 8}},
                "model": {"kind": "sklearn", "uri": "m.skops"},
                "sink": {"uri": "out/"},
            }
        )  # fmt: skip
