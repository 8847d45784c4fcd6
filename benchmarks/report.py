"""The report: a Markdown table per workload, the targets with PASS/FAIL, and a chart."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from systems import Result, Tuning
from workloads import Workload

DEFAULT, TUNED, OPTIMUM, NAIVE, RAY, ON_RAY, DAFT, SPARK = (
    "thresher (defaults)",
    "thresher tuned",
    "hand-written optimum",
    "per-row loop",
    "Ray Data",
    "thresher on Ray",
    "Daft",
    "Spark",
)
PEERS = (RAY, DAFT, SPARK)
# How each peer is set up, as a competent user of it would on this machine; the reasons
# are in raydata.py, daftjob.py and sparkjob.py.
PEER_SETUP = [
    "Every peer reads the same Parquet file, loads the model once per worker, and writes"
    " `id` + prediction as Parquet; its start-up is part of its time. Ray Data's and Daft's"
    " workers and threads are thresher's placement for the job (2 x 1 thread on 2 cores:"
    " one intra-op thread per worker for LightGBM, onnxruntime and torch, so workers do not"
    " fight over the cores; 1 x 2 for the 1,000-row job). Batch size: thresher tuned's for"
    " the matrix models (the size the model runs fastest at here); for MiniLM, 1,024 rows"
    " per UDF call, which SentenceTransformer.encode sorts by length and encodes 64 at a"
    " time. Memory: the `thresher` command gives its processes Arrow's jemalloc pool"
    " (thresher/cli/allocator.py), and so does the hand-written optimum; the peers and the"
    " per-row loop keep pyarrow's default pool (mimalloc), as their users would"
    " (benchmarks/results/allocator.md).",
    "",
    "- **Ray Data**: `read_parquet` -> `map_batches` with an actor class (`ActorPoolStrategy`"
    " of the placement's size, half a CPU per actor so the read and write tasks get CPUs)"
    " -> `write_parquet`. The text input is repartitioned into 8 blocks per actor: Ray reads"
    " it as one block otherwise, and one actor idles.",
    "- **Daft**: `read_parquet` -> a `@daft.cls(max_concurrency=workers)` class with a"
    " `@daft.method.batch(batch_size=...)` method -> `write_parquet`, native runner;"
    " `use_process` left to Daft, which picks threads or processes by measuring. Daft"
    " streams the file in morsels to whichever instance is free, so both have work.",
    "- **Spark**: `local[cores]`, `predict_batch_udf` (its `make_predict_fn` runs once per"
    " Python worker, reused across tasks), the features as one `struct` (one `to_numpy()`"
    " per batch), `write.parquet`; web UI off. Spark splits the matrix file at row groups,"
    " at least a partition per core; the text input is repartitioned into 4 partitions per"
    " core. Threads per Python worker: cores ÷ the partitions that run at once (Spark's"
    " own parallelism, not thresher's placement).",
]
PACKAGES = (
    "thresher",
    "pyarrow",
    "numpy",
    "lightgbm",
    "onnxruntime",
    "scikit-learn",
    "torch",
    "sentence-transformers",
    "ray",
    "daft",
    "pyspark",
)


@dataclass(frozen=True)
class WorkloadRun:
    """Every system's result on one workload, and what `thresher tune` said."""

    workload: Workload
    tuning: Tuning
    results: dict[str, Result]
    compile_seconds: float | None = None  # tree models: the one-off compile, before the runs


@dataclass(frozen=True)
class Target:
    """One of the design's performance targets, as measured."""

    claim: str
    figure: str
    passed: bool


def machine_facts() -> list[str]:
    """Cores, CPU model, memory, versions, and the environment that changes BLAS."""
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    model = names[0] if names else platform.processor() or "unknown"
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = ", ".join(f"{name} {_version(name)}" for name in PACKAGES)
    return [
        f"- CPU: {model}, {os.cpu_count()} cores; memory {memory:.0f} GiB",
        f"- Python {platform.python_version()} on {platform.platform()}",
        f"- {versions}",
        f"- OPENBLAS_CORETYPE = {os.environ.get('OPENBLAS_CORETYPE', '(not set)')} (left as found)",
    ]


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "(not installed)"


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"


