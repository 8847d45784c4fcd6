"""Validation that computes: a value a tenant (or the operator's config) gives is refused
at the door with a 4xx naming its field when it could only fail later — a cron with no
fire time, a string that cannot be written as UTF-8, a path with a NUL, a time zone the
zone database cannot open, a webhook the server would not call — and what is already
stored that way is shown with its error, never a 500. Answers say the same whether or not
a server path exists, and name an upload by its id, not its path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from thresher.openai.lines import prepare_lines
from thresher.schedules import Cron, CronError, ticks
from thresher.schedules.settings import ScheduleSettings
from thresher.service.app import create_app
from thresher.service.config import ConfigError, ServerConfig, prepare
from thresher.service.policies.auth import create_token
from thresher.service.schedules import check_schedules
from thresher.service.state import ServiceState
from thresher.service.triggers import check_triggers
from thresher.spec import ModelSection
from thresher.store import open_store
from thresher.texts import first_unencodable

pytestmark = pytest.mark.unit

MODEL = "class M:\n    def predict(self, batch):\n        return {'prediction': batch['x']}\n"
NEVER = "0 0 31 2 *"  # 31 February: croniter.is_valid says yes
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


class Site:
    """A server's app in this process (no background threads) with tenant `acme`."""

    def __init__(self, tmp_path: Path, **config: Any) -> None:
        (tmp_path / "m.py").write_text(MODEL)
        self.shared = tmp_path / "shared"
        self.shared.mkdir()
        (self.shared / "in.jsonl").write_text('{"id": 1, "x": 1.0}\n')
        self.config = prepare(
            ServerConfig(
                data_dir=tmp_path / "data",
                models={"m": ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")},
                allowed_roots=[str(self.shared)],
                **config,
            )
        )
        store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
        self.state = ServiceState(store=store, config=self.config, data_dir=self.config.data_dir)
        self.token = create_token(store, "acme")
        self.client = TestClient(
            create_app(self.state, background=False), raise_server_exceptions=False
        )

    def job(self, **fields: Any) -> dict[str, Any]:
        return {"model": "m", "source": {"uri": str(self.shared / "in.jsonl")}, **fields}

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """A request with `body` as JSON text exactly as `json.dumps` writes it (so a lone
        surrogate goes as its `\\ud800` escape, as a client would send it)."""
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        content = None if body is None else json.dumps(body)
        return self.client.request(method, path, content=content, headers=headers, **kw)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    made = Site(tmp_path)
    with made.client:
        yield made


# --- cron schedules: a fire time must exist, within a bound ---------------------------


def test_a_cron_with_no_fire_time_has_none_and_never_raises() -> None:
    cron = Cron(NEVER)
    assert cron.after(T0, 3) == []
    assert cron.between(T0, T0 + timedelta(days=3660)) == []
    with pytest.raises(CronError, match=r"cron: .* no fire time in the next 5 years"):
        cron.check_fires(T0)
    leap = Cron("0 0 29 2 *")  # every four years: within the bound
    leap.check_fires(T0)
    assert leap.after(T0, 1) == [datetime(2028, 2, 29, tzinfo=UTC)]


def test_a_schedule_that_never_fires_is_a_422_naming_cron(site: Site) -> None:
    body = {"name": "never", "cron": NEVER, "job": site.job()}
    made = site.call("POST", "/v1/schedules", body)
    assert made.status_code == 422, made.text
    assert "cron" in made.text and "no fire time" in made.text
    body = {"name": "nightly", "cron": "0 2 * * *", "job": site.job()}
    assert site.call("POST", "/v1/schedules", body).status_code == 201
    changed = site.call("PATCH", "/v1/schedules/nightly", {"cron": NEVER})
    assert changed.status_code == 422, changed.text
    assert "no fire time" in changed.text


def test_a_config_schedule_that_never_fires_stops_serve_naming_it(tmp_path: Path) -> None:
    job = {"model": "m", "source": {"uri": str(tmp_path / "shared" / "in.jsonl")}}
    site = Site(tmp_path, schedules={"feb31": {"cron": NEVER, "tenant": "acme", "job": job}})
    with pytest.raises(ConfigError, match=r"schedules\.feb31\.cron: .* no fire time"):
        check_schedules(site.config)


def test_a_stored_schedule_that_never_fires_is_listed_with_its_error(site: Site) -> None:
    # What an earlier server let in stays in the store: the listings show it, they do
    # not fail on it (a 500 would hide every other schedule of the tenant).
    good = {"name": "nightly", "cron": "0 2 * * *", "job": site.job()}
    assert site.call("POST", "/v1/schedules", good).status_code == 201
    stored = ScheduleSettings(cron=NEVER, tenant="acme", job=site.job())
    site.state.store.schedules.create("acme", "feb31", stored.model_dump_json())
    listed = site.call("GET", "/v1/schedules")
    assert listed.status_code == 200, listed.text
    by_name = {s["name"]: s for s in listed.json()["data"]}
    assert by_name["nightly"]["error"] is None and len(by_name["nightly"]["next_fire_times"]) == 5
    assert by_name["feb31"]["next_fire_times"] == []
    assert "no fire time" in by_name["feb31"]["error"]
    assert site.call("GET", "/v1/schedules/feb31").json()["error"] == by_name["feb31"]["error"]


def test_a_time_zone_the_zone_database_cannot_open_is_a_422(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the tzdata package installed, a 256-character key is opened as a file name
    # and fails with OSError (ENAMETOOLONG), not ZoneInfoNotFoundError.
    def too_long(key: str) -> Any:
        raise OSError(36, "File name too long", key)

    monkeypatch.setattr(ticks, "ZoneInfo", too_long)
    body = {"name": "tz", "cron": "0 2 * * *", "timezone": "Europe/Berlin", "job": site.job()}
    made = site.call("POST", "/v1/schedules", body)
    assert made.status_code == 422, made.text
    assert "timezone" in made.text
    body = {"name": "tz", "cron": "0 2 * * *", "timezone": "a" * 256, "job": site.job()}
    long = site.call("POST", "/v1/schedules", body)
    assert long.status_code == 422 and "a" * 256 not in long.text  # not echoed


# --- strings that must be encodable, checked at the line ------------------------------


def test_first_unencodable_names_where_a_lone_surrogate_is() -> None:
    assert first_unencodable({"a": ["ok", "é", "😀"]}) is None
    assert first_unencodable({"custom_id": "\ud800"}) == "custom_id"
    assert first_unencodable({"body": {"input": ["x", "y\udfff"]}}) == "body.input[1]"
    assert first_unencodable({"body": {"\ud800": 1}}) == "body"  # a key


def test_a_batch_line_with_a_string_that_cannot_be_written_is_a_problem_of_its_line(
    tmp_path: Path,
) -> None:
    # Valid JSON (an escaped lone surrogate), but no UTF-8 file can hold it: the results
    # writer would raise at the end. It is refused now, with its line and field.
    good = {"custom_id": "a", "method": "POST", "url": "/v1/embeddings",
            "body": {"model": "m", "input": "x"}}  # fmt: skip
    lines = [good, {**good, "custom_id": "\ud800"},
             {**good, "custom_id": "c", "body": {"model": "m", "input": ["\udc00"]}}]  # fmt: skip
    source = tmp_path / "batch.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = prepare_lines(source, tmp_path / "rows.jsonl", "/v1/embeddings", {"m": "x"}, (9, 10**6))
    problems = [(p.code, p.line, p.param) for p in found.problems]
    assert problems == [("invalid_input", 2, "custom_id"), ("invalid_input", 3, "body.input[0]")]
    assert not (tmp_path / "rows.jsonl").exists()


# --- every input that reached a 500 gets a 4xx -----------------------------------------


def test_a_nul_in_a_triggers_watch_or_pattern_is_a_422(site: Site) -> None:
    for field, value in (("watch", f"{site.shared}/a\x00b"), ("pattern", "*\x00"),
                         ("marker", "_\x00")):  # fmt: skip
        body = {"name": "t", "watch": str(site.shared), "job": {"model": "m"}, field: value}
        made = site.call("POST", "/v1/triggers", body)
        assert made.status_code == 422, (field, made.text)
        assert field in made.text


def test_a_triggers_webhook_is_checked_when_it_is_made(tmp_path: Path) -> None:
    job = {"model": "m", "notify": {"webhook": "http://127.0.0.1:9/hook"}}
    inbox = {"watch": str(tmp_path / "shared"), "tenant": "acme", "job": job}
    site = Site(tmp_path, triggers={"inbox": inbox})
    with pytest.raises(ConfigError, match=r"triggers\.inbox\.job\.notify\.webhook"):
        check_triggers(site.config)
    with site.client:
        body = {"name": "t", "watch": str(site.shared), "job": job}
        made = site.call("POST", "/v1/triggers", body)
    assert made.status_code == 422, made.text
    assert "job.notify.webhook" in made.text and "loopback" in made.text


# --- what an answer tells about the server ---------------------------------------------


def test_source_files_answers_alike_for_a_path_outside_that_exists_and_one_that_does_not(
    site: Site,
) -> None:
    answers = [
        site.call("POST", "/v1/jobs", {"model": "m", "source": {"files": [path]}})
        for path in ("/etc/passwd", "/etc/no-such-file")
    ]
    assert [a.status_code for a in answers] == [403, 403], [a.text for a in answers]
    texts = [a.json()["detail"] for a in answers]
    assert texts[0].replace("/etc/passwd", "X") == texts[1].replace("/etc/no-such-file", "X")


def test_an_uploads_unreadable_records_are_named_by_its_id_not_its_path(site: Site) -> None:
    headers = {"Authorization": f"Bearer {site.token}"}
    files = {"file": ("bad.jsonl", b"not json at all\n" * 5)}
    up = site.client.post("/v1/files", headers=headers, files=files, data={"purpose": "user_data"})
    assert up.status_code == 201, up.text
    file_id = up.json()["id"]
    made = site.call("POST", "/v1/jobs", {"model": "m", "input_file_id": file_id})
    assert made.status_code == 422, made.text
    assert file_id in made.text
    assert str(site.state.data_dir) not in made.text and "/uploads/" not in made.text
