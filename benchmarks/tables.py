"""Tables in and out against Parquet files: the tabular workload (LightGBM, 30 float
features) end to end, `thresher run` from process start to exit, with its predictions
written to a Parquet folder (the baseline), a Delta table, a DuckDB table and, when the
`iceberg` sink is installed, an Iceberg table; and read from a Delta table holding the
same rows instead of the Parquet file. Each variant's runs take turns with the baseline's,
so a ratio is the median of pairs that ran one after the other.

    python benchmarks/tables.py [--quick] [--repeat 5] [--dir DIR]

Targets (issue #37): every table sink at most 1.15 times the Parquet folder; the Delta source 1.1
times the Parquet file. Writes benchmarks/results/tables.md.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import systems
from ab import SideRun
from measure import run_measured
from report import write_results
from workloads import Workload, prepare

from thresher.plugins import Kind, lookup

TARGETS = {"source": 1.10, "sink": 1.15}


@dataclass
class Variant:
    name: str
    kind: str  # "sink" or "source": what it changes of the baseline job
    sink: dict[str, object] = field(default_factory=dict)
    source: dict[str, object] = field(default_factory=dict)
    reset: Callable[[], None] = lambda: None  # before each run: an empty target
    seconds: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)

    @property
    def paired(self) -> float:
        return statistics.median(a / b for a, b in zip(self.seconds, self.baseline, strict=True))


def toml(value: object) -> str:
    """A TOML value: inline tables and arrays, strings and numbers as JSON writes them."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return json.dumps(value)


def spec_text(workload: Workload, source: dict[str, object], sink: dict[str, object]) -> str:
    def table(values: dict[str, object]) -> str:
        return "\n".join(f"{k} = {toml(v)}" for k, v in values.items())

    return (
        f'[source]\n{table(source)}\nid_column = "id"\n'
        f"columns = {json.dumps(workload.features)}\n"
        f"[model]\nkind = {json.dumps(workload.kind)}\nuri = {json.dumps(workload.model)}\n"
        f"[run]\nworkers = {os.cpu_count() or 1}\n"
        f"[sink]\n{table(sink)}\n"
    )


def emptied(folder: Path) -> Callable[[], None]:
    """A reset that leaves `folder` empty: each sink's run starts from no table."""

    def reset() -> None:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)

    return reset


def new_catalog(folder: Path, properties: dict[str, str]) -> Callable[[], None]:
    """A reset that leaves an empty SQLite catalog with the `bench` namespace."""
    empty = emptied(folder)

    def reset() -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        empty()
        SqlCatalog("default", **properties).create_namespace("bench")

    return reset


def variants(workload: Workload, root: Path) -> list[Variant]:
    out = root / "out"
    found = [
        Variant("delta sink", "sink", sink={"uri": str(out / "delta" / "t"), "format": "delta"},
                reset=emptied(out / "delta")),
        Variant("duckdb sink", "sink",
                sink={"uri": f"duckdb:///{out}/duckdb/scores.duckdb?table=scores"},
                reset=emptied(out / "duckdb")),
        Variant("delta source", "source",
                source={"uri": str(delta_input(workload, root)), "format": "delta"}),
    ]  # fmt: skip
    if lookup(Kind.SINK, "iceberg") is not None:
        folder = out / "iceberg"
        catalog = {"type": "sql", "uri": f"sqlite:///{folder}/catalog.db", "warehouse": str(folder)}
        found.append(
            Variant("iceberg sink", "sink",
                    sink={"uri": "bench.scores", "format": "iceberg",
                          "options": {"catalog": catalog}},
                    reset=new_catalog(folder, catalog))
        )  # fmt: skip
    return found


def delta_input(workload: Workload, root: Path) -> Path:
    """The workload's rows as a Delta table laid out as the Parquet file is (one file, row
    groups of its size), so both plan alike (written once, reused)."""
    from deltalake import WriterProperties, write_deltalake

    table_dir = root / f"input-{workload.rows}.delta"
    if not table_dir.exists():
        source = pq.ParquetFile(workload.data)
        group_rows = source.metadata.row_group(0).num_rows
        write_deltalake(
            str(table_dir),
            source.read(),
            target_file_size=1 << 40,
            writer_properties=WriterProperties(max_row_group_size=group_rows),
        )
    return table_dir


def one_run(spec: Path, env: dict[str, str]) -> float:
    return run_measured([systems.THRESHER, "run", str(spec)], env, sample=False).seconds


def measure(workload: Workload, root: Path, repeat: int) -> list[Variant]:
    env = systems.environment(root)
    systems.compile_trees(workload, env)
    baseline_sink = {"uri": str(root / "out" / "parquet") + "/", "force": True}
    baseline_source: dict[str, object] = {"uri": workload.data}
    base = root / "baseline.toml"
    base.write_text(spec_text(workload, baseline_source, baseline_sink))
    found = variants(workload, root)
    for variant in found:
        spec = root / f"{variant.name.replace(' ', '-')}.toml"
        sink = variant.sink or baseline_sink
        spec.write_text(spec_text(workload, variant.source or baseline_source, sink))
        variant.reset()
        one_run(spec, env)  # untimed: the page cache, the table created
        one_run(base, env)
        for attempt in range(repeat):
            for turn in ((variant, base), (base, variant))[attempt % 2]:
                if turn is base:
                    variant.baseline.append(one_run(base, env))
                else:
                    variant.reset()
                    variant.seconds.append(one_run(spec, env))
            print(f"[{variant.name}] run {attempt + 1}: {variant.seconds[-1]:.2f} s,"
                  f" baseline {variant.baseline[-1]:.2f} s", flush=True)  # fmt: skip
    return found


def main() -> None:
    side = SideRun.parse(__doc__, "tables")
    workload = prepare("tabular", side.root, side.args.quick)
    found = measure(workload, side.root, side.args.repeat)
    lines = [
        *side.heading("Tables in and out, against Parquet files", "tables.py"),
        "",
        f"The tabular workload ({workload.title}, {workload.rows:,} rows), `thresher run` end"
        f" to end with {os.cpu_count()} workers; each variant's runs take turns with the same"
        " job over Parquet files in and a Parquet folder out, and its ratio is the median of"
        " its pairs. A sink's run starts from an empty target (a new table each time).",
        "",
        "| variant | median (s) | Parquet, median (s) | ratio, paired | target | met |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for v in found:
        target = TARGETS[v.kind]
        lines.append(
            f"| {v.name} | {statistics.median(v.seconds):.2f} |"
            f" {statistics.median(v.baseline):.2f} | {v.paired:.3f} | ≤ {target:.2f} |"
            f" {'yes' if v.paired <= target else 'no'} |"
        )
    lines += ["", "All runs (s):"]
    for v in found:
        lines.append(
            f"- {v.name}: {', '.join(f'{t:.2f}' for t in v.seconds)};"
            f" Parquet {', '.join(f'{t:.2f}' for t in v.baseline)}"
        )
    write_results("tables", lines, side.args.quick)


if __name__ == "__main__":
    main()
