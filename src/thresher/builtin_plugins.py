"""The built-in plug-ins, as data: every source, sink, model kind and executor thresher
ships, by the name a spec uses, with the dotted paths of its factory and its options
(imported only when a job uses it). `plugins.py` makes each a `Plugin` (`BUILTINS`) and
says how plug-ins work; this list imports nothing, so any module may be named here."""

from __future__ import annotations

from typing import Any

__all__ = ["BUILTIN_PLUGINS"]


def _builtin(
    kind: str,
    name: str,
    factory: str,
    options: str | None = None,
    extra: str | None = None,
    *,
    model_uri: str = "other",
) -> dict[str, Any]:
    """A built-in's `Plugin` fields; `factory` and `options` relative to `thresher.`."""
    options = options and f"thresher.{options}"
    return {
        "kind": kind,
        "name": name,
        "factory": f"thresher.{factory}",
        "options": options,
        "extra": extra,
        "model_uri": model_uri,
    }


# An OpenAI batch file's job: its answers are an `openai-batch` sink's unless the spec
# names another, and the endpoint implies its columns (`openai/settings.py`).
_BATCH_COMPLETES = "thresher.openai.settings:complete_batch_spec"


S, K, M, E, NONE = "source", "sink", "model", "executor", "plugins:NoOptions"
FILE, CLASS = "file", "class"
BUILTIN_PLUGINS: tuple[dict[str, Any], ...] = (
    _builtin(S, "parquet", "sources.parquet:parquet_source", "sources.base:InputOptions"),
    _builtin(S, "csv", "sources.text_sources:csv_source", "sources.base:InputOptions"),
    _builtin(S, "jsonl", "sources.text_sources:jsonl_source", "sources.base:InputOptions"),
    _builtin(S, "arrow", "sources.arrow_ipc:arrow_source", "sources.base:InputOptions"),
    _builtin(S, "postgresql", "sources.postgresql:postgres_source", NONE, extra="postgres"),
    _builtin(S, "sqlite", "sources.sqlite:sqlite_source", NONE),
    _builtin(
        S, "images", "sources.images:image_source", "sources.images:ImageSourceOptions", "images"
    ),
    _builtin(
        S,
        "documents",
        "sources.documents:document_source",
        "sources.documents:DocumentSourceOptions",
        "documents",
    ),
    _builtin(S, "duckdb", "sources.duckdb:duckdb_source", NONE, extra="duckdb"),
    _builtin(S, "delta", "sources.delta:delta_source", "sources.delta:DeltaSourceOptions", "delta"),
    {
        **_builtin(S, "iceberg", "sources.iceberg:iceberg_source", extra="iceberg"),
        "options": "thresher.sources.iceberg:IcebergSourceOptions",
        "table_uri": True,
    },
    {
        **_builtin(S, "features", "sources.features:features_source", extra="duckdb"),
        "options": "thresher.sources.features:FeaturesOptions",
        "completes": "thresher.sources.features:complete_features_spec",
    },
    {
        **_builtin(S, "openai-batch", "sources.openai_batch:openai_batch_source"),
        "options": "thresher.openai.settings:BatchSourceOptions",
        "completes": _BATCH_COMPLETES,
        "sink_format": "openai-batch",
    },
    {
        **_builtin(S, "kafka", "sources.kafka:kafka_source", extra="kafka"),
        "options": "thresher.sources.kafka_values:KafkaSourceOptions",
        "completes": "thresher.sources.kafka_values:complete_kafka_spec",
    },
    *(
        _builtin(K, name, "sinks.files:file_sink", NONE)
        for name in ("parquet", "csv", "jsonl", "arrow")
    ),
    _builtin(K, "sqlite", "sinks.sqlite:sqlite_sink", NONE, extra="sqlite"),
    {
        **_builtin(K, "openai-batch", "sinks.openai_batch:openai_batch_sink"),
        "options": "thresher.openai.settings:BatchSinkOptions",
        "completes": _BATCH_COMPLETES,
    },
    _builtin(K, "postgresql", "sinks.postgresql:postgresql_sink", NONE, extra="postgres"),
    _builtin(K, "duckdb", "sinks.duckdb:duckdb_sink", NONE, extra="duckdb"),
    {
        **_builtin(K, "delta", "sinks.delta:delta_sink", "sinks.delta:DeltaSinkOptions", "delta"),
        "modes": ("overwrite", "append", "merge"),
        "completes": "thresher.sinks.modes:complete_merge_spec",
    },
    {
        **_builtin(K, "iceberg", "sinks.iceberg:iceberg_sink", extra="iceberg"),
        "options": "thresher.sinks.iceberg:IcebergSinkOptions",
        "table_uri": True,
        "modes": ("overwrite", "append", "merge"),
        "completes": "thresher.sinks.modes:complete_merge_spec",
    },
    {
        **_builtin(K, "kafka", "sinks.kafka:kafka_sink", extra="kafka"),
        "options": "thresher.sinks.kafka_settings:KafkaSinkOptions",
        "modes": ("append",),
        "completes": "thresher.sinks.kafka_settings:complete_kafka_sink_spec",
    },
    _builtin(M, "sklearn", "models.sklearn:load_sklearn", NONE, "sklearn", model_uri=FILE),
    _builtin(
        M, "onnx", "models.onnx:load_onnx", "models.options:OnnxOptions", "onnx", model_uri=FILE
    ),
    _builtin(M, "python", "models.python:load_python", NONE, model_uri=CLASS),
    _builtin(
        M,
        "torch",
        "models.torch:load_torch",
        "models.options:TorchOptions",
        "torch",
        model_uri="file-or-class",
    ),
    _builtin(
        M,
        "sentence-transformers",
        "models.text:load_sentence_transformer",
        "models.options:SentenceTransformerOptions",
        "text",
    ),
    _builtin(
        M,
        "transformers",
        "models.transformers:load_transformers",
        "models.options:TransformersOptions",
        "text",
    ),
    _builtin(M, "llm", "models.llm:load_llm", "models.options:LlmOptions", "text"),
    _builtin(M, "vision", "models.vision:load_vision", "models.vision:VisionOptions", "images"),
    _builtin(
        M,
        "xgboost",
        "models.boosters:load_xgboost",
        "models.options:BoosterOptions",
        "boosters",
        model_uri=FILE,
    ),
    _builtin(
        M,
        "lightgbm",
        "models.boosters:load_lightgbm",
        "models.options:BoosterOptions",
        "boosters",
        model_uri=FILE,
    ),
    _builtin(M, "object", "inmemory.objects:load_object", "models.options:ObjectOptions"),
    _builtin(M, "mlflow", "models.mlflow:load_mlflow", NONE, "mlflow"),
    _builtin(E, "local", "executors.local:local_executor"),
    _builtin(E, "ray", "executors.ray_pool:ray_executor", extra="ray"),
)
del S, K, M, E, NONE, FILE, CLASS
