"""Planning, before any work: the input cut into shards, and where the shards run.

Each source plans itself (`sources/`); this package asks it for the run's number of
workers, checks the model's inputs against the planned schema, and places the workers
on cores or GPUs: on a CPU, as processes or as threads of one, whichever the model's
earlier jobs measured faster (`history.py`).
"""

from __future__ import annotations

from thresher.plan.history import known_rows, place
from thresher.plan.inputs import check_features, plan_input
from thresher.plan.placement import Placement, measurable, plan_placement, worker_slots

__all__ = [
    "Placement",
    "check_features",
    "known_rows",
    "measurable",
    "place",
    "plan_input",
    "plan_placement",
    "worker_slots",
]
