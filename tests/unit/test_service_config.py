"""The service's server config and its allowed-roots rule, without a server."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from thresher.service.config import ConfigError, load_config, read_config
from thresher.service.errors import BadRequest, Forbidden
from thresher.service.policies.roots import check_source_uri
from thresher.service.schedules import check_schedules


def test_a_config_resolves_paths_and_keeps_a_generated_secret(tmp_path: Path) -> None:
    config_file = tmp_path / "server.toml"
    config_file.write_text(
        'data_dir = "data"\nallowed_roots = ["shared", "s3://bucket/in/"]\n'
        '[models.m]\nkind = "python"\nuri = "m.py:M"\n[buffer.m]\nmax_records = 10\n'
    )
    config = load_config(config_file)
    assert config.data_dir == tmp_path / "data" and config.data_dir.is_dir()
    assert config.allowed_roots == [str(tmp_path / "shared"), "s3://bucket/in/"]
    assert config.models["m"].uri == f"{tmp_path / 'm.py'}:M"
    assert (config.buffer["m"].max_records, config.buffer["m"].max_wait) == (10, 300.0)
    assert (config.max_upload_bytes, config.max_concurrent_jobs) == (1024**3, 1)
    secret_file = tmp_path / "data" / "webhook_secret"
    assert config.webhook_secret == secret_file.read_text()
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert load_config(config_file).webhook_secret == config.webhook_secret  # kept


def test_a_schedules_relative_source_resolves_against_the_configs_folder(
    tmp_path: Path,
) -> None:
    """As the README says of every relative path in the config; a schedule's job's
    `source.uri` was left relative, so refused as outside `allowed_roots`."""
    (tmp_path / "m.py").write_text("class M:\n    def predict(self, b):\n        return b\n")
    config_file = tmp_path / "server.toml"
    config_file.write_text(
        'allowed_roots = ["shared"]\n[models.m]\nkind = "python"\nuri = "m.py:M"\n'
        '[schedules.nightly]\ncron = "30 2 * * *"\ntenant = "acme"\n'
        'job = { model = "m", source = { uri = "shared/{date}/" } }\n'
    )
    config = read_config(config_file)
    check_schedules(config)  # refused before: "outside the paths this job may read"
    assert config.schedules["nightly"].job["source"]["uri"] == f"{tmp_path}/shared/{{date}}/"


def test_a_bad_config_names_each_key(tmp_path: Path) -> None:
    config_file = tmp_path / "server.toml"
    config_file.write_text('max_concurent_jobs = 2\nmax_upload_bytes = 0\n[models."a b"]\n')
    with pytest.raises(ConfigError) as caught:
        load_config(config_file)
    text = str(caught.value)
    assert "max_concurent_jobs: unknown key" in text
    assert "max_upload_bytes" in text and "models" in text


def test_only_paths_really_under_an_allowed_root_are_readable(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside.csv"
    root.mkdir()
    outside.write_text("a\n1\n")
    (root / "in.csv").write_text("a\n1\n")
    (root / "out.csv").symlink_to(outside)
    roots = [str(root)]
    assert check_source_uri(str(root / "in.csv"), roots) == str(root / "in.csv")
    assert check_source_uri(f"file://{root}/in.csv", roots) == str(root / "in.csv")
    for uri in (
        str(outside),
        f"{root}/../outside.csv",
        str(root / "out.csv"),
        str(root),
        f"{root}/*.csv",
    ):
        with pytest.raises(Forbidden, match="outside the paths"):
            check_source_uri(uri, roots)
    with pytest.raises(BadRequest, match="not an absolute path"):
        check_source_uri("root/in.csv", roots)
    with pytest.raises(Forbidden, match="allowed_roots is empty"):
        check_source_uri(str(root / "in.csv"), [])


def test_url_roots_admit_urls_under_their_prefix_only() -> None:
    roots = ["s3://bucket/shared"]
    assert check_source_uri("s3://bucket/shared/x.parquet", roots) == "s3://bucket/shared/x.parquet"
    for uri in ("s3://bucket/shared-not/x", "s3://bucket/shared/../private/x", "s3://other/x"):
        with pytest.raises(Forbidden):
            check_source_uri(uri, roots)
