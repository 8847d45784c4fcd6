"""Image classification over a folder of JPEGs (issue #38, "Speed"): thresher beside Ray
Data, Daft and a hand-written PyTorch DataLoader loop.

    python benchmarks/images.py                                # 20,000 images, every system
    python benchmarks/images.py --images 2000 --systems thresher,loop
    python benchmarks/images.py --daft-python ~/.cache/thresher-bench/daft-venv/bin/python

The images (about 256x256: sides of 256 to 304 pixels, smooth pictures with noise made
by tests/media_files.py's `photo`, JPEG quality 90) are made once into
benchmarks/data/images-N/, and a ResNet-18 with random weights (tests/media_files.py's
`resnet18`, 10 classes) is saved once with torch.export beside them. Every system reads
the folder, decodes, prepares each image the same way (shorter side to 256, the centre
224x224, ImageNet's normalisation), runs the model in batches of `--batch-size` and
writes `path`, the top class and its probability as Parquet; each runs as a subprocess,
measured from outside (measure.py: wall seconds, peak RSS of its process tree).

thresher runs through its CLI, `thresher run` of a spec with `format = "images"` and
`kind = "vision"`, placement its own; the peers get `--workers` workers of `--threads`
threads (default: one single-threaded worker per core, the placement thresher picks on a
small machine). How each peer is set up: image_peers.py. Daft caps pyarrow below the
version the project's environment holds, so it runs in a virtual environment of its own
(`--daft-python`, made by daft_env.sh); without one it is skipped, saying so.

Afterwards the outputs are compared image by image: the share whose top class agrees
with thresher's, and the largest difference in its probability. Writes
benchmarks/results/images.md, whose first line names the command (and so the size).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import systems
from measure import Measured, run_measured
from report import machine_facts, write_results

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from media_files import image_bytes, photo, resnet18, save_exported  # noqa: E402

FULL = 20_000
CPU = re.compile(r"(?:User|System) time \(seconds\): ([0-9.]+)")
CALIBRATION = 32
NAMES = {"thresher": "thresher", "ray": "Ray Data", "daft": "Daft", "loop": "DataLoader loop"}
SPEC = """[source]
uri = "{images}/"
format = "images"
id_column = "path"

[model]
kind = "vision"
uri = "{model}"
options = {{ image = {{ size = 256, crop = 224 }} }}

[sink]
uri = "{out}/"
force = true
"""


@dataclass(frozen=True)
class Run:
    """One system's run: its measurement and its predictions by file name."""

    system: str
    measured: Measured
    predictions: dict[str, tuple[int, float]]
    note: str


def _write_image(task: tuple[Path, int]) -> None:
    path, seed = task
    path.write_bytes(image_bytes(picture(seed), "JPEG"))


def picture(seed: int) -> np.ndarray:
    """Image `seed`'s pixels: sides of 256 to 304."""
    return photo(seed, 256 + seed % 3 * 16, 256 + seed % 4 * 16)


def make_data(count: int) -> tuple[Path, Path]:
    """The folder of `count` JPEGs and the model file, made once (reused after)."""
    folder = HERE / "data" / f"images-{count}"
    done = folder / ".complete"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tasks = [(folder / f"img{i:05d}.jpg", i) for i in range(count)]
        with multiprocessing.Pool(systems.CORES) as pool:
            pool.map(_write_image, tasks, chunksize=64)
        done.write_text(f"{count}\n")
    model = HERE / "data" / "resnet18-224.pt2"
    if not model.exists():
        save_exported(classifier(), model, side=224)
    return folder, model


def classifier() -> Any:
    """`resnet18()` with its last layer made to tell the pictures apart.

    With random weights every picture's pooled features are nearly the same (their spread
    is a tenth of their size), so the random last layer gives one class to almost every
    image, and an agreement of labels would check nothing. The last layer here is random
    weights over the features centred on, and scaled by, those of `CALIBRATION` pictures
    (seeds 0 to 31, the first images of every folder): logits of about unit size whose
    top class varies from image to image.
    """
    import torch
    from image_peers import prepare

    model = resnet18()
    pixels = [prepare(picture(seed)) for seed in range(CALIBRATION)]
    with torch.inference_mode():
        features = model[:-1](torch.from_numpy(np.stack(pixels)))  # type: ignore[index]
        mean, spread = features.mean(0), features.std(0).mean()
        head = model[-1]  # type: ignore[index]
        generator = torch.Generator().manual_seed(0)
        weight = torch.randn(head.weight.shape, generator=generator) / (spread * 512**0.5)
        head.weight.copy_(weight)
        head.bias.copy_(-weight @ mean)
    return model


