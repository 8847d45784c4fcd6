"""Contract checks for plug-ins, and stand-ins that make tests fast.

A third party runs the same checks against its own plug-in that every built-in passes:

    >>> from thresher.testing import check_source, check_sink, check_model
    >>> plan = check_source(my_source)                      # doctest: +SKIP
    >>> check_sink(lambda: my_sink(section))                # doctest: +SKIP
    >>> check_model(my_model, batch)                        # doctest: +SKIP

Each raises `ContractError` saying which promise was broken. `in_process_executor` runs
shard tasks in this process (no workers to spawn: a unit test drives the coordinator with
it), and `MemorySink` keeps a job's output in memory (`sink.format =
"thresher.testing:memory_sink"`, with the in-process executor).
"""

from __future__ import annotations

import json
import pickle
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from thresher.errors import SinkError
from thresher.executors.inline import InlineExecutor
from thresher.models.base import Model
from thresher.plan.placement import Placement
from thresher.sinks.base import Sink
from thresher.sinks.files import FilePartTarget
from thresher.sinks.parts import PartLayout, StagedPart, open_for_write
from thresher.sources.base import Plan, Source
from thresher.spec import RunSection, SinkSection

__all__ = [
    "ContractError",
    "MemorySink",
    "check_model",
    "check_sink",
    "check_source",
    "in_process_executor",
    "memory_sink",
]


class ContractError(AssertionError):
    """A plug-in broke a promise of its kind's contract."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ContractError(message)


def check_source(source: Source, rows_per_chunk: int = 1_000) -> Plan:
    """Plan twice and read every shard: the plan is the same both times, shards and the
    reader survive pickling (they travel to workers), indexes run 0..n-1, every chunk has
    the plan's columns and a position per row, and a shard that says how many rows it
    holds yields that many. Returns the plan."""
    plan, again = source.plan(), source.plan()
    _expect(plan.to_json() == again.to_json(), "planning twice gave two different plans")
    _expect(Plan.from_json(plan.to_json()) == plan, "the plan does not survive its JSON form")
    indexes = [s.index for s in plan.shards]
    _expect(indexes == list(range(len(indexes))), f"shard indexes are {indexes}, not 0..n-1")
    reader = source.reader(plan.schema, plan.schema.names)
    reader = pickle.loads(pickle.dumps(reader))
    for shard in plan.shards:
        _expect(pickle.loads(pickle.dumps(shard)) == shard, f"shard {shard.index} is not picklable")
        rows = 0
        for chunk in reader.read(shard, rows_per_chunk):
            _expect(chunk.table.num_rows <= rows_per_chunk, "a chunk holds more rows than asked")
            _expect(
                chunk.table.column_names == plan.schema.names,
                f"shard {shard.index}: columns {chunk.table.column_names}, not the plan's",
            )
            _expect(
                len(chunk.positions) == chunk.table.num_rows,
                f"shard {shard.index}: {len(chunk.positions)} positions for "
                f"{chunk.table.num_rows} rows",
            )
            rows += chunk.table.num_rows + len(chunk.bad)
        if shard.rows is not None:
            _expect(rows == shard.rows, f"shard {shard.index} holds {rows} rows, says {shard.rows}")
    return plan


def check_sink(make_sink: Callable[[], Sink], shards: int = 3) -> None:
    """Two jobs through fresh sinks of the same output: every commit twice (a commit
    redone after a crash), the second job failing before finish, then resumed. Checks
    that a published output holds each row once (in any order: a table has none); that
    the second job's rows are nowhere to be read until it finishes (the first job's still
    are); that its finish replaces them; and that each shard's one bad record is read
    back once through `read_errors`, by shard and in all."""
    first = _job(make_sink(), "20260101-000000-000001", shards, tag=1)
    _expect(_rows(make_sink(), "20260101-000000-000001", shards) == first, "output != input")
    second_id = "20260102-000000-000002"
    failing = make_sink()
    second = _job(failing, second_id, shards, tag=2, finish=False)
    failing.abort()
    _expect(
        _rows(make_sink(), second_id, shards) == first,
        "a job that did not finish changed the published output",
    )
    resumed = make_sink()
    resumed.start(second_id, shards, resume=True)
    resumed.finish({"job_id": second_id})
    _expect(_rows(make_sink(), second_id, shards) == second, "finish did not publish the job")
    reader = make_sink()
    reader.start(second_id, shards, resume=True)
    everything = [r["row"] for r in reader.read_errors()]
    _expect(everything == list(range(shards)), f"bad records read back as {everything}")
    last = [r["row"] for r in reader.read_errors(shards - 1)]
    _expect(last == [shards - 1], f"shard {shards - 1}'s bad records read back as {last}")


def _job(
    sink: Sink, job_id: str, shards: int, tag: int, finish: bool = True
) -> list[tuple[int, int]]:
    sink.start(job_id, shards, resume=False)
    written = []
    for shard in range(shards):
        ids = [shard * 10 + i for i in range(shard + 1)]
        target = sink.part_target()
        writer = target.open(shard, f"a{tag}")
        writer.write(pa.table({"id": ids, "tag": [tag] * len(ids)}))
        part = writer.close()
        errors = _stage_bad_record(target.error_staging(shard, f"a{tag}"), shard, tag)
        for _ in range(2):
            sink.commit(part, errors)
        written += [(i, tag) for i in ids]
    if finish:
        sink.finish({"job_id": job_id})
    return written


def _stage_bad_record(path: str, shard: int, tag: int) -> StagedPart:
    """One bad record for `shard`, staged where the sink asked, as a worker writes it."""
    record = {"stage": "decode", "row": shard, "tag": tag, "message": "made by check_sink"}
    with open_for_write(path) as f:
        f.write((json.dumps(record) + "\n").encode("utf-8"))
    return StagedPart(shard, f"a{tag}", path, 1)


def _rows(sink: Sink, job_id: str, shards: int) -> list[tuple[int, int]]:
    reader = getattr(sink, "read_output", None)
    _expect(callable(reader), f"{type(sink).__name__} has no read_output()")
    sink.start(job_id, shards, resume=True)
    tables = list(reader())  # type: ignore[misc]
    if not tables:
        return []
    table = pa.concat_tables(tables)
    return sorted(zip(table.column("id").to_pylist(), table.column("tag").to_pylist(), strict=True))


def check_model(model: Model, batch: pa.Table) -> Mapping[str, Any]:
    """Predict `batch`, and a one-row slice of it: every output column has one value per
    row, and the one-row prediction matches the batch's first row (a model must not
    depend on what else is in its batch). Returns the batch's outputs."""
    outputs = model.predict(batch)
    _expect(bool(outputs), "predict returned no output columns")
    for name, column in outputs.items():
        _expect(
            len(column) == batch.num_rows,
            f"output {name!r}: {len(column)} values for {batch.num_rows} rows",
        )
    if batch.num_rows:
        single = model.predict(batch.slice(0, 1))
        for name, column in outputs.items():
            first = np.asarray(pa.array(np.asarray(column)[:1]).to_pylist(), dtype=object)
            alone = np.asarray(pa.array(np.asarray(single[name])[:1]).to_pylist(), dtype=object)
            _expect(
                _same(first, alone),
                f"output {name!r}: row 0 alone predicts {alone[0]!r}, in the batch {first[0]!r}",
            )
    return outputs


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return bool(np.allclose(a.astype(float), b.astype(float), rtol=1e-4, atol=1e-5))
    except (TypeError, ValueError):
        return bool((a == b).all())


