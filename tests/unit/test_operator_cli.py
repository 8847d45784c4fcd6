"""What the server's operator runs: `thresher token list / revoke`, `thresher serve`
refusing a config it cannot serve, and `thresher status` printing tenants' text as text."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from thresher.cli import cli
from thresher.cli.views.status import show_job, show_jobs
from thresher.service.policies.auth import tenant_of
from thresher.spec import parse_spec
from thresher.store import JobState, open_store


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_tokens_are_listed_by_fingerprint_and_a_revoked_one_is_refused(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    tokens = {t: run("--store", store, "token", "create", "--tenant", t)[1].strip() for t in "ab"}
    code, listing = run("--store", store, "token", "list")
    assert code == 0, listing
    lines = listing.splitlines()
    assert [line.split()[-1] for line in lines] == ["a", "b"]
    assert not any(token in listing for token in tokens.values())
    fingerprint = lines[0].split()[0]
    assert len(fingerprint) == 12

    code, said = run("--store", store, "token", "revoke", fingerprint)
    assert code == 0 and "tenant a" in said, said
    opened = open_store(store)
    assert tenant_of(opened, tokens["a"]) is None
    assert tenant_of(opened, tokens["b"]) == "b"
    assert run("--store", store, "token", "list")[1].split()[-1] == "b"
    code, said = run("--store", store, "token", "revoke", fingerprint)
    assert code == 2 and "no token has the fingerprint" in said
    assert run("--store", store, "token", "revoke", "abc")[0] == 2  # too short to be sure


def test_every_command_takes_store_and_the_nearest_one_counts(tmp_path: Path) -> None:
    """As the README says: `--store URL` after `thresher`, after a group or after the
    command; the one nearest the command wins, and only `thresher --store` reads the
    environment."""
    url = {name: f"sqlite:///{tmp_path / name}.db" for name in ("root", "group", "own")}
    code, said = run("--store", url["root"], "status", "--store", url["own"])
    assert code == 0, said
    code, said = run("--store", url["root"], "actuals", "--store", url["group"], "list", "j")
    assert code == 2 and "j" in said  # the job is unknown in the group's store
    code, said = run("--store", url["root"], "cancel", "nope")
    assert code == 1 and "nope" in said
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["group.db", "own.db", "root.db"]
    env = {"THRESHER_STORE": f"sqlite:///{tmp_path / 'env.db'}"}
    result = CliRunner().invoke(cli, ["profile", "--store", url["own"], "j"], env=env)
    assert result.exit_code == 1 and not (tmp_path / "env.db").exists()
    assert CliRunner().invoke(cli, ["profile", "j"], env=env).exit_code == 1
    assert (tmp_path / "env.db").exists()


def never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `thresher serve` fail instead of serving, should it get that far."""
    from thresher.service import app

    def started(*args: object) -> None:
        raise AssertionError("the server started")

    monkeypatch.setattr(app, "serve", started)


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ('kind = "onnx"\nuri = "missing.onnx"', "models.churn.uri"),
        ('kind = "python"\nuri = "missing.py:Model"', "models.churn.uri"),
        ('kind = "no-such-kind"\nuri = "m.onnx"', "models.churn.kind"),
    ],
)
def test_serve_refuses_a_model_it_cannot_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str, named: str
) -> None:
    never_serve(monkeypatch)
    config = tmp_path / "server.toml"
    config.write_text(f'data_dir = "data"\n[models.churn]\n{section}\n')
    code, said = run("serve", "--config", str(config), "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert code == 2, said
    assert named in said


def test_a_trust_that_is_not_true_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    never_serve(monkeypatch)
    config = tmp_path / "server.toml"
    config.write_text('[models.m]\nkind = "sklearn"\nuri = "m.skops"\ntrust = "yes"\n')
    code, said = run("serve", "--config", str(config))
    assert code == 2 and "models.m.trust" in said, said


def test_status_shows_preempted_jobs_and_what_waiting_jobs_wait_for(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    spec = parse_spec(
        {
            "source": {"uri": "in.jsonl"},
            "model": {"kind": "sklearn", "uri": "m.skops"},
            "sink": {"uri": "out/"},
        }
    )
    store.queue_job("waits", spec, "acme")
    store.queue.note_wait("waits", "waiting for worker slots: 4 of 4 in use")
    store.queue_job("bumped", spec, "acme")
    assert store.queue.take("bumped") and store.queue.preempt("bumped", "preempted by a job")
    table, one = io.StringIO(), io.StringIO()
    show_jobs(store, 5, Console(file=table, width=300, color_system=None))
    show_job(store, "waits", Console(file=one, width=300, color_system=None))
    assert "waiting for worker slots: 4 of 4 in use" in table.getvalue()
    assert "preempted" in table.getvalue()
    assert "why it waits: waiting for worker slots: 4 of 4 in use" in one.getvalue()


def test_status_prints_job_names_and_messages_as_plain_text(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    name = "[red]evil[/red] [link=http://x]y[/link]\x1b[2J\r\u202e"
    spec = parse_spec(
        {
            "job": {"name": name},
            "source": {"uri": "in.jsonl"},
            "model": {"kind": "sklearn", "uri": "m.skops"},
            "sink": {"uri": "out/"},
        }
    )
    store.queue_job("job-1", spec, "acme")
    store.finish("job-1", JobState.FAILED, None, "bad [bold]x[/bold]\x07\x1b]0;title\x07")
    for show in (lambda c: show_jobs(store, 5, c), lambda c: show_job(store, "job-1", c)):
        out = io.StringIO()
        show(Console(file=out, width=400, color_system=None))
        text = out.getvalue()
        assert "[red]evil[/red]" in text and "[link=http://x]" in text
        assert "\x1b" not in text and "\r" not in text and "\x07" not in text
        assert "\u202e" not in text and "\\x1b[2J" in text and "\\u202e" in text
    assert "bad [bold]x[/bold]\\x07\\x1b]0;title\\x07" in text


def test_schedules_preview_their_next_five_fire_times_and_refuse_a_bad_cron(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    (tmp_path / "m.py").write_text("class M:\n    def predict(self, b):\n        return b\n")
    config = tmp_path / "server.toml"
    config.write_text(
        f"""data_dir = "{tmp_path / "data"}"
allowed_roots = ["/srv"]
[models.m]
kind = "python"
uri = "{tmp_path / "m.py"}:M"
[schedules.nightly]
cron = "30 2 * * *"
timezone = "Europe/Berlin"
tenant = "acme"
job = {{ model = "m", source = {{ uri = "/srv/in.jsonl" }} }}
"""
    )
    code, listing = run("--store", store, "schedules", "--config", str(config))
    assert code == 0, listing
    assert listing.startswith("nightly: 30 2 * * * (Europe/Berlin), active, tenant acme")
    nexts = [line for line in listing.splitlines() if line.strip().startswith("next:")]
    assert len(nexts) == 5 and all("T02:30+0" in line and "+00:00)" in line for line in nexts)
    for verb, said in (("pause", "paused"), ("resume", "resumed"), ("trigger", "claimed")):
        code, told = run("--store", store, "schedules", "--config", str(config), verb, "nightly")
        assert code == 0 and said in told, told
    code, told = run("--store", store, "schedules", "--config", str(config), "pause", "nope")
    assert code == 2 and "no schedule 'nope'" in told, told
    config.write_text(config.read_text().replace('"30 2 * * *"', '"30 26 * * *"'))
    code, said = run("--store", store, "schedules", "--config", str(config))
    assert code == 2 and "schedules.nightly.cron" in said, said
    outside = config.read_text().replace('"30 26 * * *"', '"30 2 * * *"').replace("/srv/", "/etc/")
    config.write_text(outside)
    code, said = run("--store", store, "schedules", "--config", str(config))
    assert code == 2 and "schedules.nightly.job.source.uri" in said, said


def test_listing_schedules_and_triggers_writes_nothing(tmp_path: Path) -> None:
    """Listing only looks: no data folder, no secret file, no store made or migrated."""
    import sqlite3

    from thresher.store import _schema as schema  # the store's own, as its tests use it

    data, store_file = tmp_path / "data", tmp_path / "store.db"
    store = f"sqlite:///{store_file}"
    config = tmp_path / "server.toml"
    config.write_text(f'data_dir = "{data}"\n')
    for command in ("schedules", "triggers"):
        code, said = run("--store", store, command, "--config", str(config))
        assert code == 0 and said.strip() == "none", said
    assert not data.exists() and not store_file.exists()

    open_store(store)  # a real store, then one a migration short of this code's
    with sqlite3.connect(store_file) as conn:
        conn.execute("DELETE FROM thresher_schema WHERE version = ?", (len(schema.MIGRATIONS),))
    before = store_file.read_bytes()
    for command in ("schedules", "triggers"):
        code, said = run("--store", store, command, "--config", str(config))
        assert code == 2 and "older than this thresher's" in said, said
    assert store_file.read_bytes() == before and not data.exists()
