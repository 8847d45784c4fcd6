"""What a `thresher run` job over an OpenAI batch file needs in its spec, filled in.

    [source]
    uri = "requests.jsonl"
    format = "openai-batch"       # options = { endpoint = "/v1/completions" } if not the default

    [model]
    kind = "sentence-transformers"
    uri = "models/all-MiniLM-L6-v2"

    [sink]
    uri = "answers/"              # answers/output.jsonl and answers/errors.jsonl

The endpoint is the batch's, as OpenAI's `POST /v1/batches` names it: every line whose
`url` is another is a bad line. Left out, it follows the model: `/v1/embeddings` for a
`sentence-transformers` model, `/v1/chat/completions` for an `llm`. From it follow the
rest, which a spec may leave out: the id column (`custom_id`), the columns each row keeps
for its answer (`line`, `index`, `model`; an embedding's `encoding_format` and
`dimensions`), the model's input columns (`input`; `messages` or `prompt`, and `params`,
for an `llm`), an encoder's token counts (OpenAI's `usage`), and the sink: `openai-batch`
unless the spec names another (`parquet` keeps thresher's own rows instead).
"""

from __future__ import annotations

from typing import Literal

from thresher.openai.lines import ENDPOINTS
from thresher.plugins import Options
from thresher.spec import JobSpec, ModelSection

__all__ = [
    "ERRORS_FILE",
    "FORMAT",
    "KEPT",
    "OUTPUT_FILE",
    "BatchSinkOptions",
    "BatchSourceOptions",
    "complete_batch_spec",
]

FORMAT = "openai-batch"
OUTPUT_FILE, ERRORS_FILE = "output.jsonl", "errors.jsonl"  # in the sink's folder
EMBEDDINGS, CHAT, COMPLETIONS = ENDPOINTS
Endpoint = Literal["/v1/embeddings", "/v1/chat/completions", "/v1/completions"]
# What each row keeps for its answer, beside its custom_id.
KEPT: dict[str, tuple[str, ...]] = {
    EMBEDDINGS: ("line", "index", "model", "encoding_format", "dimensions"),
    CHAT: ("line", "index", "model"),
    COMPLETIONS: ("line", "index", "model"),
}
DEFAULT_ENDPOINTS = {"sentence-transformers": EMBEDDINGS, "llm": CHAT}


class BatchSourceOptions(Options):
    """`source.options` of the `openai-batch` source."""

    endpoint: Endpoint | None = None  # None: the model kind's (see DEFAULT_ENDPOINTS)


class BatchSinkOptions(Options):
    """`sink.options` of the `openai-batch` sink: set from the source's, not by hand."""

    endpoint: Endpoint = "/v1/embeddings"


def complete_batch_spec(spec: JobSpec) -> None:
    """Fill in what a job over an OpenAI batch file implies (see the module docstring):
    the `completes` hook of the `openai-batch` source and sink (plugins.py); ValueError
    naming the field that contradicts it. Run again on its own result, it
    changes nothing (a stored spec is validated again on resume)."""
    source, sink = spec.source, spec.sink
    if source.format != FORMAT:
        if sink.format == FORMAT:
            raise ValueError(
                f"sink.format: {FORMAT} answers the request lines of an {FORMAT} source;"
                f' set source.format = "{FORMAT}"'
            )
        return
    endpoint = source.options.get("endpoint") or DEFAULT_ENDPOINTS.get(spec.model.kind)
    if endpoint is None:
        raise ValueError(
            f"source.options.endpoint: model.kind {spec.model.kind!r} has no default; set one"
            f" of {', '.join(ENDPOINTS)}"
        )
    if source.id_column not in (None, "custom_id"):
        raise ValueError("source.id_column: a batch file's id is custom_id; leave it out")
    if source.columns is not None:
        raise ValueError(
            "source.columns: a batch file's model inputs follow its endpoint; leave it out"
        )
    source.options["endpoint"] = endpoint
    source.id_column = "custom_id"
    kept = KEPT[endpoint]
    sink.keep_columns = [*kept, *(c for c in sink.keep_columns if c not in kept)]
    _model_defaults(spec.model, endpoint)
    if sink.format == FORMAT:
        if sink.uri.rstrip("/").lower().endswith(".jsonl"):
            raise ValueError(
                f"sink.uri: an {FORMAT} sink writes a folder ({OUTPUT_FILE} and {ERRORS_FILE}"
                " in it); name a folder, not a .jsonl file"
            )
        if sink.mode != "overwrite":
            raise ValueError(
                f"sink.mode: an {FORMAT} sink holds one batch's answers; use overwrite"
            )
        sink.options["endpoint"] = endpoint


def _model_defaults(model: ModelSection, endpoint: str) -> None:
    """Where the model finds each row's request: an `llm` its prompt or messages and its
    sampling parameters; a sentence-transformers encoder also counts tokens (`usage`)."""
    options = model.options
    if model.kind == "llm" and endpoint != EMBEDDINGS:
        if "prompt_column" not in options and "messages_column" not in options:
            text = "messages_column" if endpoint == CHAT else "prompt_column"
            options[text] = "messages" if endpoint == CHAT else "prompt"
        options.setdefault("params_column", "params")
    elif model.kind == "sentence-transformers":
        options.setdefault("tokens", True)
