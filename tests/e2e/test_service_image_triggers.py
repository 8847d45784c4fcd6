"""A trigger on a folder of images in a real `thresher serve`: photos arrive over time,
one of them not an image, and the server is SIGKILLed between two arrivals and started
again. Every photo is in exactly one job (its `source.files`), scored once by a model
that sees its decoded pixels; the file that is no image is one bad record."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from media_files import image_folder

from .servers import Server, ServiceSite
from .test_service_triggers import query, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
pytest.importorskip("PIL")

PIXELS = """
import numpy as np


class Heights:
    def predict(self, batch):
        return {"height": np.array([image.shape[0] for image in batch["image"]])}
"""


def site_for(root: Path) -> ServiceSite:
    site = ServiceSite(root)
    (root / "pixels.py").write_text(PIXELS)
    watch = site.shared / "photos"
    watch.mkdir()
    site.config.write_text(
        site.config.read_text()
        + f"""
[models.heights]
kind = "python"
uri = {json.dumps(f"{root / 'pixels.py'}:Heights")}
batch_format = "numpy"

[triggers.photos]
watch = {json.dumps(str(watch))}
pattern = "*"
settle_seconds = 0.5
poll_seconds = 0.25
tenant = "acme"
job = {{ model = "heights", id_column = "path", source = {{ format = "images" }} }}
"""
    )
    return site


def ended(site: ServiceSite, files: int) -> bool:
    found = query(site, "SELECT state, spec FROM thresher_jobs")
    taken = sum(len(json.loads(spec)["source"]["files"]) for _, spec in found)
    done = all(state in ("succeeded", "failed", "cancelled") for state, _ in found)
    return taken >= files and done


def test_photos_arriving_in_a_watched_folder_are_each_scored_once(tmp_path: Path) -> None:
    site = site_for(tmp_path)
    photos = site.shared / "photos"
    server = Server(site, {})
    try:
        first = image_folder(photos, 4)
        wait_until(lambda: ended(site, 4), 60, "the first photos' job")
        server.kill()
    finally:
        server.stop()
    later = image_folder(photos, 3, start=4)  # while the server is down
    (photos / "notes.jpg").write_text("not a picture")
    server = Server(site, {})
    try:
        wait_until(lambda: ended(site, 8), 60, "the photos written while it was down")
    finally:
        server.stop()

    found = query(site, "SELECT id, state, spec FROM thresher_jobs")
    assert {state for _, state, _ in found} == {"succeeded"}, found
    files = Counter(f for _, _, spec in found for f in json.loads(spec)["source"]["files"])
    assert set(files.values()) == {1} and len(files) == 8  # each file in one job
    scored: Counter[str] = Counter()
    errors = []
    for job_id, _, _ in found:
        out = site.data / "outputs" / job_id
        for part in out.glob("part-*.jsonl"):
            scored.update(json.loads(line)["path"] for line in part.read_text().splitlines())
        for part in (out / "_errors").glob("*.jsonl"):
            errors += [json.loads(line) for line in part.read_text().splitlines()]
    assert scored == Counter(str(p.resolve()) for p in [*first, *later])  # each once
    assert [(Path(e["source"]).name, e["stage"]) for e in errors] == [("notes.jpg", "decode")]
