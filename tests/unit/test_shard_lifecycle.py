"""The commit protocol, step by step, through crashes: a Hypothesis state machine.

No processes: a real job store (SQLite) and a real Parquet `FileSink` in a temporary
folder, driven by the real `commit_shard` (coordinator/commit.py). Shards are claimed (an
attempt starts and its writer stages rows tagged with (shard, row, attempt), and one bad
record for odd shards), staged, and committed — or the coordinator crashes at one of
`commit_shard`'s crash points (the test makes the point raise instead of SIGKILL), losing
every writer and staged part, and resumes as `thresher resume` would. Checked after every
step: a committed part holds one whole attempt of its own shard, a shard the store calls
done has its part and its errors by the attempt the store recorded, and the previous
job's output is untouched until `finish`. After `finish`: every row of every shard is in
the output exactly once, every bad record in `_errors/` once, and no staging is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import thresher.coordinator.commit as commit_module
import thresher.sinks.files as file_sink_module
from thresher.coordinator.commit import commit_shard
from thresher.sinks.files import FileSink
from thresher.sinks.parts import FilePartWriter, StagedPart
from thresher.spec import parse_spec
from thresher.store import JobState, ShardState, Store, StoreError, open_store
from thresher.worker.tasks import ShardResult

JOB = "20261130-020304-a1b2c3"
PREVIOUS = "20261129-020304-d4e5f6"
PART = re.compile(r"part-(\d{5})\.parquet")
OWN_FILES = {"_thresher.json", "_SUCCESS", "_errors", "_staging", "_pending"}
# commit_shard's crash points, in the order it reaches them. Where the coordinator dies
# decides what it had done: a reordering of commit_shard's steps makes this machine fail.
CRASH_POINTS = ("before_commit", "mid_commit", "after_commit")

# The job the machine's store records (its sink is the machine's folder).
A_JOB = {"model": {"kind": "python", "uri": "model.py"}, "source": {"uri": "in.csv"}}


class Crashed(Exception):
    """The coordinator died at a crash point."""


def rows_of(shard: int) -> int:
    """Shards of different sizes, so a part from the wrong shard cannot pass for another."""
    return 1 + 2 * (shard % 3)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every published file in an output folder, by name, with its bytes."""
    skip = ("_pending", "_staging", "_errors/_staging", "_thresher.json")
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.relative_to(folder).as_posix().startswith(skip)
    }


class ShardLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="thresher-lifecycle-"))
        self.out = self.root / "out"
        self.url = f"sqlite:///{self.root / 'store.db'}"
        self.store: Store = open_store(self.url)
        self.sink = FileSink(uri=str(self.out), file_format="parquet")
        self.shard_count = 0
        self.writers: dict[int, FilePartWriter] = {}
        self.staged: dict[int, StagedPart] = {}
        self.numbers: Counter[int] = Counter()  # attempt numbers, per coordinator run
        self.serial = 0  # makes every attempt id unique, across crashes too
        self.finished = False
        self.final_output: Counter[tuple[int, int]] = Counter()
        self.previous: dict[str, bytes] = {}

    @property
    def pending(self) -> Path:
        return self.out / "_pending" / JOB

    @initialize(shard_count=st.integers(1, 3), earlier=st.booleans())
    def create_job(self, shard_count: int, earlier: bool) -> None:
        """A job over a folder that is empty or holds an earlier job's output (4 shards,
        so the new job, with fewer, must remove the earlier job's last ones at finish)."""
        if earlier:
            self._publish_previous()
        self.previous = snapshot(self.out) if self.out.exists() else {}
        self.shard_count = shard_count
        plan = {"shards": [{"index": i} for i in range(shard_count)]}
        spec = {"sink": {"uri": str(self.out), "format": "parquet"}}
        self.store.create_job(JOB, "lifecycle", parse_spec({**A_JOB, **spec}), plan)
        self.sink.start(JOB, shard_count, resume=False)

    # The store decides what is left, as it does for a resumed coordinator.

    def done(self) -> set[int]:
        return {s.index for s in self.store.shards(JOB) if s.state == ShardState.DONE}

    def claimable(self) -> list[int]:
        done = self.done()
        return [i for i in range(self.shard_count) if i not in done and i not in self.writers]

    # Rules.

    @precondition(lambda self: not self.finished and self.claimable())
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        """Start an attempt: its worker opens a staging part and writes the shard's rows.
        A shard staged but never committed (its worker died after staging) is retried."""
        shard = data.draw(st.sampled_from(self.claimable()), label="shard")
        self.staged.pop(shard, None)
        self.numbers[shard] += 1
        self.serial += 1
        attempt = f"a{self.numbers[shard]}-{self.serial:04x}"
        self.store.attempt_started(JOB, shard, attempt, self.numbers[shard])
        writer = self.sink.part_target().open(shard, attempt)
        rows = rows_of(shard)
        writer.write(
            pa.table(
                {
                    "shard": pa.array([shard] * rows, pa.int64()),
                    "row": pa.array(range(rows), pa.int64()),
                    "attempt": pa.array([attempt] * rows, pa.string()),
                }
            )
        )
        self.writers[shard] = writer
        if shard % 2:
            bad = Path(self.sink.part_target().error_staging(shard, attempt))
            bad.parent.mkdir(parents=True, exist_ok=True)
            bad.write_text(json.dumps({"shard": shard, "attempt": attempt}) + "\n")

    @precondition(lambda self: not self.finished and self.writers)
    @rule(data=st.data())
    def write_and_stage(self, data: st.DataObject) -> None:
        shard = data.draw(st.sampled_from(sorted(self.writers)), label="shard")
        self.staged[shard] = self.writers.pop(shard).close()

    @precondition(lambda self: not self.finished and self.staged)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        shard = data.draw(st.sampled_from(sorted(self.staged)), label="shard")
        commit_shard(self.sink, self.store, JOB, self._result(self.staged.pop(shard)))

    @precondition(lambda self: not self.finished and (self.writers or self.staged))
    @rule(data=st.data(), point=st.sampled_from((*CRASH_POINTS, None)))
    def crash(self, data: st.DataObject, point: str | None) -> None:
        """With work in flight, the coordinator dies at `point` of a commit (if a part is
        staged; None: right after a whole commit); then a new one claims the job and
        restarts the sink for resume."""
        if self.staged:
            shard = data.draw(st.sampled_from(sorted(self.staged)), label="shard")
            with pytest.raises(Crashed) if point else contextlib.nullcontext(), _crash_at(point):
                commit_shard(self.sink, self.store, JOB, self._result(self.staged[shard]))
        event(f"crash at {point if self.staged else 'no commit'}")
        for writer in self.writers.values():  # dead workers leave torn staging files
            part = writer.close()
            if part.path:
                os.truncate(part.path, os.path.getsize(part.path) // 2)
        self.writers.clear()
        self.staged.clear()
        self.numbers.clear()
        self.store.db.close()
        self.store = open_store(self.url)
        self.store.claim(JOB, force=True)
        self.sink = FileSink(uri=str(self.out), file_format="parquet")
        self.sink.start(JOB, self.shard_count, resume=True)

    @precondition(lambda self: not self.finished and len(self.done()) == self.shard_count > 0)
    @rule()
    def finish(self) -> None:
        totals = self.store.totals(JOB)
        manifest = {"job_id": JOB, "rows_in": totals.rows_in, "rows_out": totals.rows_out}
        self.sink.finish(manifest)
        self.store.finish(JOB, JobState.SUCCEEDED, manifest, None)
        self.finished = True
        event("finished")

        got: Counter[tuple[int, int]] = Counter()
        for path in self.out.glob("part-*.parquet"):
            table = pq.read_table(path)
            shards, rows = table.column("shard").to_pylist(), table.column("row").to_pylist()
            got.update(zip(shards, rows, strict=True))
        want = Counter((s, r) for s in range(self.shard_count) for r in range(rows_of(s)))
        assert got == want, f"lost {want - got}, extra {got - want}"
        bad = Counter(
            json.loads(line)["shard"]
            for path in (self.out / "_errors").glob("part-*.jsonl")
            for line in path.read_text().splitlines()
        )
        assert bad == Counter(s for s in range(self.shard_count) if s % 2)
        assert not self.pending.exists()
        assert not (self.out / "_staging").exists()
        assert not (self.out / "_errors" / "_staging").exists()
        assert (self.out / "_SUCCESS").exists()
        assert self.store.job(JOB).state == JobState.SUCCEEDED
        self.final_output = got

    @precondition(lambda self: self.finished)
    @rule()
    def resume_after_success(self) -> None:
        """A finished job is not resumed, and nothing in its output changes."""
        with pytest.raises(StoreError, match="already succeeded"):
            self.store.claim(JOB, force=True)
        assert (self.out / "_SUCCESS").exists()

    def _result(self, staged: StagedPart) -> ShardResult:
        """What the worker reports for a staged shard: its part and its error part."""
        bad_path = self.sink.part_target().error_staging(staged.shard, staged.attempt)
        bad = staged.shard % 2
        errors = StagedPart(staged.shard, staged.attempt, bad_path if bad else None, bad)
        rows = staged.rows
        return ShardResult(staged.shard, staged.attempt, staged, errors, rows, rows, bad, 0.01)

    def _publish_previous(self) -> None:
        """An earlier job's output, published through the same sink."""
        sink = FileSink(uri=str(self.out), file_format="parquet")
        sink.start(PREVIOUS, 4, resume=False)
        for shard in range(4):
            writer = sink.part_target().open(shard, "a1-0")
            writer.write(pa.table({"shard": [100 + shard], "row": [0], "attempt": ["old"]}))
            sink.commit(writer.close(), None)
        sink.finish({"job_id": PREVIOUS})

    # Invariants, after every step.

    @invariant()
    def committed_parts_hold_one_whole_attempt_of_their_shard(self) -> None:
        folder = self.out if self.finished else self.pending
        if not folder.exists():
            return
        names = [p.name for p in folder.iterdir()]
        parts = Counter(int(m[1]) for name in names if (m := PART.fullmatch(name)))
        assert all(n == 1 for n in parts.values()), parts
        assert set(parts) <= set(range(self.shard_count)), parts
        strays = [n for n in names if not PART.fullmatch(n) and n not in OWN_FILES]
        assert strays == [], strays
        for shard in parts:
            table = pq.read_table(folder / f"part-{shard:05d}.parquet")
            assert set(table.column("shard").to_pylist()) == {shard}
            assert len(set(table.column("attempt").to_pylist())) == 1, "two attempts mixed"
            assert sorted(table.column("row").to_pylist()) == list(range(rows_of(shard)))

    @invariant()
    def the_previous_output_is_untouched_until_finish(self) -> None:
        if not self.finished and self.out.exists():
            assert snapshot(self.out) == self.previous

    @invariant()
    def a_shard_done_in_the_store_is_committed_by_that_attempt(self) -> None:
        if self.shard_count == 0:
            return
        done_attempts = self.store.db.query(
            "SELECT idx, attempt FROM thresher_attempts WHERE job_id = ? AND outcome = 'done'",
            (JOB,),
        )
        per_shard = Counter(idx for idx, _ in done_attempts)
        assert all(n == 1 for n in per_shard.values()), f"a shard recorded done twice: {per_shard}"
        assert set(per_shard) == self.done()
        folder = self.out if self.finished else self.pending
        for shard, attempt in done_attempts:
            final = folder / f"part-{shard:05d}.parquet"
            assert final.exists(), f"shard {shard} is done in the store but has no part"
            written = set(pq.read_table(final).column("attempt").to_pylist())
            assert written == {attempt}, f"shard {shard}: store says {attempt}, part {written}"
            errors = folder / "_errors" / f"part-{shard:05d}.jsonl"
            if shard % 2:
                assert errors.exists(), f"shard {shard} is done but its bad record is not"
                assert json.loads(errors.read_text())["attempt"] == attempt

    def teardown(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.store.db.close()
        shutil.rmtree(self.root, ignore_errors=True)


ShardLifecycle.TestCase.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
TestShardLifecycle = ShardLifecycle.TestCase


@contextlib.contextmanager
def _crash_at(point: str | None) -> Iterator[None]:
    """Make the commit's crash point `point` raise Crashed (None: no point does): the
    protocol's own points and the file sink's, between its two parts."""
    modules = (commit_module, file_sink_module)
    saved = [module.crash_point for module in modules]

    def crash_point(name: str, shard: int | None = None) -> None:
        if name == point:
            raise Crashed(name)

    for module in modules:
        module.crash_point = crash_point  # type: ignore[assignment]
    try:
        yield
    finally:
        for module, original in zip(modules, saved, strict=True):
            module.crash_point = original  # type: ignore[assignment]
