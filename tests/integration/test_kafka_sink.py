"""The `kafka` sink against the test broker (scripts/kafka.sh): the sink contract, and a
Kafka-to-Kafka job from the CLI whose predictions reach the output topic once each,
keyed by their input's key, only after the job publishes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kafka_topics import broker, committed, ends, new_topic, produce, read_topic, write_job
from thresher.sinks import open_sink
from thresher.spec import SinkSection
from thresher.testing import check_sink

pytestmark = pytest.mark.integration

THRESHER = str(Path(sys.executable).parent / "thresher")


Message = tuple[bytes | None, dict[str, Any], dict[str, bytes]]


def ours(messages: list[Message]) -> list[Message]:
    """The messages thresher sent (the one each test puts first to make the topic has no
    headers)."""
    return [m for m in messages if "thresher-job" in m[2]]


def thresher(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, with the job store `root/store.db`."""
    env = {**os.environ, "THRESHER_STORE": f"sqlite:///{root / 'store.db'}"}
    return subprocess.run(
        [THRESHER, *args], check=False, env=env, capture_output=True, text=True, timeout=300
    )


def kafka_sink_section(address: str, topic: str, staging: Path, **options: object) -> str:
    listed = ", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in options.items())
    return (
        (
            f'[sink]\nuri = "kafka://{address}/{topic}"\nstaging = "{staging}"\n'
            f'keep_columns = ["n"]\noptions = {{ {listed} }}\n'
        )
        .replace("True", "true")
        .replace("False", "false")
    )


@pytest.mark.parametrize("transactional", [True, False])
def test_the_sink_keeps_the_contract_and_puts_each_row_on_the_topic_once(
    tmp_path: Path, transactional: bool
) -> None:
    address, topic = broker(), new_topic()
    produce(address, topic, 1, partitions=1)  # the topic exists: the sink never makes one
    options = {"key": "id", "transactional": transactional}
    uri = f"kafka://{address}/{topic}"
    check_sink(lambda: open_sink(SinkSection(uri=uri, staging=str(tmp_path), options=options)))
    messages = ours(read_topic(address, topic))
    seen = Counter((value["id"], value["tag"]) for _, value, _ in messages)
    # check_sink's two jobs write ids 0, 10, 11, 20, 21, 22, each committed twice
    expected = [
        (shard * 10 + i, tag) for tag in (1, 2) for shard in range(3) for i in range(shard + 1)
    ]
    assert seen == Counter(expected), "a row is missing from the topic or on it twice"
    for key, value, headers in messages:
        assert key == str(value["id"]).encode()
        assert headers["thresher-job"].decode().startswith("2026010")


def test_a_kafka_to_kafka_job_keys_each_prediction_by_its_input(tmp_path: Path) -> None:
    address, source, scores = broker(), new_topic(), new_topic()
    produce(address, source, 5_000, bad=lambda n: n % 1_000 == 7)
    produce(address, scores, 1, partitions=1)  # not thresher's: it has no headers
    staging = tmp_path / "side"
    spec = write_job(tmp_path, address, source, sink=kafka_sink_section(address, scores, staging))
    run = thresher(tmp_path, "run", str(spec))
    assert run.returncode == 0, run.stderr[-3000:]
    messages = ours(read_topic(address, scores))
    numbers = Counter(value["n"] for _, value, _ in messages)
    assert numbers == Counter(n for n in range(5_000) if n % 1_000 != 7)
    for key, value, headers in messages:
        assert key == str(value["n"]).encode(), "a prediction is not keyed by its input's key"
        assert value["score"] == pytest.approx(float(value["n"] % 97) / 10.0 * 2.0)
        assert set(headers) >= {"thresher-job", "thresher-shard", "thresher-row"}
    bad = list((staging / "_errors").glob("part-*.jsonl"))
    assert sum(len(p.read_text().splitlines()) for p in bad) == 5
    assert committed(address, f"g-{source}", source) == ends(address, source)

    # The next run sends only what arrived since: the topic appends.
    produce(address, source, 300, first=5_000)
    again = thresher(tmp_path, "run", str(spec))
    assert again.returncode == 0, again.stderr[-3000:]
    first_job = {headers["thresher-job"] for _, _, headers in messages}
    later = [m for m in ours(read_topic(address, scores)) if m[2]["thresher-job"] not in first_job]
    assert sorted(value["n"] for _, value, _ in later) == list(range(5_000, 5_300))


