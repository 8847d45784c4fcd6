"""A job before it runs: checked, planned, its sink judged and its workers placed.

`run_job` takes these steps before any work (`plan_job`, then `checked_sink`), and
`thresher validate` takes them and stops (`preview_job`): what validate accepts is what a
run accepts, because it is the same code. Nothing here writes: not to the store, not to
the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from thresher.errors import SpecError
from thresher.faults import crash_point
from thresher.models import check_model_section
from thresher.monitor.gate import custom_check_problems
from thresher.plan import Placement, check_features, known_rows, place, plan_input
from thresher.postgres import without_password
from thresher.sinks import Sink, open_sink
from thresher.sinks.base import HoldsOutput
from thresher.sinks.guard import check_sink_place
from thresher.sources import Plan
from thresher.spec import JobSpec
from thresher.store import Store

__all__ = ["Preview", "check_gate", "check_model", "checked_sink", "plan_job", "preview_job"]


def check_model(spec: JobSpec) -> None:
    """Raise SpecError for a `[model]` problem seen without loading it, before the sink
    starts: a misspelt kind must not cost anything."""
    problems = check_model_section(spec.model)
    if problems:
        raise SpecError(problems)


def check_gate(spec: JobSpec) -> None:
    """Raise SpecError when a `[publish] checks` custom check cannot be imported, or the
    checks are asked of a sink that cannot hold a job's output unpublished (one that
    publishes as it commits, or cannot discard)."""
    if spec.publish.checks is None:
        return
    problems = custom_check_problems(spec.publish.checks.custom)
    if problems:
        raise SpecError(problems)
    if not isinstance(open_sink(spec.sink), HoldsOutput):
        raise SpecError(
            [
                f"publish.checks: the {spec.sink.format} sink cannot hold a job's output"
                " unpublished, so a job that fails its checks could not be held; gate a"
                " files, SQL, Delta or Iceberg sink, or remove [publish.checks]"
            ]
        )


def plan_job(spec: JobSpec) -> tuple[Plan, list[str]]:
    """The job's plan and its model's input columns, after every check that needs no work:
    the `[model]` section (`check_model`), the input cut into shards, and the model's
    inputs, the id and the kept columns found in the input. Raises SpecError naming the
    field (or SourceError naming the file) when one fails."""
    check_model(spec)
    check_gate(spec)
    crash_point("plan_input")
    plan = plan_input(spec)
    return plan, check_features(spec, plan)


def checked_sink(spec: JobSpec, store_url: str, plan: Plan) -> Sink:
    """The job's sink, not started; SpecError when a place it writes is or holds the store
    at `store_url` or one of the plan's input files (`sinks/guard.py`)."""
    sink = open_sink(spec.sink)
    check_sink_place(sink, store_url, (shard.path for shard in plan.shards))
    return sink


@dataclass(frozen=True)
class Preview:
    """What a job would do, with nothing run and nothing written: its plan, its model's
    input columns and where its shards would run."""

    spec: JobSpec
    plan: Plan
    features: list[str]
    placement: Placement

    @property
    def rows(self) -> int | None:
        """Rows in all, None unless every shard knows its count (Parquet's and Arrow's do)."""
        return known_rows(self.plan.shards)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data. A shard's `start` and `stop` are its source's own positions
        (bytes of a text file, row groups of Parquet, record batches of Arrow, a key range
        of SQL); `rows` is null where the source only counts them as it reads."""
        p = self.placement
        return {
            "name": self.spec.job.name,
            "shard_count": len(self.plan.shards),
            "rows": self.rows,
            "columns": self.plan.schema.names,
            "features": self.features,
            "model": {"kind": self.spec.model.kind, "uri": self.spec.model.uri},
            "executor": self.spec.run.executor,
            "placement": {
                "workers": p.workers,
                "threads": p.threads,
                "device": p.device,
                "devices": list(p.devices) if p.devices is not None else None,
                "inline": p.inline,
                "forked": p.forked,
                "described": p.describe(),
            },
            "sink": {
                "uri": without_password(self.spec.sink.uri),
                "format": self.spec.sink.format,
                "mode": self.spec.sink.mode,
            },
            "shards": [
                {"index": s.index, "path": s.path, "start": s.start, "stop": s.stop, "rows": s.rows}
                for s in self.plan.shards
            ],
        }


def preview_job(spec: JobSpec, store: Store) -> Preview:
    """`spec` checked and planned as `run_job` would before any work (its sink judged
    against `store` and its input, its workers placed by what `store` measured of the
    model's earlier jobs), and nothing more: pass a `read_store` to write nothing."""
    plan, features = plan_job(spec)
    checked_sink(spec, store.url, plan)
    return Preview(spec, plan, features, place(spec, plan.shards, store))
