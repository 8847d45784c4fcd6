"""`run.device`: which GPUs a local run sees, one worker per GPU, and what each worker
process is shown. The NVIDIA driver's GPU list is faked with a folder; the workers are
real processes."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from thresher.coordinator.job import run_job
from thresher.errors import SpecError
from thresher.plan import devices, plan_placement, worker_slots
from thresher.plan.devices import run_gpus, visible_gpus
from thresher.spec import JobSpec, RunSection
from thresher.store import open_store

# Each row's prediction: the CUDA_VISIBLE_DEVICES its worker process was started with.
MODEL = """
import os


class ShowsDevices:
    def predict(self, batch):
        seen = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        return {"prediction": [seen] * len(batch)}
"""


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver that lists two GPUs, as /proc/driver/nvidia/gpus does (one folder each)."""
    driver = tmp_path / "nvidia-gpus"
    for address in ("0000:17:00.0", "0000:65:00.0"):
        (driver / address).mkdir(parents=True)
    monkeypatch.setattr(devices, "NVIDIA_GPUS", driver)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize(
    ("listed", "seen"),
    [
        (None, ["0", "1"]),
        ("1", ["1"]),
        ("1,0", ["1", "0"]),
        ("0,5,1", ["0"]),  # CUDA stops at the first entry that is no device
        ("", []),
        ("-1", []),
        ("GPU-8c1f2d3e", ["GPU-8c1f2d3e"]),
    ],
)
def test_visible_gpus_follow_the_driver_and_cuda_visible_devices(
    two_gpus: None, listed: str | None, seen: list[str]
) -> None:
    environ = {} if listed is None else {"CUDA_VISIBLE_DEVICES": listed}
    assert visible_gpus(environ) == seen


def test_without_a_driver_there_is_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "NVIDIA_GPUS", tmp_path / "absent")
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0"}) == []
    assert run_gpus(RunSection()) == []
    with pytest.raises(SpecError, match=r"run\.device: 'cuda', but no NVIDIA GPU is visible"):
        run_gpus(RunSection(device="cuda"))
    placement = plan_placement(RunSection(), 100)
    assert placement.device == "cpu" and placement.devices is None
    assert placement.workers == worker_slots(RunSection()) == (os.cpu_count() or 1)
    # CPU workers are forked from a zygote, unless asked to spawn; one shard runs inline.
    assert placement.forked and "forked from one model load" in placement.describe()
    assert not plan_placement(RunSection(start_method="spawn"), 100).forked
    assert not plan_placement(RunSection(executor="ray"), 100).forked
    one = plan_placement(RunSection(), 1)
    assert one.inline and not one.forked


def test_one_worker_per_gpu_each_with_its_own(two_gpus: None) -> None:
    cores = os.cpu_count() or 1
    placement = plan_placement(RunSection(), 100)
    assert (placement.workers, placement.devices, placement.device) == (2, ("0", "1"), "cuda")
    assert placement.threads == max(1, cores // 2)
    assert placement.describe().endswith("GPU 0, 1")
    assert plan_placement(RunSection(), 1).devices == ("0",)  # never more workers than shards
    assert plan_placement(RunSection(workers=3), 100).devices == ("0", "1", "0")  # in turn
    hidden = plan_placement(RunSection(device="cpu"), 100)
    assert (hidden.workers, hidden.devices, hidden.device) == (cores, ("",) * cores, "cpu")
    assert plan_placement(RunSection(executor="ray", device="cuda"), 100).devices is None
    assert not placement.forked, "CUDA does not survive a fork: GPU workers are spawned"
    assert hidden.forked, "GPUs hidden: CPU workers are forked"


def shown_devices(tmp_path: Path, run: dict[str, object]) -> tuple[list[str], dict[str, object]]:
    """Run a 20,000-row job in-process (real worker processes); the devices each row saw,
    and the manifest."""
    pq.write_table(pa.table({"id": range(20_000), "x": [1.0] * 20_000}), tmp_path / "in.parquet")
    (tmp_path / "shows.py").write_text(MODEL, encoding="utf-8")
    spec = JobSpec.model_validate(
        {
            "source": {"uri": str(tmp_path / "in.parquet"), "id_column": "id"},
            "model": {"kind": "python", "uri": f"{tmp_path / 'shows.py'}:ShowsDevices"},
            "run": run,
            "sink": {"uri": f"{tmp_path / 'out'}/"},
        }
    )
    result = run_job(spec, open_store(f"sqlite:///{tmp_path / 'store.db'}"))
    assert result.succeeded, result.problems
    table = pq.read_table(tmp_path / "out")
    assert table.column("id").to_pylist() == list(range(20_000))
    return table.column("prediction").to_pylist(), result.manifest


def test_gpu_workers_are_started_each_seeing_its_own_gpu(two_gpus: None, tmp_path: Path) -> None:
    seen, manifest = shown_devices(tmp_path, {})
    assert set(seen[:10_000]) == {"0"} and set(seen[10_000:]) == {"1"}  # a shard per GPU
    assert (manifest["workers"], manifest["device"]) == (2, "cuda")


def test_a_cpu_run_hides_the_gpus_from_its_workers(two_gpus: None, tmp_path: Path) -> None:
    seen, manifest = shown_devices(tmp_path, {"device": "cpu", "workers": 2})
    assert set(seen) == {""} and manifest["device"] == "cpu"
