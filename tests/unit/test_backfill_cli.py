"""`thresher backfill` in this process (click's runner), on a store no server runs on: a
backfill is recorded, shown, listed and cancelled; usage errors exit 2 and say what to
give. (tests/e2e/test_service_backfills.py runs it beside real servers.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from thresher.cli import cli
from thresher.store import BackfillState, open_store

PAST = (datetime.now(UTC) - timedelta(days=5)).date()


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def site(tmp_path: Path) -> tuple[str, str]:
    """A store URL and a server config declaring `nightly` (02:30 in Berlin)."""
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
job = {{ model = "m", source = {{ uri = "/srv/{{date}}.jsonl" }}, priority = 3 }}
"""
    )
    return f"sqlite:///{tmp_path / 'store.db'}", str(config)


def test_a_backfill_is_made_shown_listed_and_cancelled(tmp_path: Path) -> None:
    store, config = site(tmp_path)
    span = ("--from", (PAST - timedelta(days=1)).isoformat(), "--to", PAST.isoformat())
    code, said = run("--store", store, "backfill", "nightly", *span, "--config", config,
                     "--json", "--max-running", "1")  # fmt: skip
    assert code == 0, said
    made = json.loads(said)
    assert (made["schedule"], made["priority"], made["max_running"]) == ("nightly", 2, 1)
    assert [t["local_time"][10:16] for t in made["ticks"]] == ["T02:30", "T02:30"]
    code, shown = run("--store", store, "backfill", "--status", made["id"])
    assert code == 0 and shown.startswith(f"{made['id']} of nightly: "), shown
    assert "running, 0/2 done (pending 2)" in shown.splitlines()[0]
    code, listed = run("--store", store, "backfill", "nightly")
    assert code == 0 and listed.splitlines()[0].startswith(made["id"]), listed
    code, cancelled = run("--store", store, "backfill", "--cancel", made["id"], "--json")
    assert code == 0 and json.loads(cancelled)["outcome"] == "cancelled"
    row = open_store(store).backfills.find(made["id"])
    assert row is not None and row.state == BackfillState.CANCELLED


def test_usage_errors_exit_2_and_say_what_to_give(tmp_path: Path) -> None:
    store, config = site(tmp_path)
    day = PAST.isoformat()
    for args, says in [
        (("backfill",), "give SCHEDULE --from T1 --to T2"),
        (("backfill", "nightly", "--from", day), "needs SCHEDULE, --from and --to"),
        (("backfill", "nightly", "--from", day, "--to", day), "Missing option '--config'"),
        (("backfill", "--status", "a", "--cancel", "b"), "give SCHEDULE --from T1 --to T2"),
        (("backfill", "nightly", "--from", day, "--to", "soon", "--config", config),
         "to: 'soon' is not an ISO date"),
    ]:  # fmt: skip
        code, said = run("--store", store, *args)
        assert code == 2 and says in said, (args, said)
