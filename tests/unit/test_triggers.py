"""Which new files make a complete set (a fake listing, a fake clock), and the watcher
over a real store, a real folder and the real submission path: every file in exactly
one job, through settling, markers, changed files, a watcher that died halfway, two
watchers on one store and a recorded reset."""

from __future__ import annotations

import dataclasses
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from thresher.service import submission
from thresher.service.background.watcher import Watcher, job_body
from thresher.service.config import ConfigError, ServerConfig, prepare
from thresher.service.errors import Forbidden
from thresher.service.state import ServiceState
from thresher.service.triggers import check_triggers
from thresher.spec import ModelSection
from thresher.store import (
    SetOutcome,
    TakenFile,
    TriggerLedger,
    open_store,
    set_job_key,
)
from thresher.triggers import FileSeen, Settling, TriggerSettings, complete_sets, list_watch
from thresher.triggers import taken as taken_module
from thresher.triggers.taken import TakenFiles

MODEL = "class M:\n    def predict(self, batch):\n        return {'prediction': batch['x']}\n"
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def after(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rule(**settings: Any) -> TriggerSettings:
    return TriggerSettings.model_validate(
        {"watch": "/in", "tenant": "t", "job": {"model": "m"}, **settings}
    )


def paths(sets: list[Any]) -> list[tuple[str, ...]]:
    return [s.paths for s in sets]


def test_a_set_waits_until_nothing_was_added_or_changed_for_settle_seconds() -> None:
    memory, settled = Settling(), rule(settle_seconds=10, pattern="*.csv")
    a, growing = FileSeen("/in/a.csv", 10, "1"), FileSeen("/in/b.csv", 5, "1")
    assert complete_sets([a, growing], {}, settled, memory, T0) == []
    grown = FileSeen("/in/b.csv", 50, "2")  # still being written: size and mtime change
    assert complete_sets([a, grown], {}, settled, memory, after(8)) == []
    assert complete_sets([a, grown], {}, settled, memory, after(17)) == []
    others = [FileSeen("/in/c.json", 1, "1"), FileSeen("/in/_tmp/d.csv", 1, "1")]
    found = complete_sets([a, grown, *others], {}, settled, memory, after(18))
    assert paths(found) == [("/in/a.csv", "/in/b.csv")]  # not the pattern, not hidden


def test_files_taken_before_are_not_new_unless_changed_with_reprocess_changed() -> None:
    a, b = FileSeen("/in/a.csv", 10, "1"), FileSeen("/in/b.csv", 10, "1")
    changed = FileSeen("/in/a.csv", 12, "2")
    taken = {"/in/a.csv": {(10, "1")}}
    for reprocess, expected in ((False, [("/in/b.csv",)]), (True, [("/in/a.csv", "/in/b.csv")])):
        memory, settings = Settling(), rule(settle_seconds=0, reprocess_changed=reprocess)
        assert paths(complete_sets([changed, b], taken, settings, memory, T0)) == expected
    memory = Settling()
    assert complete_sets([a], taken, rule(settle_seconds=0), memory, T0) == []


def test_a_marker_completes_its_folders_files_alone() -> None:
    memory, marked = Settling(), rule(marker="_SUCCESS", pattern="*.jsonl")
    files = [
        FileSeen("/in/day=1/a.jsonl", 3, "1"),
        FileSeen("/in/day=1/b.jsonl", 3, "1"),
        FileSeen("/in/day=1/_SUCCESS", 0, "1"),
        FileSeen("/in/day=2/c.jsonl", 3, "1"),  # no marker yet
    ]
    (found,) = complete_sets(files, {}, marked, memory, T0)
    assert found.paths == ("/in/day=1/a.jsonl", "/in/day=1/b.jsonl")
    assert [m.path for m in found.markers] == ["/in/day=1/_SUCCESS"]
    assert found.key(0) == found.key(0) != found.key(1)  # a reset makes new sets


def test_a_marker_with_settle_seconds_waits_for_its_files_to_stop_changing() -> None:
    memory, marked = Settling(), rule(marker="*.done", settle_seconds=5)
    done = FileSeen("/in/x.done", 0, "1")
    assert complete_sets([FileSeen("/in/a.csv", 1, "1"), done], {}, marked, memory, T0) == []
    later = [FileSeen("/in/a.csv", 9, "2"), done]
    assert complete_sets(later, {}, marked, memory, after(5)) == []
    assert paths(complete_sets(later, {}, marked, memory, after(10))) == [("/in/a.csv",)]


def test_the_local_listing_walks_subfolders_and_sees_changes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.csv").write_text("x\n1\n")
    (tmp_path / "b.csv").write_text("x\n")
    seen = {f.path: f for f in list_watch(str(tmp_path))}
    assert sorted(seen) == [str(tmp_path / "b.csv"), str(tmp_path / "sub" / "a.csv")]
    assert seen[str(tmp_path / "b.csv")].size == 2
    assert list(list_watch(str(tmp_path / "not-there"))) == []


def site(tmp_path: Path, **trigger: Any) -> ServiceState:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "m.py").write_text(MODEL)
    inbox = tmp_path / "shared" / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    settings = {"watch": str(inbox), "pattern": "*.jsonl", "settle_seconds": 10}
    job = {"model": "m", "id_column": "id"}
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            models={"m": ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")},
            allowed_roots=[str(tmp_path / "shared")],
            triggers={"inbox": {"tenant": "acme", "job": job, **settings, **trigger}},
        )
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    return ServiceState(store=store, config=config, data_dir=config.data_dir)


