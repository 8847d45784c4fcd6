"""Images in: the `images` source, decoding in the worker, and bad media as bad records."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import thresher
from media_files import bad_files, image_bytes, image_folder, photo
from thresher.errors import SpecError
from thresher.media.columns import TENSOR, columns_holding, decoded_arrays
from thresher.media.decode import MediaError, decode
from thresher.media.kinds import sniff
from thresher.media.prepare import ImagePreparer
from thresher.sources.file_rows import FileRowsSource
from thresher.sources.images import ImageSourceOptions, image_files
from thresher.testing import check_source
from thresher.worker.autobatch import BatchTuner

MODEL = """
import numpy as np

class Shapes:
    def predict(self, batch):
        images = batch["image"]
        return {
            "height": np.array([i.shape[0] for i in images]),
            "width": np.array([i.shape[1] for i in images]),
            "mean": np.array([float(i.mean()) for i in images]),
            "first": np.array([int(i[0, 0, 0]) for i in images]),
        }
"""


def source(folder: Path, **options: Any) -> FileRowsSource:
    return image_files(str(folder), 64 * 1024 * 1024, ImageSourceOptions(**options))


def run_job(tmp_path: Path, folder: Path, model: dict[str, Any], **sections: Any) -> Any:
    spec = {
        "source": {"uri": str(folder), "format": "images", "id_column": "path"},
        "model": model,
        "sink": {"uri": str(tmp_path / "out")},
        "run": {"workers": 2},
        **sections,
    }
    store = f"sqlite:///{tmp_path / 'store.db'}"
    return thresher.run(spec, store=store, progress=False)


def test_magic_bytes_name_the_kind_whatever_the_file_is_called() -> None:
    pixels = photo(1)
    for fmt, kind in (("JPEG", "jpeg"), ("PNG", "png"), ("WEBP", "webp"), ("TIFF", "tiff")):
        assert sniff(image_bytes(pixels, fmt)[:16]) == kind
    assert sniff(b"hello, world, not an image") is None
    assert sniff(b"RIFF\x00\x00\x00\x00WAVEfmt ") is None  # a RIFF that is not WebP


def test_the_source_keeps_its_contract_and_tells_files_by_content(tmp_path: Path) -> None:
    image_folder(tmp_path, 9)
    bad_files(tmp_path)
    (tmp_path / "really_a_png.jpg").write_bytes(image_bytes(photo(5), "PNG"))
    plan = check_source(source(tmp_path, shard_files=4), rows_per_chunk=3)
    assert [(s.start, s.stop) for s in plan.shards] == [(0, 4), (4, 8), (8, 12), (12, 14)]
    reader = source(tmp_path).reader(plan.schema, ["path", "format", "size"])
    rows, bad = [], []
    for shard in plan.shards:
        for chunk in reader.read(shard, 100):
            rows += chunk.table.to_pylist()
            bad += [(Path(b.source).name, b.stage, b.error, b.row) for b in chunk.bad]
    formats = {Path(r["path"]).name: r["format"] for r in rows}
    assert formats["really_a_png.jpg"] == "png" and formats["img0002.webp"] == "webp"
    assert sorted(bad) == [
        ("empty.png", "decode", "EmptyFile", 1),
        ("text.jpg", "decode", "NotAnImage", 12),
    ]
    assert len(rows) + len(bad) == 14
    assert all(r["size"] == (tmp_path / Path(r["path"]).name).stat().st_size for r in rows)


def test_shards_are_cut_by_bytes_too_and_the_listing_is_frozen(tmp_path: Path) -> None:
    paths = image_folder(tmp_path, 6)
    biggest = max(p.stat().st_size for p in paths)
    by_bytes = image_files(str(tmp_path), 1024, ImageSourceOptions())
    plan = by_bytes.plan()
    assert len(plan.shards) == 6 if biggest >= 1024 else len(plan.shards) >= 2
    image_folder(tmp_path, 2, start=100)  # lands after planning
    reader = pickle.loads(pickle.dumps(by_bytes.reader(plan.schema, ["path"])))
    read = [p for s in plan.shards for c in reader.read(s, 10) for p in c.table["path"].to_pylist()]
    assert read == [str(p) for p in paths]


def test_a_glob_and_suffixes_pick_the_files(tmp_path: Path) -> None:
    image_folder(tmp_path, 8)
    (tmp_path / "notes.txt").write_text("x")
    globbed = image_files(str(tmp_path / "*.png"), 1 << 26, ImageSourceOptions()).plan()
    assert globbed.shards[-1].stop == 2
    suffixed = source(tmp_path, suffixes=[".JPEG", ".webp"]).plan()
    assert suffixed.shards[-1].stop == 4


def test_bad_media_is_one_record_each_and_the_job_goes_on(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    paths = image_folder(folder, 6)
    expected = bad_files(folder)
    (tmp_path / "model.py").write_text(MODEL)
    model = {"kind": "python", "uri": f"{tmp_path / 'model.py'}:Shapes", "batch_format": "numpy"}
    result = run_job(tmp_path, folder, model)
    output = result.to_arrow()
    assert sorted(output["path"].to_pylist()) == sorted(str(p) for p in paths)
    errors = result.errors.to_pylist()
    assert {Path(e["source"]).name: e["stage"] for e in errors} == expected
    reasons = {Path(e["source"]).name: e["error"] for e in errors}
    assert reasons["bomb.png"] == "DecompressionBomb"
    assert reasons["empty.png"] == "EmptyFile" and reasons["text.jpg"] == "NotAnImage"
    assert "truncated" in next(e["message"] for e in errors if "truncated" in e["source"])
    assert all(e["id"] == e["source"] for e in errors)
    assert result.manifest["rows_in"] == 10 and result.manifest["rows_error"] == 4


def test_a_python_model_gets_the_decoded_pixels(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    paths = image_folder(folder, 8)
    (tmp_path / "model.py").write_text(MODEL)
    model = {"kind": "python", "uri": f"{tmp_path / 'model.py'}:Shapes", "batch_format": "numpy"}
    got = {Path(r["path"]).name: r for r in run_job(tmp_path, folder, model).to_arrow().to_pylist()}
    for path in paths:
        pixels = np.asarray(Image.open(path).convert("RGB"))
        row = got[path.name]
        assert (row["height"], row["width"]) == pixels.shape[:2]
        assert row["mean"] == pytest.approx(float(pixels.mean()))
        assert row["first"] == int(pixels[0, 0, 0])


def test_the_pixel_limit_is_configurable(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    image_folder(folder, 4)
    (tmp_path / "model.py").write_text(MODEL)
    model = {"kind": "python", "uri": f"{tmp_path / 'model.py'}:Shapes"}
    small = {"uri": str(folder), "format": "images", "options": {"max_pixels": 1000}}
    result = run_job(tmp_path, folder, model, source=small)
    assert result.to_arrow().num_rows == 0
    assert {e["error"] for e in result.errors.to_pylist()} == {"DecompressionBomb"}


def test_a_failing_preprocess_names_its_stage_and_odd_shapes_are_refused() -> None:
    files = [image_bytes(photo(i, 40 + 10 * (i == 2), 50), "PNG") for i in range(4)]
    from thresher.media.columns import image_field

    table = pa.table(
        [pa.array(files, pa.large_binary())], schema=pa.schema([image_field("image", 10**8)])
    )

    def keep_shape(image: Any) -> np.ndarray:
        if image.getpixel((0, 0)) == Image.fromarray(photo(1, 40, 50)).getpixel((0, 0)):
            raise ValueError("no good")
        return np.asarray(image, np.float32)

    prepared, failures = ImagePreparer(transform=keep_shape, threads=2).prepare(table)
    assert failures[1] == ("preprocess", "ValueError", "no good")
    assert failures[2][:2] == ("preprocess", "ShapeMismatch")
    assert prepared.num_rows == 2 and columns_holding(prepared.schema, TENSOR) == ["image"]


def test_decoding_refuses_each_kind_of_bad_bytes() -> None:
    good = image_bytes(photo(3), "JPEG")
    cases = {b"": "EmptyFile", b"plain text": "NotAnImage", good[:300]: "OSError"}
    for data, error in cases.items():
        with pytest.raises(MediaError) as caught:
            decode(data, 10**8)
        assert caught.value.stage == "decode" and caught.value.error == error
    assert decode(good, 10**8).size == (96, 72)


def test_simplejpeg_and_pillow_give_the_same_pixels() -> None:
    pytest.importorskip("simplejpeg")
    import io

    for seed in range(4):
        data = image_bytes(photo(seed, 100 + seed, 130), "JPEG")
        by_pillow = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        assert np.array_equal(np.asarray(decode(data, 10**8)), by_pillow)


def test_decoded_arrays_round_trip_through_arrow() -> None:
    from thresher.media.columns import decoded_column

    images = [photo(i, 10 + i, 20) for i in range(3)]
    back = decoded_arrays(
        pa.chunked_array([decoded_column(images[:2]), decoded_column(images[2:])])
    )
    assert all(np.array_equal(a, b) for a, b in zip(images, back, strict=True))


def test_a_batch_is_capped_by_its_decoded_bytes() -> None:
    from thresher.media.columns import image_field
    from thresher.media.preprocess import ImageOptions, recipe

    files = [image_bytes(photo(i), "JPEG") for i in range(40)]
    table = pa.table(
        [pa.array(files, pa.large_binary())], schema=pa.schema([image_field("image", 10**8)])
    )
    prepared, _ = ImagePreparer(transform=recipe(ImageOptions(size=64, crop=64))).prepare(table)
    row_bytes = prepared.nbytes / prepared.num_rows
    assert row_bytes == 3 * 64 * 64 * 4  # decoded float32 pixels, not the file's bytes
    tuner = BatchTuner(fixed=32, max_memory=10 * 3 * 64 * 64 * 4)
    assert tuner.batch_size(row_bytes, 40) == 10


def test_spec_errors_name_the_field() -> None:
    base = {"source": {"uri": "x/", "format": "images"}, "sink": {"uri": "out/"}}
    for options, field in (
        ({"top_kk": 3}, "model.options.top_kk"),
        ({"image": {"size": 224, "mean": [0.5]}}, "model.options.image"),
    ):
        with pytest.raises(SpecError) as caught:
            thresher.run({**base, "model": {"kind": "vision", "uri": "m.pt2", "options": options}})
        assert field in str(caught.value)
    with pytest.raises(SpecError, match=r"source\.options\.shard_file"):
        source_section = {"uri": "x/", "format": "images", "options": {"shard_file": 3}}
        thresher.run({**base, "source": source_section, "model": {"kind": "python", "uri": "m:M"}})


def test_the_error_file_never_holds_the_image_bytes(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    image_folder(folder, 2)
    bad_files(folder)
    (tmp_path / "model.py").write_text(MODEL)
    model = {"kind": "python", "uri": f"{tmp_path / 'model.py'}:Shapes"}
    for error in run_job(tmp_path, folder, model).errors.to_pylist():
        raw = json.loads(error["raw"])
        assert raw.get("image") in (None, f"<{raw.get('size')} bytes>")