def predictions(out: Path) -> dict[str, tuple[int, float]]:
    """File name -> (top class, its probability) from a system's Parquet output."""
    table = pq.read_table(out, columns=["path", "label", "score"])
    return {
        Path(str(path)).name: (int(label), float(score))
        for path, label, score in zip(
            table["path"].to_pylist(),
            table["label"].to_pylist(),
            table["score"].to_pylist(),
            strict=True,
        )
    }


def run_thresher(images: Path, model: Path, root: Path, batch: int) -> Run:
    out = root / "out-thresher"
    spec = root / "images.toml"
    spec.write_text(SPEC.format(images=images, model=model, out=out))
    cmd = [systems.THRESHER, "run", str(spec), "--set", f"batch.size={batch}"]
    measured = run_measured(cmd, systems.environment(root), watch=out, pattern="part-*.parquet")
    manifest = json.loads((out / "_SUCCESS").read_text())
    if manifest["rows_out"] != len(list(images.glob("*.jpg"))):
        raise SystemExit(f"thresher wrote {manifest['rows_out']} rows; see {out}/_errors")
    note = (
        f"`thresher run`, batch.size = {batch}; {manifest['workers']} workers of"
        f" {manifest['threads_per_worker']} intra-op thread(s), its own placement"
    )
    return Run("thresher", measured, predictions(out), note)


def run_peer(
    system: str, python: str, data: tuple[Path, Path], root: Path, args: argparse.Namespace
) -> Run:
    """image_peers.py's `system` as a subprocess of `python`, measured."""
    images, model = data
    out = root / f"out-{system}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [python, str(HERE / "image_peers.py"), system, str(images), str(model), str(out)]
    cmd += ["--batch-size", str(args.batch_size), "--workers", str(args.workers)]
    cmd += ["--threads", str(args.threads)]
    measured = run_measured(cmd, systems.environment(root), watch=out, pattern="*.parquet")
    if system == "loop":
        threads = args.workers * args.threads
        place = f"{args.workers} DataLoader workers, the model in the main process on {threads}"
    else:
        threads = args.threads
        place = f"{args.workers} workers of {threads}"
    note = f"batch {args.batch_size}; {place} intra-op thread{'s' if threads > 1 else ''}"
    return Run(system, measured, predictions(out), note)


def agreement(runs: dict[str, Run]) -> list[str]:
    """Each peer's agreement with thresher, image by image."""
    base = runs["thresher"].predictions
    lines = []
    for system, run in runs.items():
        if system == "thresher":
            continue
        shared = base.keys() & run.predictions.keys()
        same = sum(base[k][0] == run.predictions[k][0] for k in shared)
        diff = max((abs(base[k][1] - run.predictions[k][1]) for k in shared), default=0.0)
        missing = len(base.keys() ^ run.predictions.keys())
        lines.append(
            f"- {NAMES[system]}: top class equal to thresher's for {same:,} of {len(shared):,}"
            f" images ({same / max(len(shared), 1):.2%}); largest difference in its"
            f" probability {diff:.2e}; {missing} images in one output and not the other"
        )
    return lines


