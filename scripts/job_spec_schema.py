"""Write the job spec's JSON Schema, generated from its pydantic models, to
schema/job-spec.schema.json (tests/unit/test_job_spec_schema.py keeps the file in step
with the models: run this after changing a spec section).

Point an editor at it for completion and checks as you type: `#:schema
./schema/job-spec.schema.json` at the top of a TOML spec (taplo, Even Better TOML),
`# yaml-language-server: $schema=./schema/job-spec.schema.json` in a YAML one, `"$schema"`
in JSON. A plug-in's `options` are checked by thresher itself, not by the schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).parents[1] / "schema" / "job-spec.schema.json"


def job_spec_schema() -> dict[str, Any]:
    from thresher.spec import JobSpec

    generated = JobSpec.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **generated,
        "title": "thresher job spec",
        "description": "A job for `thresher run`: [job] [source] [model] [batch] [run] [sink]"
        " [errors] [notify] [monitor] [publish] (see docs/reference/spec.md).",
    }


def rendered() -> str:
    return json.dumps(job_spec_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA.parent.mkdir(exist_ok=True)
    SCHEMA.write_text(rendered(), encoding="utf-8")
    print(f"wrote {SCHEMA}", file=sys.stderr)
