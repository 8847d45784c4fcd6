"""One function per system under test; each runs it as a subprocess and returns a Result.

Every system reads the same input file and writes `id` + predictions as Parquet into its
own folder, which `compare.py` then checks against the hand-written optimum.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from measure import Measured, run_measured
from workloads import Workload

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
THRESHER = str(Path(sys.executable).parent / "thresher")
CORES = os.cpu_count() or 1
# The peers' (Ray Data, Daft, Spark) batches for MiniLM: the engine hands 1,024 rows (Ray
# Data's default batch), which SentenceTransformer.encode sorts by length and encodes 64 at
# a time (the competent Ray setup's batch).
PEER_TEXT_BATCH, PEER_TEXT_MODEL_BATCH = 1024, 64


@dataclass(frozen=True)
class Result:
    """One system's run of one workload."""

    system: str
    seconds: float  # the figure compared: end to end, or as the note says
    rows: int
    measured: Measured
    out: Path
    note: str = ""
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class Tuning:
    """What `thresher tune` recommends, and how the job is placed on this machine."""

    recommended: int
    fastest: int  # the size with the highest measured throughput
    workers: int
    threads: int


def environment(root: Path) -> dict[str, str]:
    """The environment every system runs in: a private job store, our modules importable."""
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    # Bytecode caching on, as on a user's machine: with it off (some sandboxes set this),
    # every process compiles an editable install's modules from source at each start.
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {
        **inherited,
        "THRESHER_STORE": f"sqlite:///{root / 'store.db'}",
        "THRESHER_CACHE": str(root / "cache"),
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": path,
    }


def write_spec(workload: Workload, path: Path, out: Path) -> Path:
    """A thresher job spec for the workload; every value not written is thresher's default."""
    options = ", ".join(f"{k} = {json.dumps(v)}" for k, v in workload.options.items())
    model = f"[model]\nkind = {json.dumps(workload.kind)}\nuri = {json.dumps(workload.model)}\n"
    model += f"options = {{ {options} }}\n"
    if workload.batch_format:
        model += f"batch_format = {json.dumps(workload.batch_format)}\n"
    data = workload.data  # a folder of files (python-files) is named by its glob
    data = f"{data}/*.parquet" if Path(data).is_dir() else data
    path.write_text(
        f'[source]\nuri = {json.dumps(data)}\nid_column = "id"\n'
        f"columns = {json.dumps(workload.features)}\n{model}"
        f"[sink]\nuri = {json.dumps(str(out) + '/')}\nforce = true\n"
    )
    return path


def side_job(workload: Workload, root: Path, tag: str) -> tuple[dict[str, str], Path, Path]:
    """A side benchmark's thresher job of `workload`: its environment, spec and output
    folder (files named by `tag`), the trees compiled once so no measured run does."""
    env = environment(root)
    compile_trees(workload, env)
    out = root / f"out-{workload.name}-{tag}"
    return env, write_spec(workload, root / f"{workload.name}-{tag}.toml", out), out


def tune(workload: Workload, spec_path: Path) -> Tuning:
    """`thresher tune`'s sweep and recommendation, called as a library."""
    from thresher.plan import plan_input, plan_placement
    from thresher.plan.tune import recommend, sweep
    from thresher.spec import load_spec

    spec = load_spec(spec_path)
    rows = sweep(spec, workload.tune_sizes or None).rows
    fastest = max(rows, key=lambda row: row.rows_per_second)
    plan = plan_input(spec)
    placement = plan_placement(spec.run, len(plan.shards))
    return Tuning(
        recommend(rows).batch_size, fastest.batch_size, placement.workers, placement.threads
    )


