"""The commit protocol, step by step, through crashes: a Hypothesis state machine.

No processes: a real job store (SQLite) and a real Parquet `FileSink` in a temporary
folder, driven the way the coordinator drives them. Shards are claimed (an attempt starts
and its writer stages rows tagged with (shard, row, attempt)), staged, and committed in
`ShardLoop._commit`'s three steps — or the coordinator crashes after any of those steps,
losing every writer and staged part, and resumes as `thresher resume` would. Checked after
every step: a final part holds one whole attempt of its own shard, and a shard the store
calls done has its part (by the attempt the store recorded). After `finish`: every row of
every shard is in the output exactly once, and no staging is left.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections import Counter
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

from thresher.sinks.files import FileSink
from thresher.sinks.parts import FilePartWriter, StagedPart, commit_file
from thresher.store import JobState, ShardState, Store, StoreError, open_store

JOB = "20261130-020304-a1b2c3"
PART = re.compile(r"part-(\d{5})\.parquet")
OWN_FILES = {"_thresher.json", "_SUCCESS", "_errors", "_staging"}
# The coordinator's steps on a finished shard, in the order of engine/loop.py
# ShardLoop._commit. The order is the protocol: swapping the first and the last makes
# this machine fail (a crash between them leaves a shard done in the store, unwritten).
COMMIT_STEPS = ("commit_part", "commit_errors", "shard_done")


def rows_of(shard: int) -> int:
    """Shards of different sizes, so a part from the wrong shard cannot pass for another."""
    return 1 + 2 * (shard % 3)


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

    @initialize(shard_count=st.integers(1, 3))
    def create_job(self, shard_count: int) -> None:
        self.shard_count = shard_count
        plan = {"shards": [{"index": i} for i in range(shard_count)]}
        self.store.create_job(JOB, "lifecycle", {}, plan)
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

    @precondition(lambda self: not self.finished and self.writers)
    @rule(data=st.data())
    def write_and_stage(self, data: st.DataObject) -> None:
        shard = data.draw(st.sampled_from(sorted(self.writers)), label="shard")
        self.staged[shard] = self.writers.pop(shard).close()

    @precondition(lambda self: not self.finished and self.staged)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        shard = data.draw(st.sampled_from(sorted(self.staged)), label="shard")
        self._commit(self.staged.pop(shard), len(COMMIT_STEPS))

    @precondition(lambda self: not self.finished and (self.writers or self.staged))
    @rule(data=st.data(), steps=st.integers(0, len(COMMIT_STEPS)))
    def crash(self, data: st.DataObject, steps: int) -> None:
        """With work in flight, the coordinator dies after `steps` of a commit (if a part
        is staged); then a new one claims the job and restarts the sink for resume."""
        if self.staged and steps:
            shard = data.draw(st.sampled_from(sorted(self.staged)), label="shard")
            self._commit(self.staged[shard], steps)
        event(f"crash after {steps if self.staged else 0} commit step(s)")
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

    def _commit(self, staged: StagedPart, steps: int) -> None:
        """The first `steps` of the coordinator's commit of one staged shard."""
        rows = staged.rows
        for step in COMMIT_STEPS[:steps]:
            if step == "commit_part":
                self.sink.commit_part(staged)
            elif step == "commit_errors":
                no_errors = StagedPart(staged.shard, staged.attempt, None, 0)
                commit_file(no_errors, self.sink.error_layout)
            else:
                self.store.shard_done(JOB, staged.shard, staged.attempt, (rows, rows, 0), 0.01)

    # Invariants, after every step.

    @invariant()
    def final_parts_hold_one_whole_attempt_of_their_shard(self) -> None:
        if not self.out.exists():
            return
        names = [p.name for p in self.out.iterdir()]
        parts = Counter(int(m[1]) for name in names if (m := PART.fullmatch(name)))
        assert all(n == 1 for n in parts.values()), parts
        assert set(parts) <= set(range(self.shard_count)), parts
        strays = [n for n in names if not PART.fullmatch(n) and n not in OWN_FILES]
        assert strays == [], strays
        for shard in parts:
            table = pq.read_table(self.out / f"part-{shard:05d}.parquet")
            assert set(table.column("shard").to_pylist()) == {shard}
            assert len(set(table.column("attempt").to_pylist())) == 1, "two attempts mixed"
            assert sorted(table.column("row").to_pylist()) == list(range(rows_of(shard)))

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
        for shard, attempt in done_attempts:
            final = self.out / f"part-{shard:05d}.parquet"
            assert final.exists(), f"shard {shard} is done in the store but has no part"
            written = set(pq.read_table(final).column("attempt").to_pylist())
            assert written == {attempt}, f"shard {shard}: store says {attempt}, part {written}"

    def teardown(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.store.db.close()
        shutil.rmtree(self.root, ignore_errors=True)


ShardLifecycle.TestCase.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
TestShardLifecycle = ShardLifecycle.TestCase
