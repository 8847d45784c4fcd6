"""OpenAI batch answers from a job's parts: what a running batch has answered so far
(its committed shards, still unpublished) and what its finished files hold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from thresher.openai.settings import ERRORS_FILE, OUTPUT_FILE
from thresher.records import BadRecord
from thresher.sinks.files import FileSink
from thresher.sinks.openai_answers import partial_lines
from thresher.sinks.openai_batch import write_answers
from thresher.sinks.parts import StagedPart

NAMES = ("batch_1", "minilm", "/v1/embeddings")


def embeddings(ids: list[str], width: int = 3) -> pa.Table:
    vectors = np.arange(len(ids) * width, dtype=np.float32).reshape(len(ids), width)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), width)
    return pa.table({"custom_id": ids, "index": [0] * len(ids), "embedding": column})


def test_a_running_batch_answers_the_requests_of_its_committed_shards(tmp_path: Path) -> None:
    sink = FileSink(uri=str(tmp_path / "out"), file_format="parquet")
    sink.start("job-1", 3, resume=False)
    target = sink.part_target()
    writer = target.open(0, "a1")
    writer.write(embeddings(["r0", "r1", "r2"]))
    bad = BadRecord("in.jsonl", "predict", "ValueError", "too long", line=4, id="r3")
    error_path = target.error_staging(0, "a1")
    Path(error_path).parent.mkdir(parents=True, exist_ok=True)
    Path(error_path).write_text(bad.to_json() + "\n")
    sink.commit(writer.close(), StagedPart(0, "a1", error_path, 1))
    target.open(1, "a1").write(embeddings(["r9"]))  # staged, not committed: not answered
    parts = sink.committed_parts("job-1")
    assert sink.published_parts() == []  # nothing is published while the job runs
    answered = [json.loads(line) for line in partial_lines(parts, "parquet", NAMES, False)]
    assert [a["custom_id"] for a in answered] == ["r0", "r1", "r2"]
    assert answered[1]["response"]["body"]["data"][0]["embedding"] == [3.0, 4.0, 5.0]
    (failed,) = [json.loads(line) for line in partial_lines(parts, "parquet", NAMES, True)]
    assert failed["custom_id"] == "r3" and failed["response"]["status_code"] == 400
    sink.finish({"job_id": "job-1"})
    published = sink.committed_parts("job-1")
    assert published[0] == sink.published_parts() and len(published[0]) == 1
    again = list(partial_lines(published, "parquet", NAMES, False))
    assert [json.loads(line) for line in again] == answered


def test_a_request_in_both_parts_is_answered_by_its_error(tmp_path: Path) -> None:
    """One rule for every answer (`sinks.answers`, rule 1): a request with an error record
    failed, even if rows of it are in the output part too; its rows answer nothing."""
    sink = FileSink(uri=str(tmp_path / "out"), file_format="parquet")
    sink.start("job-1", 1, resume=False)
    target = sink.part_target()
    writer = target.open(0, "a1")
    writer.write(embeddings(["r0", "r1", "r2"]))
    bad = BadRecord("in.jsonl", "predict", "ValueError", "half of it", line=2, id="r1")
    error_path = target.error_staging(0, "a1")
    Path(error_path).parent.mkdir(parents=True, exist_ok=True)
    Path(error_path).write_text(bad.to_json() + "\n")
    sink.commit(writer.close(), StagedPart(0, "a1", error_path, 1))
    folder = tmp_path / "answers"
    folder.mkdir()
    counts = write_answers(str(folder), sink.committed_parts("job-1"), ("job-1", NAMES[2]))
    output = [json.loads(line) for line in (folder / OUTPUT_FILE).read_text().splitlines()]
    (failed,) = [json.loads(line) for line in (folder / ERRORS_FILE).read_text().splitlines()]
    assert [line["custom_id"] for line in output] == ["r0", "r2"]
    assert failed["custom_id"] == "r1" and failed["response"]["status_code"] == 400
    assert counts["requests"] == {"total": 3, "completed": 2, "failed": 1}