def in_process_executor(run: RunSection, placement: Placement) -> InlineExecutor:
    """Every shard of a job on one thread of this process, the model loaded once: the
    executor `local` uses for a job of one shard, for any job (`run.executor =
    "thresher.testing:in_process_executor"`), so a unit test drives the coordinator with
    no worker process to spawn."""
    return InlineExecutor(threads=placement.threads, shard_timeout=run.shard_timeout)


@dataclass
class MemorySink:
    """A job's output kept in memory, published at finish like any sink: parts are staged
    in a temporary folder (the worker's half is a file target), read into memory at
    commit, and become `published[uri]` at finish. The tables are class-wide, so a new
    MemorySink of the same uri sees them, as a new process would see a folder's files.
    Only with the in-process executor; no `retry-errors`."""

    uri: str
    published: ClassVar[dict[str, list[pa.Table]]] = {}
    pending: ClassVar[dict[tuple[str, str], dict[int, pa.Table]]] = {}
    errors: ClassVar[dict[str, dict[int, list[str]]]] = {}
    job_id: str = ""
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="thresher-memory-")))
    width: int = 5

    def start(
        self, job_id: str, shard_count: int, resume: bool, retry_round: int | None = None
    ) -> str:
        if retry_round is not None:
            raise SinkError("sink.format: the memory sink keeps no error files to retry from")
        self.job_id = job_id
        if not resume:
            self.pending[(self.uri, job_id)] = {}
        return f"memory:{self.uri}/_errors"

    def part_target(self) -> FilePartTarget:
        return FilePartTarget(self._layout(), self._errors(), "parquet")

    def commit(self, output: StagedPart | None, errors: StagedPart | None) -> None:
        import pyarrow.parquet as pq

        if output is not None:
            parts = self.pending.setdefault((self.uri, self.job_id), {})
            if output.path is None:
                parts.pop(output.shard, None)
            elif Path(output.path).exists():
                parts[output.shard] = pq.read_table(output.path)
                Path(output.path).unlink()
        if errors is not None:
            lines = [] if errors.path is None else Path(errors.path).read_text().splitlines()
            self.errors.setdefault(self.uri, {})[errors.shard] = lines

    def finish(self, manifest: dict[str, Any]) -> None:
        parts = self.pending.pop((self.uri, self.job_id), None)
        if parts is not None:
            self.published[self.uri] = [parts[i] for i in sorted(parts)]

    def abort(self) -> None:
        """Committed parts wait in `pending` for a resume."""

    def read_output(self) -> Iterator[pa.Table]:
        yield from self.published.get(self.uri, [])

    def read_errors(self, shard: int | None = None) -> Iterator[dict[str, Any]]:
        """The committed bad records: one shard's, or all, in shard order."""
        kept = self.errors.get(self.uri, {})
        for index in sorted(kept) if shard is None else [shard]:
            for line in kept.get(index, []):
                yield json.loads(line)

    def _errors(self) -> PartLayout:
        return PartLayout(str(self.folder / "_errors"), "part-", ".jsonl", self.width)

    def _layout(self) -> PartLayout:
        return PartLayout(str(self.folder), "part-", ".parquet", self.width)


def memory_sink(section: SinkSection) -> MemorySink:
    """The sink factory (`sink.format = "thresher.testing:memory_sink"`)."""
    return MemorySink(section.uri)