def table(runs: dict[str, Run], count: int) -> list[str]:
    base = runs["thresher"].measured.seconds
    lines = [
        "| system | seconds | images/s | thresher ÷ system (throughput) | CPU s | peak RSS, tree"
        " | note |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for system, run in runs.items():
        m = run.measured
        lines.append(
            f"| {NAMES[system]} | {m.seconds:,.2f} | {count / m.seconds:,.1f}"
            f" | {m.seconds / base:.2f} | {cpu_seconds(m):,.1f}"
            f" | {m.peak_tree_rss / 2**20:,.0f} MiB | {run.note} |"
        )
    return lines


def cpu_seconds(measured: Measured) -> float:
    """User and system seconds as `time -v` reports them: the command's and its
    descendants' that were waited for (Ray's own daemons are not)."""
    found = CPU.findall(measured.stderr)
    return sum(float(seconds) for seconds in found)


def verdicts(runs: dict[str, Run]) -> list[str]:
    """The issue's targets: ≥ 1.1x the faster peer, ≥ 0.95x the hand loop."""
    base = runs["thresher"].measured.seconds
    lines = []
    peers = [s for s in ("ray", "daft") if s in runs]
    if peers:
        faster = min(peers, key=lambda s: runs[s].measured.seconds)
        ratio = runs[faster].measured.seconds / base
        verdict = "met" if ratio >= 1.1 else "not met"
        lines.append(
            f"- thresher ÷ the faster peer ({NAMES[faster]}): **{ratio:.2f}x**"
            f" (target ≥ 1.1: {verdict})"
        )
    if "loop" in runs:
        ratio = runs["loop"].measured.seconds / base
        verdict = "met" if ratio >= 0.95 else "not met"
        lines.append(
            f"- thresher ÷ the DataLoader loop: **{ratio:.2f}x** (target ≥ 0.95: {verdict})"
        )
    return lines


def daft_version(python: str) -> str:
    done = subprocess.run(
        [
            python,
            "-c",
            "import daft, torch; print(f'daft {daft.__version__}, torch {torch.__version__}')",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=FULL)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--systems", default="thresher,ray,daft,loop")
    parser.add_argument("--daft-python", help="a Python with daft and torch (daft_env.sh)")
    parser.add_argument("--workers", type=int, default=systems.CORES)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dir", type=Path, help="working folder (default: a new temporary one)")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(chosen) - NAMES.keys()
    if unknown or "thresher" not in chosen:
        parser.error(f"--systems: thresher and any of ray, daft, loop (not {sorted(unknown)})")
    root = args.dir or Path(tempfile.mkdtemp(prefix="thresher-images-"))
    root.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC)
    load = os.getloadavg()[0]
    images, model = make_data(args.images)
    skipped = []
    runs: dict[str, Run] = {}
    for system in chosen:
        if system == "thresher":
            runs[system] = run_thresher(images, model, root, args.batch_size)
        elif system == "daft" and not (args.daft_python and Path(args.daft_python).exists()):
            skipped.append(
                "- Daft: skipped, no `--daft-python` (a Python with daft and torch: make one"
                " with benchmarks/daft_env.sh)"
            )
            continue
        else:
            python = args.daft_python if system == "daft" else systems.PYTHON
            runs[system] = run_peer(system, python, (images, model), root, args)
        m = runs[system].measured
        print(f"{NAMES[system]}: {m.seconds:.2f} s, peak {m.peak_tree_rss / 2**20:,.0f} MiB")
    shown = {s: runs[s] for s in NAMES if s in runs}
    command = " ".join(["python benchmarks/images.py", *sys.argv[1:]])
    lines = [
        "# Image classification: thresher, Ray Data, Daft and a DataLoader loop (issue #38)",
        "",
        f"`{command}`, {started:%Y-%m-%d %H:%M} UTC, load average {load:.1f} at the start"
        f" on {systems.CORES} cores. {args.images:,} JPEGs (sides 256-304), ResNet-18 with"
        " random weights (torch.export), shorter side to 256, centre 224, ImageNet"
        " normalisation; Parquet out. One run of each system, start to exit; CPU seconds as"
        " `time -v` counts them (a daemon not waited for, as Ray's, is left out).",
        "",
        *table(shown, args.images),
        "",
        *verdicts(shown),
        "",
        "Agreement (every system's output against thresher's):",
        "",
        *agreement(shown),
        *skipped,
        "",
        "How each system is set up: benchmarks/image_peers.py's docstring. To run it:"
        " `benchmarks/daft_env.sh` once (prints the Daft venv's python), then"
        " `PYTHONPATH=src python benchmarks/images.py --daft-python PATH`; `--images`"
        " and `--systems` for a smaller run.",
        "",
        "Machine:",
        "",
        *machine_facts(),
    ]
    if "daft" in runs:
        lines.append(f"- the Daft venv ({args.daft_python}): {daft_version(args.daft_python)}")
    write_results("images", lines, quick=False)


if __name__ == "__main__":
    main()
