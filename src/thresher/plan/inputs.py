"""A job's input, planned: cut into shards, and its model inputs checked against it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from difflib import get_close_matches

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
    raises SpecError naming the missing ones (a few of them, and how many)."""
    keep = spec.sink.keep_columns
    features = feature_columns(spec.source, plan.schema, keep)
    problems = missing_columns(
        plan.schema.names,
        {
            "source.id_column": [spec.source.id_column] if spec.source.id_column else [],
            "sink.keep_columns": keep,
            "source.columns": features,
        },
    )
    if not features:
        problems.append("source.columns: no model input columns are left")
    if problems:
        raise SpecError(problems)
    return features


def missing_columns(have: Sequence[str], wanted: Mapping[str, Sequence[str]]) -> list[str]:
    """One problem per field whose columns are not all in `have` (an input's columns),
    naming the first few missing and the input's first few, never the whole header.

    A missing name that looks like one the input has says which (`did you mean`).

    >>> missing_columns(["id", "x"], {"source.columns": ["x", "y"]})
    ["source.columns: no column 'y' (the input has 2 columns: 'id', 'x')"]
    >>> missing_columns(["customer_id", "x"], {"id_column": ["custmer_id"]})[0][:62]
    "id_column: no column 'custmer_id' (did you mean 'customer_id'?"
    """
    present = set(have)
    problems = []
    for field, names in wanted.items():
        missing = [n for n in names if n not in present]
        if missing:
            noun = "column" if len(missing) == 1 else f"{len(missing):,} columns, e.g."
            problems.append(
                f"{field}: no {noun} {few(missing)} ({_close(missing[:5], have)}the input"
                f" has {len(have):,} column{'s' * (len(have) != 1)}: {few(have)})"
            )
    return problems


def _close(missing: Sequence[str], have: Sequence[str]) -> str:
    """`did you mean 'a'?; ` for the input's columns that the missing names look like
    (`'a' for 'b', …` when several are missing), or nothing."""
    pairs = [(name, close[0]) for name in missing if (close := get_close_matches(name, have, 1))]
    if not pairs:
        return ""
    if len(missing) == 1:
        return f"did you mean {pairs[0][1]!r}?; "
    return "did you mean " + ", ".join(f"{c!r} for {n!r}" for n, c in pairs) + "?; "


def few(names: Sequence[str], limit: int = 5) -> str:
    """The first `limit` names, quoted, and how many more there are."""
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" … and {len(names) - limit:,} more" if len(names) > limit else "")