def table(run: WorkloadRun) -> list[str]:
    """One workload's Markdown table, a row per system."""
    tuned = run.results[TUNED].rows_per_second
    lines = [
        "| system | seconds | rows/s | x thresher tuned | first output | peak RSS, tree"
        " | max RSS, one process | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for result in run.results.values():
        m = result.measured
        first = f"{m.first_output:.2f} s" if m.first_output is not None else "—"
        lines.append(
            f"| {result.system} | {result.seconds:,.2f} | {result.rows_per_second:,.0f}"
            f" | {result.rows_per_second / tuned:.3g} | {first} | {_mib(m.peak_tree_rss)}"
            f" | {_mib(m.max_rss)} | {result.note} |"
        )
    return lines


Results = dict[str, Result]


def _end_to_end_vs_stages(r: Results) -> float:
    return r[TUNED].seconds / r[OPTIMUM].seconds


def _defaults_vs_bare_process(r: Results) -> float:
    return r[DEFAULT].seconds / r[OPTIMUM].seconds


def _vs_ray(r: Results) -> float:
    return r[TUNED].rows_per_second / r[RAY].rows_per_second


def _vs_loop(r: Results) -> float:
    return r[TUNED].rows_per_second / r[NAIVE].rows_per_second


def _vs_model_only(r: Results) -> float:
    return r[TUNED].rows_per_second * r[OPTIMUM].stages["model"] / r[OPTIMUM].rows


def _defaults_vs_model_only(r: Results) -> float:
    return r[DEFAULT].rows_per_second * r[OPTIMUM].stages["model"] / r[OPTIMUM].rows


def _auto_vs_tuned(r: Results) -> float:
    return r[DEFAULT].rows_per_second / r[TUNED].rows_per_second


def _vs_daft(r: Results) -> float:
    return r[TUNED].rows_per_second / r[DAFT].rows_per_second


def _vs_spark(r: Results) -> float:
    return r[TUNED].rows_per_second / r[SPARK].rows_per_second


def _on_ray_vs_ray(r: Results) -> float:
    return r[ON_RAY].rows_per_second / r[RAY].rows_per_second


def _vs_hand_loop(r: Results) -> float:
    return r[TUNED].rows_per_second / r[OPTIMUM].rows_per_second


def _run_seconds(r: Results) -> float:
    return r[DEFAULT].measured.seconds


# (workloads, claim, limit, the figure is at most the limit (else at least), figure)
TARGETS: list[tuple[tuple[str, ...], str, float, bool, Callable[[Results], float]]] = [
    (
        ("tabular", "mlp", "tabular-10m"),
        "thresher tuned end to end ÷ (T_read + T_model + T_write) ≤ 1.15",
        1.15,
        True,
        _end_to_end_vs_stages,
    ),
    (
        ("tabular", "mlp", "minilm", "tabular-10m"),
        "thresher tuned ÷ Ray Data throughput (Ray start-up included) ≥ 2",
        2.0,
        False,
        _vs_ray,
    ),
    (
        ("tabular", "mlp", "minilm", "overhead", "tabular-10m"),
        "thresher tuned ÷ Daft throughput (start-up included) ≥ 1.1",
        1.1,
        False,
        _vs_daft,
    ),
    (
        ("tabular", "mlp", "minilm", "overhead", "tabular-10m"),
        "thresher tuned ÷ Spark throughput (start-up included) ≥ 3",
        3.0,
        False,
        _vs_spark,
    ),
    (
        ("tabular", "mlp", "minilm"),
        "(extra, not an issue target) thresher on Ray ÷ Ray Data throughput (both start Ray) ≥ 2",
        2.0,
        False,
        _on_ray_vs_ray,
    ),
    (("tabular",), "thresher tuned ÷ per-row loop throughput ≥ 50", 50.0, False, _vs_loop),
    (
        ("minilm",),
        "thresher tuned ÷ model-only throughput at its best batch size ≥ 0.95",
        0.95,
        False,
        _vs_model_only,
    ),
    (
        ("minilm",),
        "thresher (defaults) ÷ model-only throughput at its best batch size ≥ 0.95",
        0.95,
        False,
        _defaults_vs_model_only,
    ),
    (
        ("tabular", "mlp", "minilm"),
        "`auto` (defaults) ÷ tuned fixed size throughput ≥ 0.90",
        0.90,
        False,
        _auto_vs_tuned,
    ),
    (("overhead",), "`thresher run`, process start to exit, seconds ≤ 2", 2.0, True, _run_seconds),
    (
        ("overhead",),
        "thresher tuned ÷ the hand-written process (read → model → write), start to exit ≤ 1.2",
        1.2,
        True,
        _end_to_end_vs_stages,
    ),
    (
        ("overhead",),
        "thresher (defaults) ÷ the hand-written process, start to exit ≤ 1.2",
        1.2,
        True,
        _defaults_vs_bare_process,
    ),
    (
        ("python-mlp",),
        "thresher tuned end to end ÷ (T_read + T_model + T_write) ≤ 1.2",
        1.2,
        True,
        _end_to_end_vs_stages,
    ),
    (
        ("python-files",),
        "thresher tuned ÷ a hand-written single-process loop over the files, throughput ≥ 1.0",
        1.0,
        False,
        _vs_hand_loop,
    ),
    (
        ("python-overhead",),
        "thresher (defaults) ÷ the bare `python` process, start to exit ≤ 1.2",
        1.2,
        True,
        _defaults_vs_bare_process,
    ),
]


def targets(runs: dict[str, WorkloadRun]) -> list[Target]:
    """The design's performance targets that this run measured, each with its figure."""
    found = []
    for names, claim, limit, at_most, figure in TARGETS:
        for name in (n for n in names if n in runs):
            value = figure(runs[name].results)
            passed = value <= limit if at_most else value >= limit
            found.append(Target(f"{name}: {claim}", f"{value:.3g}", passed))
    return found


def chart(runs: dict[str, WorkloadRun], path: Path) -> None:
    """Throughput ratio to thresher tuned, per system per workload (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [DEFAULT, TUNED, ON_RAY, OPTIMUM, DAFT, RAY, SPARK, NAIVE]
    names = list(runs)
    present = {system for run in runs.values() for system in run.results}
    systems = [system for system in systems if system in present]
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(names)), 4.5))
    for i, system in enumerate(systems):
        ratios = [
            runs[n].results[system].rows_per_second / runs[n].results[TUNED].rows_per_second
            if system in runs[n].results
            else float("nan")  # not run on this workload (the python-model ones run no peers)
            for n in names
        ]
        offset = (i - len(systems) / 2 + 0.5) * width
        ax.bar([x + offset for x in range(len(names))], ratios, width, label=system)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("throughput ÷ thresher tuned (log)")
    ax.set_title("Rows/s relative to thresher tuned (higher is faster)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(
    runs: dict[str, WorkloadRun], path: Path, header: list[str], found: list[Target]
) -> None:
    """results.md: header lines, machine facts, targets, then one table per workload."""
    lines = [*header, "", "## Machine", "", *machine_facts(), "", "## Targets", ""]
    lines += [f"- **{'PASS' if t.passed else 'FAIL'}** {t.claim}: {t.figure}" for t in found]
    lines += ["", "## The peers, as set up", "", *PEER_SETUP]
    for run in runs.values():
        w, t = run.workload, run.tuning
        lines += ["", f"## {w.name}: {w.title}, {w.rows:,} rows", ""]
        lines += [
            f"`thresher tune` recommends batch.size = {t.recommended:,} (fastest measured:"
            f" {t.fastest:,}); placement: {t.workers} worker(s), {t.threads} thread(s) each.",
            "",
        ]
        if run.compile_seconds is not None:
            lines += [
                f"thresher compiled the trees once before the runs, in {run.compile_seconds:.1f} s"
                " (a cold `load_model`, as a user's first run of this model pays it); every run"
                " below found them in its cache.",
                "",
            ]
        lines += table(run)
    path.write_text("\n".join(lines) + "\n")


def write_results(name: str, lines: list[str], quick: bool) -> Path:
    """A side benchmark's `results/NAME.md` (`NAME-quick.md` for a --quick run), also
    printed."""
    folder = Path(__file__).resolve().parent / "results"
    folder.mkdir(exist_ok=True)
    target = folder / f"{name}{'-quick' if quick else ''}.md"
    target.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {target}")
    return target