def test_thresher_run_sends_a_data_frame_s_predictions_to_a_topic(tmp_path: Path) -> None:
    import numpy as np
    import pandas as pd
    from sklearn.linear_model import LinearRegression

    import thresher

    address, scores = broker(), new_topic()
    produce(address, scores, 1, partitions=1)
    frame = pd.DataFrame({"customer": [f"c{i}" for i in range(2_000)], "x": np.arange(2_000.0)})
    model = LinearRegression().fit(frame[["x"]], 3.0 * frame["x"])
    result = thresher.run(
        data=frame,
        model=model,
        sink={"uri": f"kafka://{address}/{scores}", "staging": str(tmp_path / "side")},
        id_column="customer",
        columns=["x"],
        store=f"sqlite:///{tmp_path / 'store.db'}",
    )
    assert result.succeeded
    assert result.to_arrow().num_rows == 2_000  # read back from the staging folder
    messages = ours(read_topic(address, scores))
    assert sorted(key for key, _, _ in messages) == sorted(c.encode() for c in frame["customer"])
    for key, value, _ in messages:
        assert value["customer"] == key.decode()
        assert value["prediction"] == pytest.approx(3.0 * int(key[1:]), abs=1e-6)


def test_a_held_job_sends_nothing_until_approved(tmp_path: Path) -> None:
    """The publish gate holds a job whose error rate is too high: its predictions stay
    off the topic (and the source's offsets stay) until `thresher approve`; a rejected
    job's never reach it."""
    address, source, scores = broker(), new_topic(), new_topic()
    produce(address, source, 2_000, bad=lambda n: n % 100 == 7)  # 1% bad
    produce(address, scores, 1, partitions=1)
    sink = kafka_sink_section(address, scores, tmp_path / "side")
    spec = write_job(
        tmp_path, address, source, sink=sink + "[publish.checks]\nmax_error_rate = 0.001\n"
    )

    held = thresher(tmp_path, "run", str(spec))
    assert "publish check max_error_rate failed" in held.stderr, held.stderr[-2000:]
    assert ours(read_topic(address, scores)) == []
    assert committed(address, f"g-{source}", source) == {}
    job_id = held.stderr.split("job ", 1)[1].split(":", 1)[0]
    approved = thresher(tmp_path, "approve", job_id)
    assert approved.returncode == 0, approved.stderr[-2000:]
    assert len(ours(read_topic(address, scores))) == 1_980
    assert committed(address, f"g-{source}", source) == ends(address, source)

    produce(address, source, 500, first=2_000, bad=lambda n: n % 50 == 0)
    again = thresher(tmp_path, "run", str(spec))
    assert "publish check max_error_rate failed" in again.stderr, again.stderr[-2000:]
    rejected = thresher(tmp_path, "reject", again.stderr.split("job ", 1)[1].split(":", 1)[0])
    assert rejected.returncode == 0, rejected.stderr[-2000:]
    assert len(ours(read_topic(address, scores))) == 1_980, "a rejected job's rows were sent"


FIXABLE = """
import os

import numpy as np


class Fixable:
    def predict(self, batch):
        x = np.asarray(batch["x"], dtype=float)
        if (x < 0).any() and not os.path.exists(FLAG):
            raise ValueError("x must not be negative, until fixed")
        return {"score": 2.0 * np.abs(x)}
"""


def test_retry_errors_sends_the_fixed_rows_once(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    address, scores = broker(), new_topic()
    produce(address, scores, 1, partitions=1)
    ids = [f"r{i}" for i in range(3_000)]
    xs = [-1.0 if i % 97 == 5 else float(i) for i in range(3_000)]
    pq.write_table(pa.table({"id": ids, "x": xs}), tmp_path / "in.parquet")
    (tmp_path / "model.py").write_text(FIXABLE.replace("FLAG", repr(str(tmp_path / "fixed"))))
    spec = tmp_path / "job.toml"
    spec.write_text(
        '[source]\nuri = "in.parquet"\nid_column = "id"\ncolumns = ["x"]\nshard_rows = 1000\n'
        '[model]\nkind = "python"\nuri = "model.py:Fixable"\nbatch_format = "numpy"\n'
        f'[sink]\nuri = "kafka://{address}/{scores}"\nstaging = "side"\n'
    )
    first = thresher(tmp_path, "run", str(spec))
    assert first.returncode == 0, first.stderr[-2000:]
    bad = sum(x < 0 for x in xs)
    assert len(ours(read_topic(address, scores))) == 3_000 - bad
    (tmp_path / "fixed").touch()
    job_id = first.stderr.split("job ", 1)[1].split(":", 1)[0]
    retry = thresher(tmp_path, "retry-errors", job_id)
    assert retry.returncode == 0, retry.stderr[-2000:]
    messages = ours(read_topic(address, scores))
    assert Counter(key for key, _, _ in messages) == Counter(i.encode() for i in ids)
    left = (tmp_path / "side" / "_errors").glob("part-*.jsonl")
    assert all(not part.read_text().strip() for part in left), "a fixed row is still an error"