def arrive(state: ServiceState, name: str, ids: range) -> Path:
    path = Path(state.config.triggers["inbox"].watch) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"id": {i}, "x": {i}.0}}\n' for i in ids))
    return path


def watcher(state: ServiceState) -> Watcher:
    return Watcher(state, lambda tenant, body, key: submission.submit_job(state, tenant, body, key))


def job_files(state: ServiceState) -> list[list[str]]:
    return sorted([Path(f).name for f in j.spec.source.files] for j in state.store.jobs(100))


def test_each_file_is_in_one_job_as_files_keep_arriving(tmp_path: Path) -> None:
    state = site(tmp_path)
    w = watcher(state)
    arrive(state, "a.jsonl", range(3))
    arrive(state, "b.jsonl", range(3, 5))
    w.look(T0)
    assert job_files(state) == []  # just seen: not settled yet
    w.look(after(11))
    w.look(after(30))  # nothing new: no new job
    arrive(state, "c.jsonl", range(5, 9))
    w.look(after(40))
    w.look(after(55))
    assert job_files(state) == [["a.jsonl", "b.jsonl"], ["c.jsonl"]]
    (job, *_) = state.store.jobs(100)
    assert job.tenant == "acme" and job.name.startswith("inbox@")
    assert state.store.triggers.files_seen() == {"inbox": 3}


def test_polling_waits_poll_seconds_between_looks(tmp_path: Path) -> None:
    state = site(tmp_path, settle_seconds=0, poll_seconds=60)
    w = watcher(state)
    w.look(T0)
    arrive(state, "a.jsonl", range(3))
    w.look(after(30))  # not due yet
    assert job_files(state) == []
    w.look(after(60))
    assert job_files(state) == [["a.jsonl"]]


def test_a_watcher_that_died_after_queueing_is_finished_with_the_same_job(
    tmp_path: Path,
) -> None:
    state = site(tmp_path)
    path = arrive(state, "a.jsonl", range(3))
    ledger, stat = state.store.triggers, path.stat()
    taken = TakenFile(str(path), stat.st_size, str(stat.st_mtime_ns))
    assert ledger.claim("inbox", "k1", [taken], "gone:1")
    body = job_body("inbox", state.config.triggers["inbox"], "k1", [str(path)])
    first = submission.submit_job(state, "acme", body, set_job_key("inbox", "k1"))
    # ... and it died here: the set claimed, its job queued, neither recorded.
    for seconds in (0, 20, 40):
        watcher(state).look(after(seconds))  # a new watcher each time: restarts
    (record,) = ledger.recent("inbox")
    assert (record.outcome, record.job_id) == (SetOutcome.STARTED, first)
    assert job_files(state) == [["a.jsonl"]]


def test_two_watchers_on_one_store_take_each_file_once(tmp_path: Path) -> None:
    state = site(tmp_path, settle_seconds=0)
    other = ServiceState(
        store=open_store(state.store.url), config=state.config, data_dir=state.data_dir
    )
    arrive(state, "a.jsonl", range(3))
    watcher(state).look(T0)
    watcher(other).look(T0)
    assert job_files(state) == [["a.jsonl"]]
    ledger = state.store.triggers
    assert not ledger.claim("inbox", "other", [TakenFile(*_identity(state, "a.jsonl"))], "x")
    assert len(ledger.recent("inbox")) == 1  # the losing claim left nothing behind


