"""A service job whose predictions go to a Kafka topic (`output_topic`): a real `thresher
serve`, a real broker (scripts/kafka.sh). Each row reaches the topic once, keyed by its id,
the results download still works, and a topic outside the server's allowed_roots is
refused before anything runs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_topics import broker, new_topic, produce, read_topic

from .servers import Server, ServiceSite, wait_for_job

pytestmark = [pytest.mark.e2e]


def test_a_job_sends_its_predictions_to_a_topic_once(tmp_path: Path) -> None:
    address, scores = broker(), new_topic()
    produce(address, scores, 1, partitions=1)  # the topic exists (this message is not ours)
    site = ServiceSite(tmp_path)
    text = site.config.read_text()
    site.config.write_text(
        text.replace(
            f"allowed_roots = [{json.dumps(str(site.shared))}]",
            f"allowed_roots = [{json.dumps(str(site.shared))}, {json.dumps(f'kafka://{address}/')}]",
        )
    )
    ids = [f"c{i}" for i in range(500)]
    xs = [-1.0 if i % 100 == 7 else float(i) for i in range(500)]  # 5 the model refuses
    pq.write_table(pa.table({"id": ids, "x": xs}), site.shared / "customers.parquet")
    server = Server(site, {})
    try:
        with server.client(site.token("acme")) as client:
            body = {
                "source": {"uri": str(site.shared / "customers.parquet")},
                "model": "double",
                "id_column": "id",
                "columns": ["x"],
                "output_topic": f"kafka://{address}/{scores}",
            }
            submitted = client.post("/v1/jobs", json=body)
            assert submitted.status_code == 201, submitted.text
            job = wait_for_job(client, submitted.json()["id"], timeout=120)
            assert job["status"] == "succeeded", job

            messages = [m for m in read_topic(address, scores) if "thresher-job" in m[2]]
            assert Counter(value["id"] for _, value, _ in messages) == Counter(
                i for i, x in zip(ids, xs, strict=True) if x >= 0
            )
            for key, value, _ in messages:
                assert key == value["id"].encode()
                assert value["prediction"] == 2.0 * xs[int(value["id"][1:])]
            results = client.get(f"/v1/jobs/{job['id']}/results", params={"format": "jsonl"})
            assert results.status_code == 200, results.text
            assert len(results.text.splitlines()) == 495
            errors = client.get(f"/v1/jobs/{job['id']}/errors")
            assert len(errors.text.splitlines()) == 5

            outside = client.post(
                "/v1/jobs", json={**body, "output_topic": "kafka://10.0.0.9:9092/x"}
            )
            assert outside.status_code == 403, outside.text
            assert outside.json()["detail"].startswith("output_topic: ")
    finally:
        server.stop()
