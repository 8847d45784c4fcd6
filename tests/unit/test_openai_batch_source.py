"""`thresher run`'s `openai-batch` source: every bad line of a batch file is a bad record
of its own (its line, OpenAI's code, its custom_id when it has one) and the other lines
are the rows the service makes of them; and what the spec of such a job fills in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from thresher.errors import SourceError, SpecError
from thresher.records import BadRecord
from thresher.sources import open_source
from thresher.spec import load_spec, parse_spec
from thresher.testing import check_source

MODEL = {"kind": "sentence-transformers", "uri": "models/minilm"}


def request(custom_id: Any, body: Any, url: str = "/v1/embeddings", method: str = "POST") -> str:
    return json.dumps({"custom_id": custom_id, "method": method, "url": url, "body": body})


def batch_spec(path: Path, model: dict[str, Any] = MODEL, **source: Any) -> Any:
    section = {"uri": str(path), "format": "openai-batch", "shard_bytes": 1024, **source}
    return parse_spec(
        {"source": section, "model": model, "sink": {"uri": str(path.parent / "out")}}
    )


def read_all(path: Path, **spec: Any) -> tuple[list[dict[str, Any]], list[BadRecord], int]:
    """Every row and bad record of the file, through a plan of several shards that
    keeps the source contract; and how many shards it has."""
    job = batch_spec(path, **spec)
    source = open_source(job.source, job.sink.keep_columns, min_shards=2)
    plan = check_source(source, rows_per_chunk=4)
    reader = source.reader(plan.schema, plan.schema.names)
    rows: list[dict[str, Any]] = []
    bad: list[BadRecord] = []
    for shard in plan.shards:
        for chunk in reader.read(shard, 4):
            rows += chunk.table.to_pylist()
            bad += chunk.bad
            assert [reader.locate(shard, int(p))[1] for p in chunk.positions] == [
                row["line"] for row in chunk.table.to_pylist()
            ]
    return rows, bad, len(plan.shards)


def good(i: int) -> str:
    return request(f"r{i}", {"model": "m", "input": f"sentence number {i} " + "x" * 80})


BAD_LINES = {  # line -> (the line, OpenAI's code, the custom_id its record carries)
    3: ("{not json", "invalid_json_line", None),
    4: ("[1, 2]", "invalid_json_line", None),
    5: (request(None, {"model": "m", "input": "a"}), "missing_custom_id", None),
    6: (request("g", {"model": "m", "input": "a"}, method="GET"), "invalid_method", "g"),
    7: (request("u", {"model": "m", "input": "a"}, url="/v1/chat/completions"),
        "mismatched_endpoint", "u"),
    8: (request("o", {"model": "other", "input": "a"}), "mismatched_model", "o"),
    9: (request("n", {"model": "m"}), "invalid_input", "n"),
    10: (request("s", {"model": "m", "input": "a", "stream": True}), "stream_unsupported", "s"),
    11: (request("e", {"model": "m", "input": "a", "encoding_format": "hex"}),
         "invalid_input", "e"),
    12: (request("d", {"model": "m", "input": "a", "dimensions": "3"}), "invalid_input", "d"),
    13: (request("w", {"model": "m", "input": ["a"] * 2049}), "invalid_input", "w"),
    14: (request("nb", "not a body"), "invalid_body", "nb"),
    15: (request("q", {"model": "m", "input": "\ud800"}), "invalid_input", "q"),
    16: (request("\udfff", {"model": "m", "input": "a"}), "invalid_input", None),
    30: (request("r1", {"model": "m", "input": "again"}), "duplicate_custom_id", "r1"),
}  # fmt: skip


def test_each_bad_line_is_a_bad_record_of_its_own_and_the_rest_are_rows(tmp_path: Path) -> None:
    lines = [good(i) for i in range(1, 33)]
    lines[1] = request("r2", {"model": "m", "input": ["one", "two"], "encoding_format": "base64"})
    for number, (line, _, _) in BAD_LINES.items():
        lines[number - 1] = line
    lines[19] = ""  # line 20: blank, no request at all
    (tmp_path / "batch.jsonl").write_text("\n".join(lines) + "\n")
    rows, bad, shards = read_all(tmp_path / "batch.jsonl")
    assert shards > 2  # the repeated custom_id (line 30) is in a later shard than line 1
    assert {r.line: (r.error, r.id) for r in bad} == {
        n: (code, custom_id) for n, (_, code, custom_id) in BAD_LINES.items()
    }
    assert all(r.stage == "decode" and r.source.endswith("batch.jsonl") for r in bad)
    assert next(r for r in bad if r.line == 6).message.startswith("method must be POST")
    answered = [n for n in range(1, 33) if n not in BAD_LINES and n != 20]
    assert sorted({row["line"] for row in rows}) == answered
    two = [row for row in rows if row["custom_id"] == "r2"]
    assert [(r["index"], r["input"], r["encoding_format"]) for r in two] == [
        (0, "one", "base64"),
        (1, "two", "base64"),
    ]
    assert {row["model"] for row in rows} == {"m"}
    assert list(rows[0]) == ["custom_id", "line", "index", "model", "encoding_format",
                             "dimensions", "input"]  # fmt: skip


def test_chat_and_completion_lines_are_rows_with_their_sampling_parameters(tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "hi"}]
    lines = [
        request(
            "c", {"model": "lm", "messages": chat, "max_tokens": 5}, url="/v1/chat/completions"
        ),
        request("x", {"model": "lm", "messages": "hi"}, url="/v1/chat/completions"),
    ]
    (tmp_path / "chat.jsonl").write_text("\n".join(lines) + "\n")
    llm = {"kind": "llm", "uri": "models/lm"}
    rows, bad, _ = read_all(tmp_path / "chat.jsonl", model=llm)
    assert [(r["custom_id"], json.loads(r["messages"]), json.loads(r["params"])) for r in rows] == [
        ("c", chat, {"max_tokens": 5})
    ]
    assert [(r.line, r.error) for r in bad] == [(2, "invalid_input")]
    prompt = request("p", {"model": "lm", "prompt": "once upon"}, url="/v1/completions")
    (tmp_path / "prompts.jsonl").write_text(prompt + "\n")
    rows, bad, _ = read_all(
        tmp_path / "prompts.jsonl", model=llm, options={"endpoint": "/v1/completions"}
    )
    assert [(r["prompt"], r["params"]) for r in rows] == [("once upon", "{}")] and not bad


def test_a_file_for_another_endpoint_or_with_no_request_is_refused(tmp_path: Path) -> None:
    chat = request("c", {"model": "lm", "messages": []}, url="/v1/chat/completions")
    (tmp_path / "chat.jsonl").write_text(chat + "\n")
    with pytest.raises(SourceError, match=r"no line asks for the batch's endpoint /v1/embeddings"):
        read_all(tmp_path / "chat.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(SourceError, match="no request lines"):
        read_all(tmp_path / "empty.jsonl")


def test_a_batch_files_spec_fills_in_what_its_endpoint_implies(tmp_path: Path) -> None:
    path = tmp_path / "batch.jsonl"
    spec = batch_spec(path)
    assert spec.source.id_column == "custom_id"
    assert spec.source.options == {"endpoint": "/v1/embeddings"}
    assert (spec.sink.format, spec.sink.options) == ("openai-batch", {"endpoint": "/v1/embeddings"})
    assert spec.sink.keep_columns == ["line", "index", "model", "encoding_format", "dimensions"]
    assert spec.model.options == {"tokens": True}
    assert parse_spec(spec.model_dump(mode="json")) == spec  # a stored spec reads back the same
    chat = batch_spec(path, model={"kind": "llm", "uri": "lm"})
    assert chat.model.options == {"messages_column": "messages", "params_column": "params"}
    assert chat.sink.keep_columns == ["line", "index", "model"]
    done = batch_spec(
        path, model={"kind": "llm", "uri": "lm"}, options={"endpoint": "/v1/completions"}
    )
    assert done.model.options == {"prompt_column": "prompt", "params_column": "params"}
    rows = parse_spec(
        {
            "source": {"uri": str(path), "format": "openai-batch"},
            "model": MODEL,
            "sink": {"uri": str(tmp_path / "rows"), "format": "parquet"},
        }
    )
    assert rows.sink.format == "parquet" and rows.sink.keep_columns[0] == "line"


@pytest.mark.parametrize(
    ("source", "model", "sink", "message"),
    [
        ({"format": "jsonl"}, MODEL, {"format": "openai-batch"},
         "sink.format: openai-batch answers the request lines of an openai-batch source"),
        ({"id_column": "id"}, MODEL, {}, "source.id_column: a batch file's id is custom_id"),
        ({"columns": ["input"]}, MODEL, {}, "source.columns: a batch file's model inputs follow"),
        ({}, MODEL, {"mode": "append"}, "sink.mode: an openai-batch sink holds one batch's"),
        ({}, MODEL, {"uri": "answers.jsonl"}, "sink.uri: an openai-batch sink writes a folder"),
        ({}, {"kind": "python", "uri": "m.py:M"}, {},
         "source.options.endpoint: model.kind 'python' has no default"),
        ({"options": {"endpoint": "/v1/images"}}, MODEL, {}, "source.options.endpoint: must be"),
    ],
)  # fmt: skip
def test_a_batch_spec_that_contradicts_it_names_the_field(
    tmp_path: Path,
    source: dict[str, Any],
    model: dict[str, Any],
    sink: dict[str, Any],
    message: str,
) -> None:
    raw = {
        "source": {"uri": str(tmp_path / "b.jsonl"), "format": "openai-batch", **source},
        "model": model,
        "sink": {"uri": str(tmp_path / "out"), **sink},
    }
    with pytest.raises(SpecError) as raised:
        parse_spec(raw)
    assert any(problem.startswith(message) for problem in raised.value.problems), raised.value


def test_the_docs_offline_batch_spec_is_valid(tmp_path: Path) -> None:
    page = Path(__file__).parents[2] / "docs" / "sources" / "openai-batch.md"
    section = page.read_text(encoding="utf-8").split("# OpenAI batch files", 1)[1]
    (tmp_path / "batch.toml").write_text(section.split("```toml\n", 1)[1].split("```", 1)[0])
    spec = load_spec(tmp_path / "batch.toml")
    assert (spec.source.format, spec.sink.format) == ("openai-batch", "openai-batch")
    assert spec.source.options == {"endpoint": "/v1/embeddings"}


@pytest.mark.parametrize(("rows", "slots", "shards"), [(2000, 2, 2), (2000, 4, 3), (500, 2, 1)])
def test_the_service_cuts_a_batch_s_request_rows_into_a_shard_per_worker_slot(
    tmp_path: Path, rows: int, slots: int, shards: int
) -> None:
    from thresher.service.background.batches import request_shard_bytes

    prepared = tmp_path / "rows.jsonl"
    text = "batch inference runs a model over every record exactly once " * 4
    line = {"custom_id": "r", "line": 1, "index": 0, "input": text, "dimensions": None}
    prepared.write_text(
        "".join(json.dumps({**line, "custom_id": f"r{i}"}) + "\n" for i in range(rows))
    )

    def planned(**source: Any) -> int:
        job = parse_spec(
            {
                "source": {"uri": str(prepared), "format": "jsonl", **source},
                "model": MODEL,
                "sink": {"uri": str(tmp_path / "out")},
            }
        )
        return len(open_source(job.source, min_shards=slots).plan().shards)

    # a plain JSONL input this small (under 1 MiB) is one shard, whatever the workers
    assert planned() == 1
    # request rows: one shard a worker slot, but shards of 256 KiB at least (2000 rows:
    # about 650 KiB, 500 rows: about 160 KiB)
    assert planned(shard_bytes=request_shard_bytes(prepared, slots)) == shards