def thresher(
    workload: Workload, root: Path, env: dict[str, str], size: int | None, on_ray: bool = False
) -> Result:
    """`thresher run` through the real CLI: defaults (`size` None: "auto"), or a fixed size;
    `on_ray` runs the same job on the Ray executor (a local Ray, start-up included)."""
    label = "thresher on Ray" if on_ray else "thresher tuned" if size else "thresher (defaults)"
    out = root / f"out-{workload.name}-thresher-{size or 'auto'}{'-ray' if on_ray else ''}"
    _fresh(out)
    spec = write_spec(workload, root / f"{workload.name}.toml", out)
    overrides = ["--set", f"batch.size={size}"] if size else []
    overrides += ["--set", 'run.executor="ray"'] if on_ray else []
    measured = run_measured(
        [THRESHER, "run", str(spec), *overrides], env, watch=out, pattern="part-*.parquet"
    )
    manifest = json.loads((out / "_SUCCESS").read_text())
    if manifest["rows_out"] != workload.rows:
        raise SystemExit(f"{label}: wrote {manifest['rows_out']} rows of {workload.rows}")
    note = f"batch.size = {size or 'auto'}; manifest batch_size {manifest['batch_size']}"
    return Result(label, measured.seconds, workload.rows, measured, out, note)


COMPILE = """
import sys, time
from thresher.models import LoadContext, load_model
from thresher.spec import ModelSection
clock = time.perf_counter()
spec = ModelSection(kind=sys.argv[1], uri=sys.argv[2], options={"compile": True})
load_model(spec, LoadContext(features=(), threads=1))
print(time.perf_counter() - clock)
"""


def compile_trees(workload: Workload, env: dict[str, str]) -> float | None:
    """Seconds thresher takes to load a tree model with an empty compile cache (it
    compiles it); None for other models. The runs that follow find it cached."""
    if workload.kind not in {"lightgbm", "xgboost"}:
        return None
    shutil.rmtree(env["THRESHER_CACHE"], ignore_errors=True)
    cmd = [PYTHON, "-c", COMPILE, workload.kind, workload.model]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


