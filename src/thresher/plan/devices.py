"""Which NVIDIA GPUs a local run uses (`run.device`), found without importing torch.

The coordinator decides placement before any worker starts, and importing torch only to
count GPUs would cost it a second and more. The NVIDIA driver lists each GPU it drives
under /proc/driver/nvidia/gpus/; `CUDA_VISIBLE_DEVICES`, when set, narrows that as CUDA
itself does (the devices listed, up to the first that is not one). Each GPU worker is then
spawned with `CUDA_VISIBLE_DEVICES` naming its one GPU, so a model on device "auto" (or
"cuda") finds it as `cuda:0`; a run on `cpu` hides every GPU from its workers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from thresher.errors import SpecError
from thresher.spec import RunSection

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
HIDDEN = ""  # CUDA_VISIBLE_DEVICES that hides every GPU


def visible_gpus(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries."""
    try:
        count = sum(1 for _ in NVIDIA_GPUS.iterdir())
    except OSError:
        count = 0  # no NVIDIA driver
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(count)]
    gpus = []
    for entry in (e.strip() for e in listed.split(",")):
        if not entry or entry.startswith("-") or (entry.isdigit() and int(entry) >= count):
            break  # CUDA stops at the first entry that names no device
        gpus.append(entry)
    return gpus if count else []


def run_gpus(run: RunSection, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The GPUs a local run places workers on: none for `cpu`, or for Ray (which places
    actors on its own nodes' GPUs by `run.num_gpus`); every visible one for `auto` and
    `cuda`, and `cuda` with none is a spec error."""
    if run.device == "cpu" or run.executor == "ray":
        return []
    gpus = visible_gpus(environ)
    if run.device == "cuda" and not gpus:
        raise SpecError(
            [
                "run.device: 'cuda', but no NVIDIA GPU is visible here (no driver under"
                f" {NVIDIA_GPUS}, or CUDA_VISIBLE_DEVICES hides them); use 'auto' or 'cpu'"
            ]
        )
    return gpus
