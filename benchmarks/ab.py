"""A/B runs of one `thresher run`: the same job under a few variants (extra `--set`s, extra
environment), taking turns so a busy host's drift falls on every variant alike, each run
end to end with the process tree's user and system CPU time and its largest process's
peak RSS. The side benchmarks that ask "is this setting better?" share it."""

from __future__ import annotations

import resource
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import systems
from measure import run_measured


@dataclass(frozen=True)
class Variant:
    label: str
    settings: Sequence[str] = ()  # `--set` items
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    seconds: float  # end to end
    user: float  # the whole process tree's CPU time
    system: float
    max_rss_mib: float  # the largest single process's


def one_run(spec: Path, env: dict[str, str], out: Path, variant: Variant) -> Run:
    systems._fresh(out)
    cmd = [systems.THRESHER, "run", str(spec)]
    for item in variant.settings:
        cmd += ["--set", item]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    measured = run_measured(cmd, {**env, **variant.env}, watch=out, pattern="part-*.parquet")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return Run(measured.seconds, user, system, measured.max_rss / 2**20)


def take_turns(
    spec: Path, env: dict[str, str], out: Path, variants: Sequence[Variant], repeat: int
) -> dict[str, list[Run]]:
    """`repeat` runs of each variant; each round starts with the next variant in turn."""
    runs: dict[str, list[Run]] = {v.label: [] for v in variants}
    for attempt in range(repeat):
        order = [*variants[attempt % len(variants) :], *variants[: attempt % len(variants)]]
        for variant in order:
            run = one_run(spec, env, out, variant)
            runs[variant.label].append(run)
            said = f"{run.seconds:.2f} s, user {run.user:.2f} s, system {run.system:.2f} s"
            print(f"[{variant.label}] {said}, max RSS {run.max_rss_mib:.0f} MiB", flush=True)
    return runs


TABLE_HEAD = [
    "| variant | best (s) | median (s) | user CPU (s) | system CPU (s) | max RSS (MiB) |",
    "|---|---:|---:|---:|---:|---:|",
]


def table_rows(name: str, runs: Mapping[str, list[Run]]) -> list[str]:
    """One row per variant: best and median seconds, and the medians of the rest."""
    rows = []
    for label, found in runs.items():
        seconds = [r.seconds for r in found]
        rows.append(
            f"| {name}{label} | {min(seconds):.2f} | {statistics.median(seconds):.2f} |"
            f" {statistics.median(r.user for r in found):.2f} |"
            f" {statistics.median(r.system for r in found):.2f} |"
            f" {statistics.median(r.max_rss_mib for r in found):.0f} |"
        )
    return rows


def all_runs(name: str, runs: Mapping[str, list[Run]]) -> list[str]:
    """Every run's seconds, per variant."""
    return [
        f"- {name}{label}: " + ", ".join(f"{r.seconds:.2f}" for r in found)
        for label, found in runs.items()
    ]
