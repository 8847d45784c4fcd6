"""A misspelt spec key or column names the one it looks like ("did you mean"), wherever
a spec is checked: a job file, a plug-in's options, a server config, a `POST /v1/jobs`
body, an input's columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thresher.errors import SpecError
from thresher.plan.inputs import check_features, plan_input
from thresher.service.config import ConfigError, read_config
from thresher.service.errors import Unprocessable
from thresher.service.submission import parse_request
from thresher.spec import parse_spec

pytestmark = pytest.mark.unit


def spec(**sections: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "source": {"uri": "in.parquet"},
        "model": {"kind": "sklearn", "uri": "model.skops"},
        "sink": {"uri": "out/"},
    }
    for name, section in sections.items():
        raw[name] = {**raw.get(name, {}), **section}
    return raw


def problems_of(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as refused:
        parse_spec(raw)
    return refused.value.problems


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            spec(source={"id_colum": "id"}),
            "source.id_colum: unknown key (did you mean 'id_column'?)",
        ),
        (spec(sorce={}), "sorce: unknown key (did you mean 'source'?)"),
        (spec(batch={"sise": 3}), "batch.sise: unknown key (did you mean 'size'?)"),
        (
            spec(sink={"keep_colums": []}),
            "sink.keep_colums: unknown key (did you mean 'keep_columns'?)",
        ),
        (spec(monitor={"baselin": "x"}), "monitor.baselin: unknown key (did you mean 'baseline'?)"),
        (spec(source={"xyzzy": 1}), "source.xyzzy: unknown key (check the spelling)"),
    ],
)
def test_a_misspelt_key_names_the_key_it_looks_like(raw: dict[str, Any], expected: str) -> None:
    assert expected in problems_of(raw)


def test_a_plugins_option_names_the_option_it_looks_like() -> None:
    raw = spec(source={"uri": "table/", "format": "delta", "options": {"versoin": 3}})
    assert "source.options.versoin: unknown key (did you mean 'version'?)" in problems_of(raw)


def test_a_server_config_and_a_job_body_name_the_key_they_look_like(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text('max_concurent_jobs = 2\n[models.m]\nkind = "sklearn"\nurii = "m.skops"\n')
    with pytest.raises(ConfigError) as refused:
        read_config(config)
    said = str(refused.value)
    assert "max_concurent_jobs: unknown key (did you mean 'max_concurrent_jobs'?)" in said
    assert "models.m.urii: unknown key (did you mean 'uri'?)" in said
    with pytest.raises(Unprocessable) as unprocessable:
        parse_request({"input_file_id": "file-1", "model": "m", "colums": ["a"]})
    assert "colums: unknown key (did you mean 'columns'?)" in unprocessable.value.detail


def test_a_misspelt_column_names_the_column_it_looks_like(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"customer_id": [1], "income": [2.0], "age": [3]}), tmp_path / "in.parquet"
    )
    raw = spec(source={"uri": str(tmp_path / "in.parquet"), "id_column": "custmer_id",
                       "columns": ["incme", "age", "zzz"]})  # fmt: skip
    parsed = parse_spec(raw)
    with pytest.raises(SpecError) as refused:
        check_features(parsed, plan_input(parsed))
    id_problem, columns_problem = refused.value.problems
    assert id_problem.startswith(
        "source.id_column: no column 'custmer_id' (did you mean 'customer_id'?; the input has 3"
    ), id_problem
    assert columns_problem.startswith(
        "source.columns: no 2 columns, e.g. 'incme', 'zzz' (did you mean 'income' for 'incme'?;"
    ), columns_problem