def _identity(state: ServiceState, name: str) -> tuple[str, int, str]:
    stat = (Path(state.config.triggers["inbox"].watch) / name).stat()
    path = str(Path(state.config.triggers["inbox"].watch) / name)
    return path, stat.st_size, str(stat.st_mtime_ns)


def test_a_changed_file_triggers_again_only_with_reprocess_changed(tmp_path: Path) -> None:
    for reprocess, expected in ((False, 1), (True, 2)):
        state = site(tmp_path / str(reprocess), settle_seconds=0, reprocess_changed=reprocess)
        w = watcher(state)
        path = arrive(state, "a.jsonl", range(3))
        w.look(T0)
        arrive(state, "a.jsonl", range(4))
        os.utime(path, ns=(1, 10**18))  # a new mtime, whatever the clock's grain
        w.look(after(20))
        assert len(job_files(state)) == expected


def test_a_reset_is_recorded_and_takes_the_files_again_in_a_new_job(tmp_path: Path) -> None:
    state = site(tmp_path, settle_seconds=0)
    arrive(state, "a.jsonl", range(3))
    watcher(state).look(T0)
    ledger = state.store.triggers
    assert ledger.reset("inbox", T0 - timedelta(days=1), "ops@host") == 1
    watcher(state).look(after(20))
    assert job_files(state) == [["a.jsonl"], ["a.jsonl"]]
    (reset,) = ledger.resets("inbox")
    assert (reset.reset_by, reset.forgotten) == ("ops@host", 1)


def test_a_marker_set_with_no_files_is_recorded_without_a_job(tmp_path: Path) -> None:
    state = site(tmp_path, marker="_SUCCESS", settle_seconds=None)
    arrive(state, "_SUCCESS", range(0))
    watcher(state).look(T0)
    (record,) = state.store.triggers.recent("inbox")
    assert record.outcome == SetOutcome.EMPTY and job_files(state) == []


def test_a_trigger_that_would_not_run_is_refused_naming_the_field(tmp_path: Path) -> None:
    state = site(tmp_path)
    trigger = state.config.triggers["inbox"]
    bad = {
        "watch": {"watch": str(tmp_path / "elsewhere")},
        "job.source.uri": {"job": {"model": "m", "source": {"uri": "/x.csv"}}},
        "job.model": {"job": {"model": "nope"}},
        "job.output_format": {"job": {"model": "m", "output_format": "xml"}},
    }
    for field, update in bad.items():
        config = state.config.model_copy(
            update={"triggers": {"inbox": trigger.model_copy(update=update)}}
        )
        with pytest.raises(ConfigError, match=rf"triggers\.inbox\.{field}"):
            check_triggers(config)
    assert check_triggers(state.config) == [
        f"triggers.inbox.pattern: '*.jsonl' matches no file under {trigger.watch} yet"
    ]
    arrive(state, "a.jsonl", range(1))
    assert check_triggers(state.config) == []


def test_a_submission_names_files_only_under_allowed_roots(tmp_path: Path) -> None:
    state = site(tmp_path)
    inside = arrive(state, "a.jsonl", range(3))
    outside = tmp_path / "secret.jsonl"
    outside.write_text('{"id": 1, "x": 1.0}\n')
    body = {"model": "m", "source": {"files": [str(inside), str(outside)]}}
    with pytest.raises(Forbidden, match=r"source\.files"):
        submission.submit_job(state, "acme", body)
    body["source"] = {"files": [str(inside)]}
    job = state.store.job(submission.submit_job(state, "acme", body))
    assert job.spec.source.files == [str(inside)]


def test_metrics_show_each_tenant_its_own_triggers_files_seen(tmp_path: Path) -> None:
    from test_service_http import metric

    from thresher.service.metrics import render

    state = site(tmp_path, settle_seconds=0)
    arrive(state, "a.jsonl", range(3))
    arrive(state, "b.jsonl", range(3))
    watcher(state).look(T0)
    mine = render(state, "acme").decode()
    assert metric(mine, "thresher_trigger_files_seen_total", trigger="inbox") == 2
    assert 'trigger="inbox"' not in render(state, "other").decode()


