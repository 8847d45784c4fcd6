"""A watched folder is judged by where its files really are: a link out of the watched
root (to `/proc/self/pagemap`, which reports size 0 and never ends, or to an ordinary
file elsewhere) is neither listed, opened, hashed nor taken, and a file is hashed by
the bytes read, never by the size its stat claims. A real folder, a real store, the real
watcher and submission path."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime
from pathlib import Path

from thresher.service import submission
from thresher.service.background.watcher import Watcher
from thresher.service.config import ServerConfig, prepare
from thresher.service.state import ServiceState
from thresher.spec import ModelSection
from thresher.store import open_store
from thresher.triggers import TriggerSettings, file_digest, list_watch
from thresher.triggers.listing import HASH_BYTES

MODEL = "class M:\n    def predict(self, batch):\n        return {'prediction': batch['x']}\n"
T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
PROMPTLY = 20.0  # seconds: a look over three small files takes milliseconds


def site(tmp_path: Path) -> tuple[ServiceState, Path]:
    (tmp_path / "m.py").write_text(MODEL)
    inbox = tmp_path / "shared" / "inbox"
    inbox.mkdir(parents=True)
    trigger = TriggerSettings.model_validate(
        {
            "watch": str(inbox),
            "pattern": "*.jsonl",
            "settle_seconds": 0,
            "tenant": "acme",
            "job": {"model": "m"},
        }
    )
    config = prepare(
        ServerConfig(
            data_dir=tmp_path / "data",
            models={"m": ModelSection(kind="python", uri=f"{tmp_path / 'm.py'}:M")},
            allowed_roots=[str(tmp_path / "shared")],
            triggers={"inbox": trigger},
        )
    )
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    return ServiceState(store=store, config=config, data_dir=config.data_dir), inbox


def look_within(watcher: Watcher, seconds: float) -> bool:
    """Whether one look ends within `seconds` (on a daemon thread: one that never ends
    must fail the test, not hang it)."""
    done = threading.Event()

    def look() -> None:
        watcher.look(T0)
        done.set()

    threading.Thread(target=look, daemon=True).start()
    return done.wait(seconds)


def test_a_look_takes_no_link_out_of_the_watched_root_and_returns_promptly(
    tmp_path: Path,
) -> None:
    state, inbox = site(tmp_path)
    (inbox / "a.jsonl").write_text('{"id": 1, "x": 1.0}\n')
    (inbox / "endless.jsonl").symlink_to("/proc/self/pagemap")
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"id": 2, "x": 2.0}\n')
    (inbox / "secret.jsonl").symlink_to(secret)
    secret_read = os.stat(secret).st_atime_ns

    w = Watcher(state, lambda t, body, key: submission.submit_job(state, t, body, key))
    assert look_within(w, PROMPTLY), "a look over a link to /proc/self/pagemap never ended"
    taken = state.store.triggers.taken("inbox")
    assert sorted(Path(path).name for path in taken) == ["a.jsonl"]
    (job,) = state.store.jobs(10)
    assert [Path(f).name for f in job.spec.source.files] == ["a.jsonl"]
    assert os.stat(secret).st_atime_ns == secret_read  # never opened


def test_the_listing_keeps_links_inside_the_root_and_no_special_file(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.csv").write_text("x\n1\n")
    (tmp_path / "inside.csv").symlink_to(tmp_path / "real" / "a.csv")
    (tmp_path / "outside.csv").symlink_to("/etc/hostname")
    (tmp_path / "dir-link").symlink_to("/etc", target_is_directory=True)
    os.mkfifo(tmp_path / "pipe.csv")
    seen = {Path(f.path).name: f for f in list_watch(str(tmp_path))}
    assert sorted(seen) == ["a.csv", "inside.csv"]
    assert seen["inside.csv"].size == 4


def test_a_digest_counts_the_bytes_it_reads_not_the_size_stat_claims(tmp_path: Path) -> None:
    small = tmp_path / "small.jsonl"
    small.write_bytes(b"x" * 10)
    assert file_digest(str(small), str(tmp_path)) is not None
    assert file_digest(str(small), str(tmp_path), limit=9) is None  # over the limit
    (tmp_path / "endless").symlink_to("/proc/self/pagemap")  # size 0, endless
    assert file_digest(str(tmp_path / "endless"), str(tmp_path)) is None
    assert file_digest("/proc/self/pagemap", "/proc") is None  # not a regular file's bytes
    os.mkfifo(tmp_path / "pipe")  # opening it would wait for a writer
    assert file_digest(str(tmp_path / "pipe"), str(tmp_path)) is None
    assert HASH_BYTES == 8 * 1024 * 1024
