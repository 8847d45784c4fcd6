"""Images named in a column of a tabular source, through the real CLI: a CSV of
`id,image_url` whose files a real HTTP server on loopback (and the local disk) serves,
some of them missing, failing once, or slow; and a Parquet table holding each image's
bytes. A `python` model sees the decoded pixels; every row ends in the output or the
error file (stage `fetch`, naming the CSV's line), once; `retry-errors` fetches again."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from media_files import image_bytes, photo

from .support import Workspace

pytestmark = pytest.mark.e2e
pytest.importorskip("PIL")

MODEL = """
import numpy as np

class Pixels:
    def setup(self):
        pass

    def predict(self, batch):
        images = batch["image"] if "image" in batch else batch["photo"]
        return {"height": np.array([i.shape[0] for i in images]),
                "mean": np.array([float(i.mean()) for i in images])}
"""


class Files(BaseHTTPRequestHandler):
    """Serves `self.server.files` by name; `/flaky/…` fails with 503 the first time."""

    def do_GET(self) -> None:
        server = self.server
        name = self.path.rsplit("/", 1)[-1]
        with server.lock:  # type: ignore[attr-defined]
            server.hits[self.path] = server.hits.get(self.path, 0) + 1  # type: ignore[attr-defined]
            first = server.hits[self.path] == 1  # type: ignore[attr-defined]
        data = server.files.get(name)  # type: ignore[attr-defined]
        if self.path.startswith("/flaky/") and first:
            self.send_error(503)
        elif data is None:
            self.send_error(404)
        else:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_files() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Files)
    server.files, server.hits, server.lock = {}, {}, threading.Lock()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_csv_of_urls_and_paths_is_fetched_decoded_and_scored_once(
    workspace: Workspace, http_files: ThreadingHTTPServer
) -> None:
    root = workspace.root
    base = f"http://127.0.0.1:{http_files.server_port}"
    (root / "local").mkdir()
    rows: list[tuple[int, str]] = []
    heights: dict[int, int] = {}
    for i in range(40):
        height = 40 + i % 5
        data = image_bytes(photo(i, height, 50), "PNG" if i % 2 else "JPEG")
        if i % 4 == 3:  # a file on disk, named relative to the CSV's folder
            (root / "local" / f"{i}.img").write_bytes(data)
            rows.append((i, f"local/{i}.img"))
        else:
            http_files.files[f"{i}.img"] = data  # type: ignore[attr-defined]
            rows.append((i, f"{base}/{'flaky' if i % 10 == 0 else 'img'}/{i}.img"))
        heights[i] = height
    rows += [(40, f"{base}/img/missing.img"), (41, "local/missing.img"), (42, "")]
    (root / "photos.csv").write_text(
        "id,image_url\n" + "".join(f"{i},{url}\n" for i, url in rows), encoding="utf-8"
    )
    (root / "model.py").write_text(MODEL)
    spec = """
[source]
uri = "photos.csv"
id_column = "id"
images = { column = "image_url", threads = 4, retries = 2 }

[model]
kind = "python"
uri = "model.py:Pixels"
batch_format = "numpy"

[sink]
uri = "out/"
keep_columns = ["image_url"]

[run]
workers = 2
"""
    (root / "job.toml").write_text(spec)
    result = workspace.run("run", "job.toml")
    assert result.returncode == 0, result.stderr[-3000:]
    table = pq.read_table(root / "out")
    assert table["id"].to_pylist() == list(range(40))  # input order, each once
    assert table["height"].to_pylist() == [heights[i] for i in range(40)]
    assert table["image_url"].to_pylist() == [url for _, url in rows[:40]]
    errors = [
        json.loads(line)
        for part in sorted((root / "out" / "_errors").glob("*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    assert sorted((e["id"], e["stage"], e["error"]) for e in errors) == [
        (40, "fetch", "HTTP404"),
        (41, "fetch", "NotFound"),
        (42, "fetch", "NoLocation"),
    ]
    lines = {e["id"]: e["line"] for e in errors}
    assert lines == {40: 42, 41: 43, 42: 44}  # the CSV's own lines (the header is line 1)
    assert all(e["source"].endswith("photos.csv") for e in errors)
    flaky = [path for path in http_files.hits if path.startswith("/flaky/")]  # type: ignore[attr-defined]
    assert flaky and all(http_files.hits[p] == 2 for p in flaky)  # type: ignore[attr-defined]

    # The missing file arrives; retry-errors fetches the rows that failed to fetch.
    http_files.files["missing.img"] = image_bytes(photo(7, 33, 50), "PNG")  # type: ignore[attr-defined]
    job_id = json.loads((root / "out" / "_SUCCESS").read_text())["job_id"]
    retried = workspace.run("retry-errors", job_id)
    assert retried.returncode == 0, retried.stderr[-3000:]
    table = pq.read_table(root / "out")
    assert sorted(table["id"].to_pylist()) == list(range(41))
    assert table.filter(pa.compute.equal(table["id"], 40))["height"].to_pylist() == [33]


def test_image_bytes_in_a_parquet_column(workspace: Workspace) -> None:
    root = workspace.root
    files = [image_bytes(photo(i, 30 + i, 40), "PNG") for i in range(12)] + [b"not an image"]
    pq.write_table(
        pa.table({"key": list(range(13)), "photo": pa.array(files, pa.binary())}),
        root / "photos.parquet",
    )
    (root / "model.py").write_text(MODEL)
    spec = """
[source]
uri = "photos.parquet"
id_column = "key"
images = { column = "photo" }

[model]
kind = "python"
uri = "model.py:Pixels"
batch_format = "numpy"

[sink]
uri = "out/"
"""
    (root / "job.toml").write_text(spec)
    result = workspace.run("run", "job.toml")
    assert result.returncode == 0, result.stderr[-3000:]
    table = pq.read_table(root / "out")
    assert table["key"].to_pylist() == list(range(12))
    assert table["height"].to_pylist() == [30 + i for i in range(12)]
    (error,) = [
        json.loads(line)
        for part in (root / "out" / "_errors").glob("*.jsonl")
        for line in part.read_text().splitlines()
    ]
    assert (error["key"] if "key" in error else error["id"], error["stage"]) == (12, "decode")
    assert error["row"] == 12


def test_a_column_that_holds_no_images_is_a_clear_error(workspace: Workspace) -> None:
    root = workspace.root
    pq.write_table(pa.table({"key": [1, 2], "size": [3.0, 4.0]}), root / "t.parquet")
    (root / "model.py").write_text(MODEL)
    (root / "job.toml").write_text(
        '[source]\nuri = "t.parquet"\nid_column = "key"\nimages = { column = "size" }\n'
        '[model]\nkind = "python"\nuri = "model.py:Pixels"\n[sink]\nuri = "out/"\n'
    )
    result = workspace.run("run", "job.toml")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "source.images.column: 'size' is double" in result.stderr
    assert not (root / "out").exists()