def test_the_cli_lists_triggers_and_records_a_reset(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from thresher.cli import cli

    state = site(tmp_path, settle_seconds=0)
    arrive(state, "a.jsonl", range(3))
    watcher(state).look(T0)
    config = tmp_path / "server.toml"
    trigger = state.config.triggers["inbox"]
    config.write_text(
        f'data_dir = "{state.data_dir}"\nallowed_roots = ["{tmp_path / "shared"}"]\n'
        f'[models.m]\nkind = "python"\nuri = "{tmp_path / "m.py"}:M"\n'
        f'[triggers.inbox]\nwatch = "{trigger.watch}"\npattern = "*.jsonl"\n'
        f'tenant = "acme"\njob = {{ model = "m" }}\n'
    )
    store = ["--store", state.store.url]
    shown = CliRunner().invoke(cli, ["triggers", "--config", str(config), *store])
    assert shown.exit_code == 0, shown.output
    assert "files seen: 1" in shown.output and "started" in shown.output
    args = ["triggers", "reset", "inbox", "--since", "2000-01-01", "--by", "ops", *store]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0 and "1 files taken since" in done.output
    shown = CliRunner().invoke(cli, ["triggers", "--config", str(config), *store])
    assert "files seen: 0" in shown.output and "last reset: " in shown.output
    check_tenant_trigger_in_the_cli(state, [*store, "--config", str(config)])
    bad = CliRunner().invoke(cli, ["triggers", "reset", "nope", "--since", "2000-01-01", *store])
    assert bad.exit_code == 2 and "'nope' has taken no files" in bad.output
    roots = f'allowed_roots = ["{tmp_path / "shared"}"]'
    config.write_text(config.read_text().replace(roots, 'allowed_roots = ["/elsewhere"]'))
    refused = CliRunner().invoke(cli, ["triggers", "--config", str(config), *store])
    assert refused.exit_code == 2 and "triggers.inbox.watch" in refused.output


def check_tenant_trigger_in_the_cli(state: ServiceState, options: list[str]) -> None:
    """A tenant's own trigger (kept in the store) is listed as `tenant/name` beside the
    config's, and reset by that name."""
    from click.testing import CliRunner

    from thresher.cli import cli

    own = state.config.triggers["inbox"]
    state.store.trigger_defs.create("acme", "mine", own.model_dump_json(), paused=False)
    arrive(state, "b.jsonl", range(2))
    watcher(state).look(after(1))  # its own manifest: it takes a.jsonl and b.jsonl
    shown = CliRunner().invoke(cli, ["triggers", *options])
    assert shown.exit_code == 0, shown.output
    listing = shown.output.split("acme/mine: ")[1]
    assert listing.startswith(f"watch {own.watch}") and "files seen: 2" in listing
    args = ["triggers", "reset", "acme/mine", "--since", "2000-01-01", *options[:2]]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0 and "2 files taken since" in done.output, done.output


def test_get_v1_triggers_shows_a_tenant_its_own_triggers_alone(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from thresher.service.app import create_app
    from thresher.service.policies.auth import create_token

    state = site(tmp_path, settle_seconds=0)
    arrive(state, "a.jsonl", range(3))
    watcher(state).look(T0)
    acme, other = create_token(state.store, "acme"), create_token(state.store, "other")
    with TestClient(create_app(state, background=False)) as client:
        mine = client.get("/v1/triggers", headers={"Authorization": f"Bearer {acme}"}).json()
        (info,) = mine["data"]
        assert (info["name"], info["files_seen"], info["last_set"]["outcome"]) == (
            "inbox",
            1,
            "started",
        )
        theirs = {"Authorization": f"Bearer {other}"}
        assert client.get("/v1/triggers", headers=theirs).json() == {"data": []}
        assert client.get("/v1/triggers/inbox", headers=theirs).status_code == 404


def test_a_refused_job_fails_its_set_and_a_store_hiccup_is_tried_again(tmp_path: Path) -> None:
    from thresher.store import StoreError

    state = site(tmp_path / "refused", settle_seconds=0, job={"model": "m", "columns": ["nope"]})
    arrive(state, "a.jsonl", range(3))
    watcher(state).look(T0)
    (record,) = state.store.triggers.recent("inbox")
    assert record.outcome == SetOutcome.FAILED and "nope" in (record.message or "")
    state = site(tmp_path / "hiccup", settle_seconds=0)
    arrive(state, "a.jsonl", range(3))
    calls: list[str] = []

    def flaky(tenant: str, body: dict[str, object], key: str | None) -> str:
        calls.append(str(key))
        if len(calls) == 1:
            raise StoreError("database is locked")
        return submission.submit_job(state, tenant, body, key)

    Watcher(state, flaky).look(T0)
    assert state.store.triggers.recent("inbox")[0].outcome == SetOutcome.CLAIMED
    Watcher(state, flaky).look(after(20))
    assert calls[0] == calls[1] and job_files(state) == [["a.jsonl"]]


def test_serve_refuses_a_bad_trigger_with_exit_2_naming_the_field(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from thresher.cli import cli

    (tmp_path / "m.py").write_text(MODEL)
    config = tmp_path / "server.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\nallowed_roots = ["{tmp_path / "shared"}"]\n'
        f'[models.m]\nkind = "python"\nuri = "{tmp_path / "m.py"}:M"\n'
        '[triggers.inbox]\nwatch = "/etc"\ntenant = "acme"\n'
        'job = { model = "m", output_format = "xml" }\n'
    )
    store = f"sqlite:///{tmp_path / 'store.db'}"
    done = CliRunner().invoke(cli, ["serve", "--config", str(config), "--store", store])
    assert done.exit_code == 2 and "triggers.inbox.watch: /etc is outside" in done.output
    assert "triggers.inbox.job.output_format" in done.output  # every problem, at once


def test_a_set_over_a_tenant_limit_that_waiting_lifts_is_submitted_again(tmp_path: Path) -> None:
    from thresher.service.errors import TooManyRequests

    state = site(tmp_path, settle_seconds=0)
    arrive(state, "a.jsonl", range(3))
    calls: list[str] = []

    def over_then_under(tenant: str, body: dict[str, object], key: str | None) -> str:
        calls.append(str(key))
        if len(calls) == 1:
            raise TooManyRequests("tenant acme has 2 jobs queued", retry_after=30)
        return submission.submit_job(state, tenant, body, key)

    Watcher(state, over_then_under).look(T0)
    assert state.store.triggers.recent("inbox")[0].outcome == SetOutcome.CLAIMED
    Watcher(state, over_then_under).look(after(20))
    assert calls[0] == calls[1] and job_files(state) == [["a.jsonl"]]


def test_a_tenants_trigger_of_a_config_triggers_name_keeps_its_own_files(tmp_path: Path) -> None:

    state = site(tmp_path, settle_seconds=0, poll_seconds=1)
    table, w = state.store.trigger_defs, watcher(state)
    mine = state.config.triggers["inbox"].model_copy(update={"tenant": "globex"})
    table.create("globex", "inbox", mine.model_dump_json(), paused=False)
    arrive(state, "a.jsonl", range(3))
    w.look(T0)
    assert job_files(state) == [["a.jsonl"], ["a.jsonl"]]  # one job each: two triggers
    assert state.store.triggers.files_seen() == {"globex/inbox": 1, "inbox": 1}
    table.replace("globex", "inbox", mine.model_dump_json(), paused=True)
    arrive(state, "b.jsonl", range(3, 5))
    w.look(after(1))
    assert len(job_files(state)) == 3  # only the config's took b
    table.delete("globex", "inbox")
    arrive(state, "c.jsonl", range(5, 7))
    assert w.look(after(2)) == 1  # the shortest poll left
    assert len(job_files(state)) == 4


@dataclasses.dataclass(frozen=True)
class CountingLedger(TriggerLedger):
    """The real ledger, noting how many manifest rows each read brought back."""

    reads: list[int] = dataclasses.field(default_factory=list)

    def taken_since(self, trigger: str, since: str | None) -> list[tuple[str, int, str, str]]:
        rows = super().taken_since(trigger, since)
        self.reads.append(len(rows))
        return rows


def test_a_look_reads_only_the_files_taken_since_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(taken_module, "OVERLAP", timedelta(0))  # no clock slack to re-read
    ledger = CountingLedger(open_store(f"sqlite:///{tmp_path / 'store.db'}").db)
    many = [TakenFile(f"/in/{i:05d}.csv", 1, "1") for i in range(3000)]
    assert ledger.claim("inbox", "s1", many, "me")
    assert ledger.claim("inbox", "s2", [TakenFile("/in/last.csv", 1, "1")], "me")
    remembered = TakenFiles(ledger, "inbox")
    assert len(remembered.current(epoch=0)) == 3001 and ledger.reads == [3001]
    assert ledger.claim("inbox", "s3", [TakenFile("/in/new.csv", 1, "1")], "me")
    taken = remembered.current(epoch=0)
    assert len(taken) == 3002 and "/in/new.csv" in taken
    assert ledger.reads[-1] <= 2  # the new file, and the newest one remembered
    for key in ("s1", "s2", "s3"):
        ledger.settle("inbox", key, SetOutcome.STARTED, job_id=key)
    ledger.reset("inbox", T0, "ops")  # forgets them all: the epoch changes
    assert remembered.current(epoch=ledger.epoch("inbox")) == {}
