"""A folder of images uploaded as one archive (issue #38 part 5): unpacked safely into the
upload's own folder and scored by a job over it; an archive that would escape its folder,
hold a link or unpack past the server's limit is refused and leaves nothing."""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from media_files import image_bytes, photo
from thresher.coordinator.job import run_job
from thresher.service.app import create_app
from thresher.service.config import ServerConfig, prepare
from thresher.service.policies.auth import create_token
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import open_store

MODEL = """
import numpy as np

class Shapes:
    def predict(self, batch):
        return {"height": np.array([i.shape[0] for i in batch["image"]])}
"""


class Site:
    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        (tmp_path / "shapes.py").write_text(MODEL)
        uri = f"{tmp_path / 'shapes.py'}:Shapes"
        model = ModelSection(kind="python", uri=uri, batch_format="numpy")
        config = prepare(
            ServerConfig(data_dir=tmp_path / "data", models={"shapes": model}, **settings)
        )
        store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
        self.state = ServiceState(store=store, config=config, data_dir=config.data_dir)
        self.auth = {"Authorization": f"Bearer {create_token(store, 'acme')}"}
        self.client = TestClient(create_app(self.state, background=False))

    def upload(self, data: bytes, name: str, fmt: str = "images") -> Any:
        files = {"file": (name, data)}
        return self.client.post(f"/v1/files?format={fmt}", files=files, headers=self.auth)

    def leftovers(self) -> list[Path]:
        folder = self.state.uploads_dir
        return sorted(folder.iterdir()) if folder.exists() else []


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    made = Site(tmp_path, upload_max_decompressed_bytes=2 * 1024 * 1024)
    with made.client:
        yield made


def zipped(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_zip_of_images_is_unpacked_and_scored_by_a_job(site: Site) -> None:
    pictures = {
        "a.jpg": image_bytes(photo(1, 40, 30), "JPEG"),
        "day2/b.png": image_bytes(photo(2, 50, 30), "PNG"),
        "day2/c.webp": image_bytes(photo(3, 60, 30), "WEBP"),
    }
    sent = site.upload(zipped(pictures), "photos.zip")
    assert sent.status_code == 201, sent.text
    info = sent.json()
    assert info["format"] == "images" and info["bytes"] == sum(map(len, pictures.values()))
    body = {"input_file_id": info["id"], "model": "shapes", "id_column": "path"}
    queued = site.client.post("/v1/jobs", json=body, headers=site.auth)
    assert queued.status_code == 201, queued.text
    record = site.state.store.job(queued.json()["id"])
    result = run_job(record.spec, site.state.store, queued_id=record.id)  # as the scheduler
    rows = result.to_arrow().to_pylist()
    folder = Path(site.state.uploads_dir / info["id"])
    assert {Path(r["path"]).relative_to(folder).as_posix(): r["height"] for r in rows} == {
        "a.jpg": 40, "day2/b.png": 50, "day2/c.webp": 60,
    }  # fmt: skip
    assert site.client.get(f"/v1/files/{info['id']}/content", headers=site.auth).status_code == 409
    assert site.client.delete(f"/v1/files/{info['id']}", headers=site.auth).status_code == 200
    assert not folder.exists()


@pytest.mark.parametrize("name", ["../escape.png", "/etc/cron.d/x", "a/../../b.png"])
def test_an_entry_that_would_land_outside_is_refused_and_leaves_nothing(
    site: Site, name: str
) -> None:
    sent = site.upload(zipped({"ok.png": b"x", name: b"y"}), "slip.zip")
    assert sent.status_code == 422, sent.text
    assert "outside its folder" in sent.text
    assert site.leftovers() == []


def test_a_link_in_a_tar_is_refused(site: Site) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        link = tarfile.TarInfo("secrets.png")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    sent = site.upload(buffer.getvalue(), "link.tgz")
    assert sent.status_code == 422 and "is a link" in sent.text
    assert site.leftovers() == []


def test_a_bomb_stops_at_the_unpacked_limit(site: Site) -> None:
    bomb = zipped({"zeros.png": bytes(50 * 1024 * 1024)})  # 50 MiB of zeros, ~50 KB zipped
    assert len(bomb) < 200_000
    sent = site.upload(bomb, "bomb.zip")
    assert sent.status_code == 413 and "upload_max_decompressed_bytes" in sent.text
    assert site.leftovers() == []


def test_an_images_upload_that_is_no_archive_is_refused(site: Site) -> None:
    sent = site.upload(image_bytes(photo(1), "PNG"), "one.png")
    assert sent.status_code == 422 and ".zip or .tar" in sent.text
    assert site.leftovers() == []
