"""`thresher run` with a generative model: a JSONL of prompts in, generated text and token
counts out, through the real CLI and real worker processes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .support import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hf_offline")]


def test_a_jsonl_of_prompts_gets_text_and_token_counts(
    workspace: Workspace, tiny_causal_lm: Callable[[], Path]
) -> None:
    pytest.importorskip("transformers")
    prompts = ["hello world", "the quick brown fox", "a", "how are you today?"] * 5
    lines = [{"id": i, "prompt": p, "params": {}} for i, p in enumerate(prompts)]
    lines[3]["params"] = {"max_tokens": 2}
    lines[7]["params"] = {"logit_bias": {"1": 5}}  # not supported: a bad row, the rest go on
    source = workspace.root / "prompts.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    options = {"prompt_column": "prompt", "params_column": "params", "max_tokens": 5}
    spec = workspace.spec(
        {
            "source": {"uri": source.name, "id_column": "id"},
            "model": {"kind": "llm", "uri": str(tiny_causal_lm()), "options": options},
            "sink": {"uri": "out", "format": "parquet"},
        }
    )
    result = workspace.run("run", spec, "--set", "run.workers=2")
    assert result.returncode == 0, result.stderr
    output = workspace.read_dir(workspace.root / "out", "parquet")
    rows = {row["id"]: row for row in output.table.to_pylist()}
    assert sorted(rows) == [i for i in range(len(prompts)) if i != 7]
    assert len(output.errors) == 1 and "'logit_bias' not supported" in output.errors[0]["message"]
    assert rows[3]["completion_tokens"] == 2
    for row in rows.values():
        assert isinstance(row["text"], str)
        assert row["finish_reason"] in ("stop", "length")
        assert row["total_tokens"] == row["prompt_tokens"] + row["completion_tokens"]
    same = [rows[i]["text"] for i in (0, 4, 8, 12, 16)]
    assert len(set(same)) == 1  # greedy: one prompt, one completion, whatever its shard
    assert output.manifest is not None
    assert (output.manifest["rows_out"], output.manifest["rows_error"]) == (19, 1)
