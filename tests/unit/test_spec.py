"""The job spec: every file format loads, every mistake is named by its field path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from thresher.errors import SpecError
from thresher.places import infer_format, resolve_uri
from thresher.spec import JobSpec, apply_override, load_spec, parse_spec

MINIMAL_TOML = """
[job]
name = "nightly"

[source]
uri = "data/customers.parquet"
id_column = "customer_id"

[model]
kind = "sklearn"
uri = "models/model.skops"

[batch]
size = 512

[run]
workers = 2

[sink]
uri = "out/"
mode = "append"
"""

MINIMAL: dict[str, Any] = {
    "job": {"name": "nightly"},
    "source": {"uri": "data/customers.parquet", "id_column": "customer_id"},
    "model": {"kind": "sklearn", "uri": "models/model.skops"},
    "batch": {"size": 512},
    "run": {"workers": 2},
    "sink": {"uri": "out/", "mode": "append"},
}


def raw_spec(**sections: dict[str, Any]) -> dict[str, Any]:
    """The minimal spec as a mapping, with some sections updated."""
    raw = copy.deepcopy(MINIMAL)
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return raw


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    return info.value.problems


def check_minimal(spec: JobSpec, base: Path) -> None:
    assert spec.job.name == "nightly"
    assert spec.source.uri == str(base / "data/customers.parquet")
    assert spec.source.format == "parquet"
    assert spec.source.id_column == "customer_id"
    assert spec.model.kind == "sklearn"
    assert spec.model.uri == str(base / "models/model.skops")
    assert spec.batch.size == 512
    assert spec.run.workers == 2
    assert spec.run.executor == "local"
    assert spec.sink.uri == str(base / "out") + "/"
    assert spec.sink.mode == "append"
    assert spec.sink.format == "parquet"


# --- loading -------------------------------------------------------------------------------


def test_minimal_toml_loads(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(MINIMAL_TOML)
    check_minimal(load_spec(path), tmp_path)


@pytest.mark.parametrize(
    ("name", "dump"),
    [("job.yaml", yaml.safe_dump), ("job.yml", yaml.safe_dump), ("job.json", json.dumps)],
)
def test_yaml_and_json_load_the_same_spec(tmp_path: Path, name: str, dump: Any) -> None:
    path = tmp_path / name
    path.write_text(dump(MINIMAL))
    check_minimal(load_spec(path), tmp_path)


def test_defaults_fill_the_optional_sections() -> None:
    spec = parse_spec(
        {
            "source": {"uri": "/d/x.csv"},
            "model": {"kind": "onnx", "uri": "/m.onnx"},
            "sink": {"uri": "/out/"},
        }
    )
    assert spec.job.name == "job"
    assert spec.batch.size == "auto"
    assert spec.batch.max_size == 65536
    assert spec.batch.max_memory is None
    assert spec.run.workers is None
    assert spec.run.max_attempts == 3
    assert spec.sink.mode == "overwrite"
    assert spec.sink.keep_columns == []
    assert spec.model.trust is False
    assert spec.model.outputs == ["prediction"]
    assert spec.errors.on_bad_input == "skip"
    assert spec.source.shard_bytes == 64 * 1024 * 1024


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("job.toml", "[source\nuri = 1", "job.toml: "),
        ("job.yaml", "source: [unclosed", "job.yaml: "),
        ("job.json", "{", "job.json: "),
        ("job.yaml", "- a list\n- not sections\n", "a mapping of sections"),
        ("job.ini", "[source]", "must end in .toml, .yaml, .yml or .json"),
    ],
)
def test_unreadable_spec_files_are_spec_errors(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    [problem] = info.value.problems
    assert problem.startswith(str(path))
    assert expected in problem


def test_missing_spec_file_is_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.problems[0].startswith(f"{path}: ")


# --- validation: one problem per field, each naming its path -------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (raw_spec(source={"urii": "x"}), "source.urii: unknown key (did you mean 'uri'?)"),
        (raw_spec(batch={"sise": 3}), "batch.sise: unknown key (did you mean 'size'?)"),
        (raw_spec(sourse={}), "sourse: unknown key (did you mean 'source'?)"),
        (
            raw_spec(sink={"mode": "upsert"}),
            "sink.mode: must be one of 'overwrite', 'append', 'merge'",
        ),
        (
            raw_spec(source={"format": "xml"}),
            "source.format: must be one of 'parquet', 'csv', 'jsonl', 'arrow', 'postgresql',"
            " 'sqlite', 'images', 'documents', 'duckdb', 'delta', 'iceberg', 'features',"
            " 'openai-batch', 'kafka'",
        ),
        (raw_spec(run={"executor": "ray2"}), "run.executor: must be one of 'local', 'ray'"),
        (
            raw_spec(errors={"on_bad_input": "ignore"}),
            "errors.on_bad_input: must be one of 'skip', 'fail'",
        ),
        (
            raw_spec(model={"batch_format": "polars"}),
            "model.batch_format: must be one of 'pandas', 'numpy', 'arrow'",
        ),
        (
            raw_spec(model={"outputs": ["prediction", "logits"]}),
            "model.outputs.1: must be one of 'prediction', 'proba'",
        ),
        (
            raw_spec(batch={"size": 0}),
            'batch.size: must be a positive number of rows or "auto", not 0',
        ),
        (raw_spec(run={"workers": 0}), "run.workers: Input should be greater than or equal to 1"),
        (
            raw_spec(run={"max_attempts": -1}),
            "run.max_attempts: Input should be greater than or equal to 1",
        ),
        (
            raw_spec(source={"shard_bytes": 1023}),
            "source.shard_bytes: Input should be greater than or equal to 1024",
        ),
        (
            raw_spec(errors={"max_error_rate": 1.5}),
            "errors.max_error_rate: Input should be less than or equal to 1",
        ),
        (
            raw_spec(errors={"max_error_rate": -0.1}),
            "errors.max_error_rate: Input should be greater than or equal to 0",
        ),
        (
            raw_spec(source={"csv_delimiter": ";;"}),
            "source.csv_delimiter: String should have at most 1 character",
        ),
        (
            raw_spec(batch={"size": "big"}),
            "batch.size: must be a positive number of rows or \"auto\", not 'big'",
        ),
        (
            raw_spec(sink={"keep_columns": ["segment", "prediction"]}),
            "sink.keep_columns: 'prediction' would clash with a prediction column",
        ),
        (
            raw_spec(source={"id_column": "id", "columns": ["x", "id"]}),
            "source.columns: the id column 'id' must not be a model input",
        ),
    ],
)
def test_each_bad_value_names_its_field(raw: dict[str, Any], expected: str) -> None:
    assert problems(raw) == [expected]


@pytest.mark.parametrize("section", ["source", "model", "sink"])
def test_missing_required_section(section: str) -> None:
    raw = raw_spec()
    del raw[section]
    assert problems(raw) == [f"{section}: required"]


@pytest.mark.parametrize(
    ("section", "key"), [("source", "uri"), ("model", "kind"), ("model", "uri")]
)
def test_missing_required_field(section: str, key: str) -> None:
    raw = raw_spec()
    del raw[section][key]
    assert problems(raw) == [f"{section}.{key}: required"]


def test_several_problems_are_all_listed() -> None:
    raw = raw_spec(
        source={"shard_bytes": 10, "colums": ["a"]},
        batch={"size": -5},
        sink={"mode": "merge"},
        errors={"max_error_rate": 7},
    )
    del raw["model"]["kind"]
    found = problems(raw)
    assert sorted(p.split(":")[0] for p in found) == [
        "batch.size",
        "errors.max_error_rate",
        "model.kind",
        "sink.mode",
        "source.colums",
        "source.shard_bytes",
    ]
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    for problem in found:  # the exception's text lists them too, one per line
        assert f"  {problem}" in str(info.value).splitlines()


def test_spec_file_problems_name_fields(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(MINIMAL_TOML.replace('mode = "append"', 'mode = "sideways"\ncolour = 1'))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert sorted(info.value.problems) == [
        "sink.colour: unknown key (check the spelling)",
        "sink.mode: must be one of 'overwrite', 'append', 'merge'",
    ]


# --- format inference ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("data.parquet", "parquet"),
        ("data.pq", "parquet"),
        ("DATA.PARQUET", "parquet"),
        ("in/*.parquet", "parquet"),
        ("data.csv", "csv"),
        ("s3://bucket/in/*.csv", "csv"),
        ("data.csv.gz", "csv"),
        ("data.csv.zst", "csv"),
        ("data.jsonl", "jsonl"),
        ("data.ndjson", "jsonl"),
        ("data.jsonl.bz2", "jsonl"),
        ("in/data.csv/", "csv"),  # a directory named like its files
        ("in/data", None),
        ("in/", None),
        ("data.txt", None),
        ("data.gz", None),
    ],
)
def test_infer_format(uri: str, expected: str | None) -> None:
    assert infer_format(uri) == expected


@pytest.mark.parametrize(
    ("uri", "expected"),
    [("x.parquet", "parquet"), ("x.csv", "csv"), ("x.jsonl", "jsonl"), ("x.csv.gz", "csv")],
)
def test_source_format_is_inferred_from_the_suffix(uri: str, expected: str) -> None:
    assert parse_spec(raw_spec(source={"uri": uri})).source.format == expected


def test_explicit_source_format_wins_over_the_suffix() -> None:
    spec = parse_spec(raw_spec(source={"uri": "x.txt", "format": "csv"}))
    assert spec.source.format == "csv"


@pytest.mark.parametrize("uri", ["data/", "data", "s3://bucket/prefix/"])
def test_source_without_a_suffix_needs_a_format(uri: str) -> None:
    [problem] = problems(raw_spec(source={"uri": uri}))
    assert problem == (
        f"source.format: cannot infer it from {uri!r}; set one of parquet, csv, jsonl, arrow"
    )


@pytest.mark.parametrize(
    ("sink", "expected"),
    [
        ({"uri": "out/"}, "parquet"),
        ({"uri": "out/", "format": "jsonl"}, "jsonl"),
        ({"uri": "out/", "format": "csv"}, "csv"),
        ({"uri": "sqlite:///out.db?table=scores"}, "sqlite"),
        ({"uri": "sqlite:///out.db?table=scores", "format": "sqlite"}, "sqlite"),
        ({"uri": "duckdb:///out.duckdb?table=scores"}, "duckdb"),
    ],
)
def test_sink_format_inference(sink: dict[str, Any], expected: str) -> None:
    assert parse_spec(raw_spec(sink=sink)).sink.format == expected


def test_a_kafka_sink_appends_keyed_by_the_id_and_stages_beside() -> None:
    sink = {"uri": "kafka://127.0.0.1:9092/scores", "staging": "/var/thresher/scores"}
    raw = raw_spec(sink=sink)
    del raw["sink"]["mode"]
    spec = parse_spec(raw)
    assert (spec.sink.format, spec.sink.mode) == ("kafka", "append")  # a topic only appends
    assert spec.sink.options["key"] == "customer_id"  # the source's id column
    assert problems(raw_spec(sink={**sink, "mode": "overwrite"})) == [
        "sink.mode: the kafka sink does not write mode 'overwrite'; use one of 'append'"
    ]
    assert problems(raw_spec(sink={**sink, "options": {"transactional": "maybe"}})) == [
        "sink.options.transactional: Input should be a valid boolean, unable to interpret input"
    ]


def test_a_kafka_sink_after_a_kafka_source_keys_by_the_message_key() -> None:
    source = {"uri": "kafka://h:9092/orders", "format": "kafka", "options": {"group": "g"}}
    spec = parse_spec(raw_spec(source=source, sink={"uri": "kafka://h:9092/scores"}))
    assert spec.sink.options["key"] == "kafka_key"
    assert spec.sink.keep_columns == ["kafka_key"]
    assert spec.source.options["metadata"] == ["key"]  # read, so the output can carry it
    raw = raw_spec(sink={"uri": "kafka://h:9092/a,b"})
    assert problems(raw) == [
        "sink.uri: 'kafka://h:9092/a,b' is not kafka://host:port[,host:port]/topic"
    ]


def test_sqlite_uri_with_a_file_format_is_an_error() -> None:
    raw = raw_spec(sink={"uri": "sqlite:///out.db?table=t", "format": "csv"})
    assert problems(raw) == ["sink.format: a sqlite:// uri writes a table, not csv"]


def test_sqlite_format_without_a_sqlite_uri_is_an_error() -> None:
    raw = raw_spec(sink={"uri": "out/", "format": "sqlite"})
    assert problems(raw) == ["sink.uri: a sqlite sink needs sqlite:///path/file.db?table=name"]


# --- --set overrides -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "path", "expected"),
    [
        ("batch.size=8", ("batch", "size"), 8),
        ("errors.max_error_rate=0.25", ("errors", "max_error_rate"), 0.25),
        ("sink.force=true", ("sink", "force"), True),
        ("model.trust=false", ("model", "trust"), False),
        ('sink.keep_columns=["a", "b"]', ("sink", "keep_columns"), ["a", "b"]),
        ("sink.keep_columns=[]", ("sink", "keep_columns"), []),
        ('job.name="quoted name"', ("job", "name"), "quoted name"),
        ("job.name=bare", ("job", "name"), "bare"),
        ("sink.uri=s3://bucket/out/", ("sink", "uri"), "s3://bucket/out/"),
        ("source.uri=data/*.csv", ("source", "uri"), "data/*.csv"),
        ("job.name=a=b", ("job", "name"), "a=b"),
        ("job.name=", ("job", "name"), ""),
        (" batch.size =16", ("batch", "size"), 16),
        ("job.name= spaced ", ("job", "name"), "spaced"),
        ("model.options.alpha=0.5", ("model", "options", "alpha"), 0.5),
        ("model.options.inner.depth=3", ("model", "options", "inner", "depth"), 3),
    ],
)
def test_apply_override_values(item: str, path: tuple[str, ...], expected: Any) -> None:
    raw = raw_spec()
    apply_override(raw, item)
    node: Any = raw
    for part in path:
        node = node[part]
    assert node == expected
    assert type(node) is type(expected)


def test_apply_override_creates_missing_sections_and_keeps_siblings() -> None:
    raw = raw_spec()
    apply_override(raw, "errors.on_bad_input=fail")
    apply_override(raw, "batch.size=64")
    assert raw["errors"] == {"on_bad_input": "fail"}
    assert raw["batch"] == {"size": 64}
    assert raw["source"] == MINIMAL["source"]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("batch.size", "--set batch.size: expected section.key=value"),
        ("size=3", "--set size=3: expected section.key=value"),
        ("=3", "--set =3: expected section.key=value"),
        ("batch..size=3", "--set batch..size=3: expected section.key=value"),
        (".size=3", "--set .size=3: expected section.key=value"),
        ("batch.=3", "--set batch.=3: expected section.key=value"),
        ("batch.size.x=1", "--set batch.size.x=1: size is not a section"),
    ],
)
def test_malformed_overrides(item: str, expected: str) -> None:
    raw = raw_spec()
    before = copy.deepcopy(raw)
    with pytest.raises(SpecError) as info:
        apply_override(raw, item)
    assert info.value.problems == [expected]
    assert raw == before


def test_load_spec_applies_overrides_before_validating(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(MINIMAL_TOML)
    spec = load_spec(
        path,
        [
            "batch.size=32",
            "run.workers=7",
            "sink.mode=overwrite",
            "sink.keep_columns=['segment']",
            "source.uri=other/*.csv",
            "job.name=2024",
        ],
    )
    assert spec.batch.size == 32
    assert spec.run.workers == 7
    assert spec.sink.mode == "overwrite"
    assert spec.sink.keep_columns == ["segment"]
    assert spec.job.name == "2024"
    # an overridden path is still resolved against the spec's folder, and its format inferred
    assert spec.source.uri == str(tmp_path / "other/*.csv")
    assert spec.source.format == "csv"


def test_load_spec_override_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(MINIMAL_TOML)
    with pytest.raises(SpecError) as info:
        load_spec(path, ["batch.size=0", "sink.mode=merge", "run.wokers=2"])
    assert sorted(info.value.problems) == [
        'batch.size: must be a positive number of rows or "auto", not 0',
        "run.wokers: unknown key (did you mean 'workers'?)",
        "sink.mode: the parquet sink does not write mode 'merge'; use one of 'overwrite', 'append'",
    ]
    with pytest.raises(SpecError) as info:
        load_spec(path, ["batch"])
    assert info.value.problems == ["--set batch: expected section.key=value"]


# --- relative paths ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "relative"),
    [
        ("data/x.parquet", "data/x.parquet"),
        ("x.csv", "x.csv"),
        ("in/*.jsonl", "in/*.jsonl"),
        ("model.py:Scorer", "model.py:Scorer"),
        ("lib/model.py:Scorer", "lib/model.py:Scorer"),
    ],
)
def test_relative_paths_resolve_against_the_spec_folder(uri: str, relative: str) -> None:
    base = Path("/jobs/nightly")
    resolved = resolve_uri(uri, base)
    assert resolved == f"/jobs/nightly/{relative}"


def test_parent_folders_are_normalised() -> None:
    assert resolve_uri("../shared/x.csv", Path("/jobs/nightly")) == "/jobs/shared/x.csv"


def test_trailing_slash_is_kept() -> None:
    assert resolve_uri("out/", Path("/jobs")) == "/jobs/out/"
    assert resolve_uri("out", Path("/jobs")) == "/jobs/out"


@pytest.mark.parametrize(
    "uri",
    [
        "pkg.models:Scorer",
        "scorer:Model",
        "/abs/data.parquet",
        "/abs/out/",
        "/abs/model.py:Scorer",
        "s3://bucket/in/",
        "gs://bucket/in/*.parquet",
        "https://example.com/model.onnx",
        "sqlite:////abs/out.db?table=t",
    ],
)
def test_absolute_paths_urls_and_modules_are_untouched(uri: str) -> None:
    assert resolve_uri(uri, Path("/jobs")) == uri


def test_relative_sqlite_uri_resolves_against_the_spec_folder(tmp_path: Path) -> None:
    resolved = resolve_uri("sqlite:///rel.db?table=t", tmp_path)
    assert resolved.startswith("sqlite:////")
    assert resolved.endswith("/rel.db?table=t")
    path = resolved.removeprefix("sqlite:///").removesuffix("?table=t")
    assert Path(path).resolve() == (tmp_path / "rel.db").resolve()


def test_load_spec_resolves_every_uri(tmp_path: Path) -> None:
    path = tmp_path / "jobs" / "job.yaml"
    path.parent.mkdir()
    raw = raw_spec(
        source={"uri": "in/", "format": "csv"},
        model={"kind": "python", "uri": "scorer.py:Scorer"},
        sink={"uri": "sqlite:///results.db?table=scores"},
    )
    path.write_text(yaml.safe_dump(raw))
    spec = load_spec(path)
    assert spec.source.uri == f"{tmp_path}/jobs/in/"
    assert spec.model.uri == f"{tmp_path}/jobs/scorer.py:Scorer"
    db = spec.sink.uri.removeprefix("sqlite:///").removesuffix("?table=scores")
    assert Path(db).resolve() == (tmp_path / "jobs" / "results.db").resolve()
    assert spec.sink.format == "sqlite"


def test_load_spec_leaves_module_paths_and_urls(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    raw = raw_spec(
        source={"uri": "s3://bucket/in/*.parquet"},
        model={"kind": "python", "uri": "acme.scoring:Model"},
        sink={"uri": "s3://bucket/out/"},
    )
    path.write_text(json.dumps(raw))
    spec = load_spec(path)
    assert spec.source.uri == "s3://bucket/in/*.parquet"
    assert spec.model.uri == "acme.scoring:Model"
    assert spec.sink.uri == "s3://bucket/out/"


def test_parse_spec_does_not_resolve_paths() -> None:
    spec = parse_spec(raw_spec())
    assert spec.source.uri == "data/customers.parquet"
    assert spec.sink.uri == "out/"


@pytest.mark.parametrize(
    ("text", "expected"), [("512MB", 512_000_000), ("2GiB", 2 * 2**30), ("1024", 1024)]
)
def test_batch_max_memory_takes_sizes_with_units(text: str, expected: int) -> None:
    spec = parse_spec(raw_spec(batch={"max_memory": text}))
    assert spec.batch.max_memory == expected


@pytest.mark.parametrize(
    "text", ["1e400GB", "inf", "nan", "-5MB", "99999999999999999999GB", "1.5.2MB", "1 2MB"]
)
def test_a_size_past_what_a_number_holds_is_a_spec_error_naming_its_field(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(raw_spec(batch={"max_memory": text}))
    assert caught.value.problems[0].startswith("batch.max_memory: ")


@pytest.mark.parametrize("value", ["yes", "true", "1", 1, "on"])
def test_trust_is_true_only_when_it_says_true(value: object) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(raw_spec(model={"kind": "sklearn", "uri": "m.skops", "trust": value}))
    assert caught.value.problems[0].startswith("model.trust: ")
    assert parse_spec(raw_spec(model={"kind": "sklearn", "uri": "m", "trust": True})).model.trust


@pytest.mark.parametrize("priority", [2**63, -(2**63) - 1])
def test_a_priority_the_store_cannot_hold_is_a_spec_error(priority: int) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(raw_spec(job={"priority": priority}))
    assert caught.value.problems[0].startswith("job.priority: ")


def test_the_cli_names_a_size_too_large_to_read(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from thresher.cli import cli

    in_file, plain = tmp_path / "in-file.toml", tmp_path / "plain.toml"
    in_file.write_text(MINIMAL_TOML.replace("size = 512", 'size = 512\nmax_memory = "1e400GB"'))
    plain.write_text(MINIMAL_TOML)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    for args in ([str(in_file)], [str(plain), "--set", "batch.max_memory=1e400GB"]):
        result = CliRunner().invoke(cli, ["--store", store, "run", *args])
        assert result.exit_code == 2, result.output
        assert "batch.max_memory" in result.output and "Traceback" not in result.output
