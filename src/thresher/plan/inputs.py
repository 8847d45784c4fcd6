"""A job's input, planned: cut into shards, and its model inputs checked against it."""

from __future__ import annotations

from thresher.errors import SpecError
from thresher.plan.placement import worker_slots
from thresher.sources import Plan, feature_columns, open_source
from thresher.spec import JobSpec


def plan_input(spec: JobSpec) -> Plan:
    """The job's input cut into shards of the spec's size, and into at least one shard
    for each worker the run may have when the input is big enough."""
    return open_source(spec.source, spec.sink.keep_columns, worker_slots(spec.run)).plan()


def check_features(spec: JobSpec, plan: Plan) -> list[str]:
    """The model's inputs, after checking that every named column exists in the input;
    raises SpecError naming each missing one."""
    keep = spec.sink.keep_columns
    features = feature_columns(spec.source, plan.schema, keep)
    have, listed = set(plan.schema.names), ", ".join(plan.schema.names)
    problems = []
    if spec.source.id_column and spec.source.id_column not in have:
        problems.append(
            f"source.id_column: no column {spec.source.id_column!r} (input has {listed})"
        )
    problems += [
        f"sink.keep_columns: no column {c!r} (input has {listed})" for c in keep if c not in have
    ]
    problems += [
        f"source.columns: no column {c!r} (input has {listed})" for c in features if c not in have
    ]
    if not features:
        problems.append("source.columns: no model input columns are left")
    if problems:
        raise SpecError(problems)
    return features
