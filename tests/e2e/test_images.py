"""A folder of images in, labels out, through the real CLI: `thresher run` on a spec that
names the folder, a ResNet-18 (random weights, torch.export) and its preprocessing."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from media_files import LABELS, bad_files, image_folder, resnet18, save_exported

from .support import Workspace

pytest.importorskip("torch")

SPEC = """
[source]
uri = "photos/"
format = "images"
id_column = "path"

[model]
kind = "vision"
uri = "resnet18.pt2"
options = {{ labels = {labels}, top_k = 3, image = {{ size = 72, crop = 64 }} }}

[sink]
uri = "labels/"
keep_columns = ["format"]

[run]
workers = 2
"""


def test_a_folder_of_images_in_labels_out(workspace: Workspace) -> None:
    root = workspace.root
    paths = image_folder(root / "photos", 12)
    bad = bad_files(root / "photos")
    save_exported(resnet18(), root / "resnet18.pt2")
    (root / "job.toml").write_text(SPEC.format(labels=json.dumps(LABELS)))
    result = workspace.run("run", "job.toml")
    assert result.returncode == 0, result.stderr[-3000:]
    table = pq.read_table(root / "labels")
    assert table.column_names == ["path", "format", "label", "score", "top_labels", "top_scores"]
    assert table["path"].to_pylist() == [str((root / "photos" / p.name).resolve()) for p in paths]
    assert set(table["label"].to_pylist()) <= set(LABELS)
    assert table["format"].to_pylist()[:4] == ["jpeg", "png", "webp", "tiff"]
    errors = [
        json.loads(line)
        for part in sorted((root / "labels" / "_errors").glob("*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    assert {Path(e["source"]).name: e["stage"] for e in errors} == bad
    manifest = json.loads((root / "labels" / "_SUCCESS").read_text())
    assert (manifest["rows_in"], manifest["rows_out"], manifest["rows_error"]) == (16, 12, 4)


def test_a_misspelt_option_is_a_spec_error(workspace: Workspace) -> None:
    root = workspace.root
    image_folder(root / "photos", 2)
    spec = SPEC.format(labels="[]").replace("top_k", "topk")
    (root / "job.toml").write_text(spec)
    result = workspace.run("run", "job.toml")
    assert result.returncode == 2
    assert "model.options.topk" in result.stderr
