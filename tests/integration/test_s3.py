"""Sources over S3: plan and read Parquet, CSV and JSONL from a real (moto) S3 server.

The server runs as a subprocess speaking the S3 protocol on a local port; thresher reaches
it the way it would reach any S3-compatible store, through `AWS_ENDPOINT_URL`, which
botocore (under s3fs) reads for every client it makes.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs

from thresher.errors import SourceError
from thresher.sources import Source, open_source
from thresher.spec import SourceSection

pytestmark = pytest.mark.integration

BUCKET = "thresher-test"
ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"moto server exited with {server.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)  # polling the port, nothing else
    pytest.fail(f"moto server did not answer on port {port}:\n{log.read_text()}")


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server, and the environment that points AWS clients at it."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_port(port, server, log)
        with pytest.MonkeyPatch.context() as env:
            for key, value in {**ENV, "AWS_ENDPOINT_URL": url}.items():
                env.setenv(key, value)
            for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
                env.delenv(key, raising=False)
            s3fs.S3FileSystem.clear_instance_cache()
            yield url
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def bucket(endpoint: str) -> Any:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    return client


def rows(ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "a": i * 0.5, "b": i % 7} for i in ids]


def encode(name: str, ids: range) -> bytes:
    if name.endswith(".parquet"):
        sink = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows(ids)), sink, row_group_size=40)
        return sink.getvalue()
    if ".csv" in name:
        text = "id,a,b\n" + "".join(f"{r['id']},{r['a']},{r['b']}\n" for r in rows(ids))
    else:
        text = "".join(json.dumps(r) + "\n" for r in rows(ids))
    data = text.encode()
    return gzip.compress(data) if name.endswith(".gz") else data


def upload(client: Any, prefix: str, files: dict[str, range]) -> None:
    for name, ids in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=encode(name, ids))


def read_ids(src: Source) -> tuple[list[int], list[str]]:
    """Plan, ship through pickle as a worker gets them, read every shard in order."""
    plan = src.plan()
    reader = pickle.loads(pickle.dumps(src.reader(plan.schema, plan.schema.names)))
    ids: list[int] = []
    for shard in plan.shards:
        for chunk in reader.read(pickle.loads(pickle.dumps(shard)), 64):
            assert chunk.bad == []
            ids.extend(chunk.table.column("id").to_pylist())
    return ids, [s.path for s in plan.shards]


def s3_source(uri: str, fmt: str | None = None, **section: Any) -> Source:
    return open_source(SourceSection(uri=uri, format=fmt, id_column="id", **section))  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_directory_on_s3(bucket: Any, fmt: str) -> None:
    prefix = f"dir-{fmt}"
    upload(
        bucket,
        prefix,
        {
            f"part-0.{fmt}": range(300),
            f"part-1.{fmt}": range(300, 420),
            f"_temporary.{fmt}": range(9000, 9010),
            f".hidden.{fmt}": range(9010, 9020),
        },
    )
    bucket.put_object(Bucket=BUCKET, Key=f"{prefix}/_SUCCESS", Body=b"{}")
    ids, paths = read_ids(s3_source(f"s3://{BUCKET}/{prefix}/", fmt, shard_bytes=1024))
    assert ids == list(range(420))
    assert len(paths) > 2  # split within files, not just by file
    assert sorted(set(paths)) == [
        f"s3://{BUCKET}/{prefix}/part-0.{fmt}",
        f"s3://{BUCKET}/{prefix}/part-1.{fmt}",
    ]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_single_file_and_glob_on_s3(bucket: Any, fmt: str) -> None:
    prefix = f"glob-{fmt}"
    upload(
        bucket,
        prefix,
        {f"day-1.{fmt}": range(50), f"day-2.{fmt}": range(50, 90), f"x.{fmt}": range(900, 910)},
    )
    ids, _ = read_ids(s3_source(f"s3://{BUCKET}/{prefix}/day-2.{fmt}"))
    assert ids == list(range(50, 90))
    ids, _ = read_ids(s3_source(f"s3://{BUCKET}/{prefix}/day-*.{fmt}"))
    assert ids == list(range(90))


def test_gzip_csv_on_s3(bucket: Any) -> None:
    upload(bucket, "gz", {"a.csv.gz": range(200), "b.csv.gz": range(200, 260)})
    src = s3_source(f"s3://{BUCKET}/gz/", "csv")
    ids, _ = read_ids(src)
    assert ids == list(range(260))


def test_text_locate_on_s3(bucket: Any) -> None:
    upload(bucket, "locate", {"data.csv": range(400)})
    src = s3_source(f"s3://{BUCKET}/locate/data.csv", shard_bytes=1024)
    plan = src.plan()
    reader = src.reader(plan.schema, ["id"])
    shard = plan.shards[-1]
    chunk = next(iter(reader.read(shard, 1000)))
    first_id = chunk.table.column("id")[0].as_py()
    assert reader.locate(shard, int(chunk.positions[0])) == ("line", first_id + 2)


def test_no_files_under_an_s3_prefix(bucket: Any) -> None:
    with pytest.raises(SourceError, match=r"^source\.uri: no input files at 's3://"):
        s3_source(f"s3://{BUCKET}/nothing-here/", "csv").plan()


def test_a_trigger_lists_a_prefix_of_many_pages_whole(bucket: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from thresher.triggers import list_watch

    keys = [f"many/day={i // 500}/part-{i:05d}.jsonl" for i in range(2345)]  # 3 pages
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: bucket.put_object(Bucket=BUCKET, Key=k, Body=b"{}\n"), keys))
    bucket.put_object(Bucket=BUCKET, Key="many-other/x.jsonl", Body=b"{}\n")  # a sibling prefix
    seen = list(list_watch(f"s3://{BUCKET}/many"))
    assert sorted(f.path for f in seen) == sorted(f"s3://{BUCKET}/{k}" for k in keys)
    assert {f.size for f in seen} == {3} and all(len(f.version) == 32 for f in seen)  # MD5 ETags