def optimum(workload: Workload, root: Path, env: dict[str, str], hint: int) -> Result:
    """The hand-written optimum; its figure is T_read + T_model + T_write (or the whole
    process, for the fixed-overhead job)."""
    out = root / f"out-{workload.name}-optimum"
    _fresh(out)
    cmd = [PYTHON, str(HERE / "handwritten.py"), "optimum", _workload_file(workload, root)]
    cmd += [str(out), "--batch-size", str(hint), "--threads", str(CORES)]
    # The optimum takes Arrow's buffers from jemalloc, as thresher's processes do
    # (benchmarks/results/allocator.md): a bound of what one process can do should not
    # pay for pyarrow's default pool giving its pages back between batches.
    measured = run_measured(cmd, {**env, "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}, watch=out)
    stages = json.loads(measured.stdout.strip().splitlines()[-1])
    total = stages["read"] + stages["model"] + stages["write"]
    note = (
        f"read {stages['read']:.2f} + model {stages['model']:.2f} + write {stages['write']:.2f} s"
        f" (batch {_count(stages['batch_size'])}, {CORES} threads;"
        f" process {measured.seconds:.1f} s)"
    )
    if "model_library" in stages:
        note += (
            f"; trees run by thresher's compiled library on the in-memory matrix"
            f" (LightGBM's own predict: model {stages['model_library']:.2f} s)"
        )
    seconds = measured.seconds if workload.whole_process else total
    return Result("hand-written optimum", seconds, workload.rows, measured, out, note, stages)


def _count(size: int | str) -> str:
    return f"{size:,}" if isinstance(size, int) else size


def naive(workload: Workload, root: Path, env: dict[str, str]) -> Result:
    """A per-row Python loop on `naive_rows` rows, extrapolated to the whole input (or the
    whole process, for the fixed-overhead job)."""
    out = root / f"out-{workload.name}-naive"
    _fresh(out)
    cmd = [PYTHON, str(HERE / "handwritten.py"), "naive", _workload_file(workload, root)]
    measured = run_measured([*cmd, str(out), "--threads", str(CORES)], env)
    loop = json.loads(measured.stdout.strip().splitlines()[-1])
    seconds = loop["loop"] * workload.rows / loop["rows"]
    note = f"{loop['rows']:,} rows in {loop['loop']:.2f} s, extrapolated; memory of the sample run"
    if workload.kind == "lightgbm":
        note += "; LightGBM's own predict"
    if workload.whole_process:
        seconds, note = measured.seconds, f"process start to exit; {loop['rows']:,} rows"
    return Result("per-row loop", seconds, workload.rows, measured, out, note)


def ray_data(workload: Workload, root: Path, env: dict[str, str], tuning: Tuning) -> Result:
    """Ray Data `map_batches` with an actor pool of thresher's placement (raydata.py)."""
    out = root / f"out-{workload.name}-ray"
    _fresh(out)
    cmd = [PYTHON, str(HERE / "raydata.py"), _workload_file(workload, root), str(out)]
    batches, size = _peer_batches(workload, tuning)
    cmd += [*batches, "--workers", str(tuning.workers)]
    cmd += ["--threads", str(tuning.threads), "--cpus", str(CORES)]
    measured = run_measured(cmd, env, watch=out)
    note = f"{tuning.workers} actor(s), {tuning.threads} thread(s) each; {size}"
    if workload.output == "embedding":
        note += "; input repartitioned into 8 blocks per actor"
    note += "; ray.init included"
    return Result(
        "Ray Data", measured.seconds, workload.rows, measured, out, _peer_note(workload, note)
    )


def daft(workload: Workload, root: Path, env: dict[str, str], tuning: Tuning) -> Result:
    """Daft: `read_parquet` -> a `@daft.cls` batch UDF -> `write_parquet` (daftjob.py)."""
    out = root / f"out-{workload.name}-daft"
    _fresh(out)
    batches, size = _peer_batches(workload, tuning)
    cmd = [PYTHON, str(HERE / "daftjob.py"), _workload_file(workload, root), str(out)]
    cmd += [*batches, "--workers", str(tuning.workers)]
    cmd += ["--threads", str(tuning.threads)]
    measured = run_measured(cmd, env, watch=out)
    note = (
        f"{tuning.workers} instance(s), {tuning.threads} thread(s) each; {size}; start-up included"
    )
    return Result(
        "Daft", measured.seconds, workload.rows, measured, out, _peer_note(workload, note)
    )


def spark(workload: Workload, root: Path, env: dict[str, str], tuning: Tuning) -> Result:
    """Spark: `local[cores]`, `predict_batch_udf` (sparkjob.py)."""
    out = root / f"out-{workload.name}-spark"
    _fresh(out)
    batches, size = _peer_batches(workload, tuning)
    cmd = [PYTHON, str(HERE / "sparkjob.py"), _workload_file(workload, root), str(out)]
    cmd += [*batches, "--cores", str(CORES)]
    measured = run_measured(cmd, env, watch=out)
    partitions = measured.stdout.strip().splitlines()[-1]  # "N partitions, T thread(s) ..."
    note = f"local[{CORES}], {partitions}; {size}; JVM start-up included"
    return Result(
        "Spark", measured.seconds, workload.rows, measured, out, _peer_note(workload, note)
    )


def _peer_batches(workload: Workload, tuning: Tuning) -> tuple[list[str], str]:
    """The peers' batch arguments and their note: thresher tuned's size for the matrix
    models; for text, 1,024 rows encoded 64 at a time (see PEER_TEXT_BATCH)."""
    if workload.output == "embedding":
        args = ["--batch-size", str(PEER_TEXT_BATCH), "--model-batch", str(PEER_TEXT_MODEL_BATCH)]
        return args, f"batch {PEER_TEXT_BATCH:,}, encoded {PEER_TEXT_MODEL_BATCH} at a time"
    return ["--batch-size", str(tuning.recommended)], f"batch {tuning.recommended}"


def _peer_note(workload: Workload, note: str) -> str:
    if workload.kind == "lightgbm":
        note += "; LightGBM's own predict, as its users write it"
    return note


def _fresh(out: Path) -> None:
    """An old output folder would make the first-output poll fire at once."""
    shutil.rmtree(out, ignore_errors=True)


def _workload_file(workload: Workload, root: Path) -> str:
    path = root / f"{workload.name}.json"
    path.write_text(workload.to_json())
    return str(path)
