"""thresher serve's jobs on the Ray it keeps, against Ray Data, both with and without a
Ray that is already up (issue #17: "reuse a running Ray cluster ... thresher on Ray at
least 2x Ray Data").

    python benchmarks/serve_on_ray.py [--dir DIR] [--repeat 2] [--only mlp overhead]

For each matrix workload of `run.py` (the same files, the same tuned batch sizes as its
last full run: 4,096 rows for the 5M-row jobs, 512 for the 1,000-row job), taking turns,
best of `--repeat`:

- thresher serve: a real server with `[run] executor = "ray"`, which starts one Ray for
  its jobs; a job submitted through `POST /v1/jobs` and polled every 0.05 s until it
  succeeds (one untimed job first: a server is long-running);
- Ray Data on that same running cluster (`raydata.py --address`): the fair peer;
- Ray Data starting its own Ray, as in `run.py`;
- `thresher run` on Ray starting its own, as in `run.py`.

Ray Data is set up as in `run.py` (raydata.py's docstring). Prints a table and the
ratios; read them, not the seconds, on this shared machine.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow.parquet as pq
from workloads import Workload, prepare

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
# The tuned batch size and the placement (workers x threads) of run.py's last full run.
# MiniLM: thresher's `auto` (a size of 0 leaves the batch to the tuner), and for Ray Data
# 1,024 rows a call, encoded 64 at a time, as run.py hands it (raydata.py's docstring).
SETUP = {
    "tabular": (4096, 2, 1),
    "mlp": (4096, 2, 1),
    "overhead": (512, 1, 2),
    "minilm": (0, 2, 1),
}


@dataclass(frozen=True)
class Case:
    """One workload as every system runs it."""

    name: str
    workload: Workload
    size: int  # rows per model call
    workers: int
    threads: int
    job_file: Path  # the workload as JSON, for raydata.py
    env: dict[str, str]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--only", nargs="+", default=["mlp", "tabular", "overhead"])
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="thresher-serve-ray-"))
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONWARNINGS": "ignore"}
    cases = []
    for name in args.only:
        workload = prepare(name, root, quick=False)
        job_file = root / f"{name}.json"
        job_file.write_text(workload.to_json())
        cases.append(Case(name, workload, *SETUP[name], job_file, env))
    server = Server(root, cases, env)
    try:
        for case in cases:
            compare(case, server, root, args.repeat)
    finally:
        server.stop()


def compare(case: Case, server: Server, root: Path, repeat: int) -> None:
    server.job(case)  # untimed: a server is long-running
    systems: dict[str, Callable[[], float]] = {
        "thresher serve, its Ray": lambda: server.job(case),
        "Ray Data, that Ray": lambda: ray_data(case, root, server.ray_address),
        "Ray Data, own Ray": lambda: ray_data(case, root, None),
        "thresher run, own Ray": lambda: cli_on_ray(case, root),
    }
    times: dict[str, list[float]] = {label: [] for label in systems}
    for _ in range(repeat):
        for label, run in systems.items():
            times[label].append(run())
    best = {label: min(seconds) for label, seconds in times.items()}
    shape = f"{case.workers} x {case.threads}"
    print(f"\n{case.name} ({case.workload.rows:,} rows, batch {case.size}, {shape}):")
    for label, seconds in times.items():
        runs = [round(s, 2) for s in seconds]
        print(f"  {label:26s} best {best[label]:6.2f} s   runs {runs}")
    serve, own = best["thresher serve, its Ray"], best["Ray Data, own Ray"]
    print(f"  serve / Ray Data on the same running Ray: {best['Ray Data, that Ray'] / serve:.2f}x")
    print(f"  serve / Ray Data starting its own: {own / serve:.2f}x")
    print(
        f"  thresher run / Ray Data, each its own Ray: {own / best['thresher run, own Ray']:.2f}x"
    )


class Server:
    """`thresher serve` with every workload's model registered and jobs on Ray."""

    def __init__(self, root: Path, cases: list[Case], env: dict[str, str]) -> None:
        models = "".join(
            f'\n[models.{c.name}]\nkind = "{c.workload.kind}"\nuri = "{c.workload.model}"\n'
            f"options = {_toml_table(c.workload.options)}\n"
            for c in cases
        )
        config = root / "server.toml"
        config.write_text(
            f'data_dir = "{root / "data"}"\nallowed_roots = ["{root}"]\n\n'
            f'[run]\nexecutor = "ray"\nworkers = 2\n{models}'
        )
        store = f"sqlite:///{root / 'serve-store.db'}"
        self.token = subprocess.run(
            [str(BIN / "thresher"), "--store", store, "token", "create", "--tenant", "bench"],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout.strip()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.log = root / "server.log"
        self.process = subprocess.Popen(
            [
                str(BIN / "thresher"),
                "serve",
                "--port",
                str(port),
                "--config",
                str(config),
                "--store",
                store,
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60,
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"the server did not start:\n{self.log.read_text()}")
            time.sleep(0.2)
        found = re.search(r"Ray for this server's jobs: (\S+),", self.log.read_text())
        if found is None:
            raise SystemExit(f"the server started no Ray:\n{self.log.read_text()}")
        self.ray_address = found.group(1)

    def job(self, case: Case) -> float:
        """Submit the case's job, poll it to its end: the seconds that took."""
        workload = case.workload
        body = {
            "source": {"uri": workload.data, "format": "parquet"},
            "model": case.name,
            "columns": workload.features,
            "id_column": "id",
            "output_format": "parquet",
            "workers": case.workers,
            "batch": {"size": case.size or "auto"},
        }
        started = time.perf_counter()
        response = self.client.post("/v1/jobs", json=body)
        if response.status_code != 201:
            raise SystemExit(response.text)
        job_id = response.json()["id"]
        while (job := self.client.get(f"/v1/jobs/{job_id}").json())["status"] not in (
            "succeeded",
            "failed",
            "cancelled",
        ):
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        if job["status"] != "succeeded" or job["request_counts"]["completed"] != workload.rows:
            raise SystemExit(f"{job}\n{self.log.read_text()[-3000:]}")
        return seconds

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def ray_data(case: Case, root: Path, address: str | None) -> float:
    """raydata.py on the case, joining `address` or starting its own Ray."""
    out = root / "out-raydata"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    cmd = [sys.executable, str(HERE / "raydata.py"), str(case.job_file), str(out)]
    text = case.workload.output == "embedding"
    batches = (
        ["--batch-size", "1024", "--model-batch", "64"]
        if text
        else ["--batch-size", str(case.size)]
    )
    cmd += [*batches, "--workers", str(case.workers)]
    cmd += ["--threads", str(case.threads), "--cpus", "2"]
    cmd += ["--address", address] if address else []
    # The server's Ray checks tokens (Ray's default for a local cluster); a client that
    # joins it reads the token from ~/.ray/auth_token once told to use one.
    env = {**case.env, "RAY_AUTH_MODE": "token"} if address else case.env
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in out.glob("*.parquet"))
    assert rows == case.workload.rows, rows
    return seconds


def cli_on_ray(case: Case, root: Path) -> float:
    """`thresher run` of the case on a Ray of its own."""
    workload, out, spec = case.workload, root / "out-cli-ray", root / "cli-ray.toml"
    columns = ", ".join(f'"{c}"' for c in workload.features)
    size = case.size or '"auto"'
    spec.write_text(
        f'[source]\nuri = "{workload.data}"\nid_column = "id"\ncolumns = [{columns}]\n'
        f'[model]\nkind = "{workload.kind}"\nuri = "{workload.model}"\n'
        f"options = {_toml_table(workload.options)}\n"
        f"[batch]\nsize = {size}\n"
        f'[run]\nexecutor = "ray"\nworkers = {case.workers}\n'
        f'[sink]\nuri = "{out}/"\nforce = true\n'
    )
    store = f"sqlite:///{root / 'cli-store.db'}"
    env = {k: v for k, v in case.env.items() if k != "THRESHER_RAY_ADDRESS"}
    started = time.perf_counter()
    cmd = [str(BIN / "thresher"), "--store", store, "run", str(spec)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    return seconds


def _toml_table(options: dict[str, str]) -> str:
    return "{ " + ", ".join(f'{key} = "{value}"' for key, value in options.items()) + " }"


if __name__ == "__main__":
    main()
