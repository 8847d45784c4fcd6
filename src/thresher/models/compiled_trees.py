"""Tree ensembles compiled to native code: the same predictions, 2-3x the throughput.

XGBoost and LightGBM walk their trees through generic node tables. Treelite reads the
same model file, and tl2cgen writes every tree out as nested if/else C code that the C
compiler optimises; a LightGBM classifier of 100 trees of 31 leaves predicts 2.6x faster
on one core this way, with bit-identical probabilities (`benchmarks/` measures it).

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

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import platform
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np

from thresher.errors import ModelLoadError

log = logging.getLogger("thresher.models")

Predict = Callable[[np.ndarray], np.ndarray]
Frontend = Literal["lightgbm", "xgboost"]
PROBE_ROWS = 512
# Compiled code may sum the trees in another order than the library does; probabilities
# then differ in the last bits of a float32, never by more.
RTOL, ATOL = 1e-5, 1e-6


class CannotCompile(Exception):
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
        tl2cgen, toolchain = _compiler()
        library = _library_file(path, frontend, toolchain, tl2cgen)
        kept = _read_checked(library)
        if kept is not None:
            width, facts = kept
            return Trees(_predictor(library, tl2cgen, threads), width, facts)
        native = load()
        _build(library, path, frontend, toolchain, tl2cgen)
        compiled = _predictor(library, tl2cgen, threads)
        _check_agrees(compiled, native.predict, native.width)
        _write_checked(library, native)
        return replace(native, predict=compiled)
    except CannotCompile as reason:
        if mode is True:
            raise ModelLoadError(
                f"model.options.compile = true, but {path.name} cannot be compiled: {reason}"
            ) from None
        log.warning("%s: running %s's own predict (2-3x slower): %s", path.name, frontend, reason)
        return native if native is not None else load()


def cache_dir() -> Path:
    """Where compiled libraries are kept: `$THRESHER_CACHE/compiled`, else the user's."""
    root = os.environ.get("THRESHER_CACHE") or Path.home() / ".cache" / "thresher"
    return Path(root) / "compiled"


def _compiler() -> tuple[Any, str]:
    """tl2cgen and the C compiler it will call."""
    try:
        import tl2cgen
    except ImportError:
        raise CannotCompile("tl2cgen is not installed (pip install 'thresher[boosters]')") from None
    toolchain = next((name for name in ("gcc", "clang") if shutil.which(name)), None)
    if toolchain is None:
        raise CannotCompile("no C compiler (gcc or clang) on PATH")
    return tl2cgen, toolchain


def _library_file(path: Path, frontend: Frontend, toolchain: str, tl2cgen: Any) -> Path:
    """Where the library compiled from this model file by these tools lives in the cache.
    The frontend's version is in the name because the check against it is kept too."""
    try:
        frontend_version = metadata.version(frontend)
    except metadata.PackageNotFoundError:
        frontend_version = "absent"
    digest = hashlib.sha256(path.read_bytes())
    tools = f"{tl2cgen.__version__} {frontend_version} {platform.machine()} {toolchain}"
    digest.update(tools.encode())
    return cache_dir() / f"{frontend}-{digest.hexdigest()[:32]}.so"


def _predictor(library: Path, tl2cgen: Any, threads: int) -> Predict:
    try:
        predictor = tl2cgen.Predictor(str(library), nthread=min(threads, _openmp_threads()))
    except Exception as exc:  # a library that will not load here
        raise CannotCompile(_first_line(exc)) from None
    dtype = str(predictor.threshold_type)  # float32 for XGBoost, float64 for LightGBM

    def predict(matrix: np.ndarray) -> np.ndarray:
        # Cast here: tl2cgen's own cast trips over NumPy 2's copy rules.
        matrix = np.ascontiguousarray(matrix, dtype=dtype)
        out = predictor.predict(tl2cgen.DMatrix(matrix, dtype=dtype))
        # (rows, targets, classes): one column per class, or one value per row.
        out = np.asarray(out).reshape(len(matrix), -1)
        return out[:, 0] if out.shape[1] == 1 else out

    return predict


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


def _build(library: Path, path: Path, frontend: Frontend, toolchain: str, tl2cgen: Any) -> None:
    """Compile the model at `path` into `library`, unless another worker has."""
    import treelite

    with _locked(library.with_suffix(".lock")):
        if library.exists():
            return
        partial = library.with_suffix(f".{os.getpid()}.partial.so")
        cores = os.cpu_count() or 1
        try:
            with _quiet():
                model = _load(treelite, path, frontend)
                tl2cgen.export_lib(
                    model, toolchain, str(partial), params={"parallel_comp": cores}, nthread=cores
                )
        except Exception as exc:  # treelite or the compiler: say which, in one line
            partial.unlink(missing_ok=True)
            raise CannotCompile(_first_line(exc)) from None
        os.replace(partial, library)  # whole or absent: a reader never sees half a library


def _openmp_threads() -> int:
    """The threads OpenMP allows this process: tl2cgen refuses more. Ray, for one, sets
    OMP_NUM_THREADS in its workers."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return os.cpu_count() or 1


def _load(treelite: Any, path: Path, frontend: Frontend) -> Any:
    if frontend == "lightgbm":
        return treelite.frontend.load_lightgbm_model(str(path))
    # Newer XGBoost files carry fields (categories, say) this treelite does not know; the
    # probe in `_check_agrees` still catches a model they would change.
    return treelite.frontend.load_xgboost_model(str(path), allow_unknown_field=True)


def _first_line(error: Exception) -> str:
    """The message of a C++ error, without its stack trace and source excerpt."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return next((line for line in lines if "rror" in line), lines[0] if lines else repr(error))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence treelite and tl2cgen while they compile: their C++ code logs to file
    descriptor 2, their Python callbacks print to stdout and warn (versions, translation
    units, fields they skip). Failures still raise. Only while a model loads, before the
    worker starts any thread that could want the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            os.dup2(devnull.fileno(), 2)
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """Hold `lock` (a file in the cache folder, made if need be) exclusively."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")  # noqa: SIM115 - closed below, after the lock is released
    except OSError as exc:  # an unwritable cache folder
        raise CannotCompile(f"cache folder {lock.parent}: {exc.strerror or exc}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_agrees(compiled: Predict, native: Predict, width: int) -> None:
    """Both predict the same on random rows with some values missing; they may differ
    only in float rounding. Catches an objective or transform the compiler reads wrong."""
    rng = np.random.default_rng(0)
    probe = rng.standard_normal((PROBE_ROWS, width)) * 3.0
    probe[rng.random(probe.shape) < 0.1] = np.nan
    want = np.asarray(native(probe))
    try:
        got = np.asarray(compiled(probe))
    except Exception as exc:
        raise CannotCompile(f"the compiled model fails on a probe: {_first_line(exc)}") from None
    if want.shape != got.shape or not np.allclose(got, want, rtol=RTOL, atol=ATOL):
        raise CannotCompile("the compiled model's outputs differ from the library's on a probe")
