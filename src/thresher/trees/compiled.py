"""Tree ensembles compiled to native code: the same predictions, several times the throughput.

XGBoost and LightGBM walk their trees through generic node tables. Treelite reads the
same model file; thresher writes it out as QuickScorer tables scored several rows at a
time in vector registers (`quickscorer.py`), beside tl2cgen's nested if/else C code for
the models and CPUs those do not fit (`tree_library.py`), and compiles both with the C
compiler. A LightGBM classifier of 100 trees of 31 leaves predicts ~8x faster on one
core than LightGBM's own predict this way (~3x tl2cgen's code alone), with bit-identical
probabilities (`benchmarks/` measures it).

`model.options.compile` says when:

- `"auto"` (the default): compile when tl2cgen and a C compiler (gcc or clang) are
  installed. When they are not, when compiling fails, or when the compiled model does not
  agree with the library on a probe batch, a warning says why and the library's own
  predict runs instead: a job never fails for want of a faster path.
- `true`: compile, or fail the model load with the reason.
- `false`: always the library's own predict.

Libraries are cached by the model file's content (and the versions of tl2cgen and the
frontend, and the machine) under `$THRESHER_CACHE/compiled` (default
`~/.cache/thresher/compiled`). A file lock lets one worker compile while the others wait
for its library, so a pool compiles once and a second run of the same model compiles
nothing. Once a library has agreed with its frontend, what the adapter needs to know of
the model (width, objective, classes, column names) is kept beside it, and later loads
run the library without importing XGBoost or LightGBM at all: their imports cost a worker
1.5-2.5 s and ~150 MiB (they pull in scikit-learn and pandas), which on a short job was
a fifth of its time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from thresher.arrays import from_numpy
from thresher.errors import ModelLoadError
from thresher.native import CompileError, cache_dir, locked, which_compiler
from thresher.trees.library import (
    WRITERS,
    BuildError,
    Frontend,
    TreeLibrary,
    build,
    first_line,
)

log = logging.getLogger("thresher.models")

# A batch's features (in the model's order) -> one value per row, or a column per class.
Predict = Callable[[pa.Table], np.ndarray]
PROBE_ROWS = 512
# Compiled code may sum the trees in another order than the library does; probabilities
# then differ in the last bits of a float32, never by more.
RTOL, ATOL = 1e-5, 1e-6


class CannotCompile(CompileError):
    """Why this model runs on the library's own predict instead."""


def compile_option(options: dict[str, Any]) -> bool | Literal["auto"]:
    """`model.options.compile`, checked: true, false or "auto" (the default)."""
    value = options.get("compile", "auto")
    if value is True or value is False or value == "auto":
        return value  # type: ignore[no-any-return]
    raise ModelLoadError(
        f"model.options.compile: {value!r}; use true (compile the trees or fail), false"
        ' (the library\'s own predict) or "auto" (compile when a C compiler is installed)'
    )


@dataclass(frozen=True)
class Trees:
    """A tree ensemble ready to run: its predict, its input width, and what the adapter
    needs to know of it (`facts`, JSON). Kept beside a compiled library once the library
    has been checked, so a later load runs it without importing XGBoost or LightGBM
    (seconds and ~150 MiB per worker)."""

    predict: Predict
    width: int
    facts: Mapping[str, Any]


def fastest(
    path: Path,
    frontend: Frontend,
    load: Callable[[], Trees],
    *,
    threads: int,
    mode: bool | Literal["auto"],
) -> Trees:
    """The model at `path` compiled when `mode` allows and it agrees with the library's own
    predict (`load` loads that, only when needed), else the library's own."""
    if mode is False:
        return load()
    native: Trees | None = None
    try:
        toolchain = which_compiler()
        if toolchain is None:
            raise CannotCompile("no C compiler (gcc or clang) on PATH")
        library = _library_file(path, frontend, toolchain)
        kept = _read_checked(library)
        if kept is not None:
            width, facts = kept
            return Trees(TreeLibrary(library, threads).predict, width, facts)
        native = load()
        _build(library, path, frontend, toolchain)
        compiled = TreeLibrary(library, threads)
        _check_agrees(compiled.predict, native.predict, native.width)
        _write_checked(library, native)
        return replace(native, predict=compiled.predict)
    except (CompileError, BuildError) as reason:
        if mode is True:
            raise ModelLoadError(
                f"model.options.compile = true, but {path.name} cannot be compiled: {reason}"
            ) from None
        log.warning(
            "%s: running %s's own predict (several times slower): %s", path.name, frontend, reason
        )
        return native if native is not None else load()


def _library_file(path: Path, frontend: Frontend, toolchain: str) -> Path:
    """Where the library built from this model file by these tools lives in the cache.
    The frontend's version is in the name because the check against it is kept too."""
    digest = hashlib.sha256(path.read_bytes())
    versions = " ".join(_version(package) for package in ("tl2cgen", "treelite", frontend))
    digest.update(f"{versions} {platform.machine()} {toolchain}\n".encode() + WRITERS)
    return cache_dir() / f"{frontend}-{digest.hexdigest()[:32]}.so"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def _read_checked(library: Path) -> tuple[int, dict[str, Any]] | None:
    """The width and facts kept when this library was checked against its frontend; None
    if it was not (yet), or if what was kept is unreadable (then it is checked again)."""
    try:
        kept = json.loads(library.with_suffix(".json").read_text())
        return int(kept["width"]), dict(kept["facts"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_checked(library: Path, trees: Trees) -> None:
    kept = library.with_suffix(".json")
    partial = kept.with_suffix(f".{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps({"width": trees.width, "facts": dict(trees.facts)}))
        os.replace(partial, kept)  # whole or absent, as the library
    except OSError as exc:  # the next load checks again; this one is fine
        log.warning("cannot keep %s (the next load checks the library again): %s", kept, exc)


def _build(library: Path, path: Path, frontend: Frontend, toolchain: str) -> None:
    """Compile the model at `path` into `library`, unless another worker has."""
    with locked(library.with_suffix(".lock")):
        if library.exists():
            return
        partial = library.with_suffix(f".{os.getpid()}.partial.so")
        try:
            build(path, frontend, partial, toolchain)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, library)  # whole or absent: a reader never sees half a library


def _check_agrees(compiled: Predict, native: Predict, width: int) -> None:
    """Both predict the same on random rows with some values missing and some zero (which
    LightGBM may read as missing); they may differ only in float rounding. Catches an
    objective, transform or missing-value rule the compiler reads wrong."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal((PROBE_ROWS, width)) * 3.0
    values[rng.random(values.shape) < 0.1] = np.nan
    values[rng.random(values.shape) < 0.05] = 0.0
    columns = [from_numpy(np.ascontiguousarray(values[:, j])) for j in range(width)]
    probe = pa.table(columns, names=[f"f{j}" for j in range(width)])
    want = np.asarray(native(probe))
    try:
        got = np.asarray(compiled(probe))
    except Exception as exc:
        raise CannotCompile(f"the compiled model fails on a probe: {first_line(exc)}") from None
    if want.shape != got.shape or not np.allclose(got, want, rtol=RTOL, atol=ATOL):
        raise CannotCompile("the compiled model's outputs differ from the library's on a probe")
