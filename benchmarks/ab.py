"""A/B runs of one `thresher run`: the same job under a few variants (extra `--set`s, extra
environment), taking turns so a busy host's drift falls on every variant alike, each run
end to end with the process tree's user and system CPU time and its largest process's
peak RSS. The side benchmarks that ask "is this setting better?" share it."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
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


@dataclass(frozen=True)
class SideRun:
    """A side benchmark's command line (`--quick`, `--repeat`, `--dir`), its folder, and
    when it started and how busy the machine was then."""

    args: argparse.Namespace
    root: Path
    started: float
    load: float

    @classmethod
    def parse(cls, doc: str, prefix: str) -> SideRun:
        parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
        parser.add_argument("--quick", action="store_true", help="200,000 rows, not 5,000,000")
        parser.add_argument("--repeat", type=int, default=5)
        parser.add_argument("--dir", type=Path)
        args = parser.parse_args()
        root = args.dir or Path(tempfile.mkdtemp(prefix=f"thresher-{prefix}-"))
        root.mkdir(parents=True, exist_ok=True)
        return cls(args, root, time.time(), os.getloadavg()[0])

    def heading(self, title: str, script: str) -> list[str]:
        """The results file's title and the line that says how it was made."""
        quick = " --quick" if self.args.quick else ""
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started))
        return [
            f"# {title}" + (" (--quick)" if quick else ""),
            "",
            f"`python benchmarks/{script}{quick} --repeat {self.args.repeat}`, run {when};"
            f" load average (1 min) {self.load:.1f} at the start,"
            f" {os.getloadavg()[0]:.1f} at the end.",
        ]


def ab_report(
    side: SideRun, heading: tuple[str, str], what: str, tables: list[str], listed: list[str]
) -> list[str]:
    """An A/B results file: `heading` (title, script), what was run, the table, every run."""
    return [
        *side.heading(*heading),
        "",
        what,
        "",
        *TABLE_HEAD,
        *tables,
        "",
        "All runs (s):",
        *listed,
    ]
