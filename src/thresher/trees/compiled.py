"""Tree ensembles compiled to machine code in process: the same predictions, several times
the throughput, and no C compiler anywhere.

XGBoost and LightGBM walk their trees through generic node tables. treelite reads the
same model file; thresher writes each tree out as if/else code (`codegen.py`) and LLVM,
which llvmlite's wheel carries, compiles it for this CPU (`engine.py`). On the
benchmark's model (100 trees of 31 leaves) that is ~5x LightGBM's own predict on one
core, within 1.2x of the QuickScorer kernels thresher compiled with gcc before
(benchmarks/results/tree-engine.md), with the same probabilities to float rounding.

`model.options.compile` says when:

- `"auto"` (the default): compile when llvmlite and treelite are installed
  (`thresher[boosters]`). When they are not, when the model has a form the code
  generator does not write (categorical splits, vector leaves), or when the compiled
  model does not agree with the library on a probe batch, a warning says why and the
  library's own predict runs instead: a job never fails for want of a faster path.
- `true`: compile, or fail the model load with the reason.
- `false`: always the library's own predict.

Object code is cached by the model file's content (and the versions of llvmlite,
treelite and the frontend, this thresher's code generator, and the CPU) under
`$THRESHER_CACHE/compiled`, a folder private to its user (see `engine.py` on what is
trusted). A file lock lets one worker compile while the others wait, so a pool compiles
once and a second run of the same model compiles nothing. Once compiled code has agreed
with its frontend, what the adapter needs to know of the model (width, objective,
classes, column names) is kept beside it, and later loads run it without importing
XGBoost, LightGBM or treelite at all: their imports cost a worker 1.5-2.5 s and ~150 MiB.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import platform
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from thresher.arrays import from_numpy
from thresher.errors import ModelLoadError
from thresher.loops import patience
from thresher.trees import codegen, engine, forest
from thresher.trees.engine import CompiledForest, EngineError, cache_dir
from thresher.trees.forest import Finish, Frontend, ReadError, first_line

log = logging.getLogger("thresher.models")

# A batch's features (in the model's order) -> one value per row, or a column per class.
Predict = Callable[[pa.Table], np.ndarray]
PROBE_ROWS = 512
# Compiled code may sum or finish in another order than the library does; probabilities
# then differ in the last bits of a float32, never by more.
RTOL, ATOL = 1e-5, 1e-6
# The code that writes the compiled forest, for the cache key: a thresher that writes it
# differently compiles anew.
WRITERS = b"".join(Path(m.__file__ or "").read_bytes() for m in (codegen, engine, forest))


class CannotCompile(Exception):
    """Why this model runs on the library's own predict instead."""


def compile_option(options: dict[str, Any]) -> bool | Literal["auto"]:
    """`model.options.compile`, checked: true, false or "auto" (the default)."""
    value = options.get("compile", "auto")
    if value is True or value is False or value == "auto":
        return value  # type: ignore[no-any-return]
    raise ModelLoadError(
        f"model.options.compile: {value!r}; use true (compile the trees or fail), false"
        ' (the library\'s own predict) or "auto" (compile when thresher[boosters] is installed)'
    )


@dataclass(frozen=True)
class Trees:
    """A tree ensemble ready to run: its predict, its input width, what the adapter needs
    to know of it (`facts`, JSON), and whether it runs compiled (`native`, recorded in
    the job's manifest) or on the library's own predict."""

    predict: Predict
    width: int
    facts: Mapping[str, Any]
    native: bool = field(default=False)


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
        key = _cache_key(path, frontend)
        folder = engine.private_cache()
        kept = _read_kept(folder, key, threads)
        if kept is not None:
            return kept
        native = load()
        return _compile(path, frontend, native, folder=folder, key=key, threads=threads)
    except (CannotCompile, EngineError, ReadError) as reason:
        if mode is True:
            raise ModelLoadError(
                f"model.options.compile = true, but {path.name} cannot be compiled: {reason}"
            ) from None
        log.warning(
            "%s: running %s's own predict (several times slower): %s", path.name, frontend, reason
        )
        return native if native is not None else load()


def _cache_key(path: Path, frontend: Frontend) -> str:
    """The name this model file compiled by these tools for this CPU is kept under."""
    try:
        import llvmlite  # noqa: F401 - only whether it is there
    except ImportError:
        raise CannotCompile(
            "llvmlite is not installed (pip install 'thresher[boosters]')"
        ) from None
    digest = hashlib.sha256(path.read_bytes())
    versions = " ".join(_version(package) for package in ("llvmlite", "treelite", frontend))
    digest.update(f"{versions} {platform.machine()} {engine.host()}\n".encode() + WRITERS)
    return f"{frontend}-{digest.hexdigest()[:32]}"


@functools.cache  # a package's version is looked up on disk: 1 ms each, per load
def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


# Forests loaded in this process, by key, threads and the kept files' state: loading one
# takes LLVM 10 ms or more, which `thresher.predict` called again and again on small
# frames would pay each call. A forest's predict may run on several threads at once.
_LOADED: OrderedDict[tuple[Any, ...], Trees] = OrderedDict()
LOADED_KEPT = 8


def _read_kept(folder: Path | None, key: str, threads: int) -> Trees | None:
    """The compiled forest kept under `key` once it agreed with its frontend; None if
    there is none (yet), or what was kept is unreadable or untrusted (then it is made
    again)."""
    if folder is None:
        return None
    try:
        kept = [(folder / f"{key}{suffix}").stat() for suffix in (".o", ".json")]
    except OSError:
        return None
    loaded = (key, threads, *((s.st_ino, s.st_mtime_ns, s.st_size) for s in kept))
    if loaded in _LOADED:
        _LOADED.move_to_end(loaded)
        return _LOADED[loaded]
    trees = _load_kept(folder, key, threads)
    if trees is not None:
        _LOADED[loaded] = trees
        while len(_LOADED) > LOADED_KEPT:
            _LOADED.popitem(last=False)
    return trees


def _load_kept(folder: Path, key: str, threads: int) -> Trees | None:
    code = engine.read_kept(folder / f"{key}.o")
    try:
        kept = json.loads((folder / f"{key}.json").read_text())
        width, facts, finish = int(kept["width"]), dict(kept["facts"]), Finish(**kept["finish"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if code is None:
        return None
    compiled = CompiledForest(code, width, finish, threads)
    return Trees(compiled.predict, width, facts, native=True)


def _compile(
    path: Path, frontend: Frontend, native: Trees, *, folder: Path | None, key: str, threads: int
) -> Trees:
    """Compile the model at `path`, check it against `native`, keep it in `folder`."""
    if folder is None:
        log.warning(
            "%s is not private to this user: compiled trees are not cached, each load"
            " compiles them again",
            cache_dir(),
        )
        code, finish = _object_code(path, frontend)
    else:
        with engine.locked(folder / f"{key}.lock"):
            kept = _read_kept(folder, key, threads)  # another worker compiled it meanwhile
            if kept is not None:
                return replace(kept, facts=native.facts)
            code, finish = _object_code(path, frontend)
            compiled = CompiledForest(code, native.width, finish, threads)
            _check_agrees(compiled.predict, native.predict, native.width)
            engine.keep(folder / f"{key}.o", code)
            facts = {"width": native.width, "facts": dict(native.facts), "finish": finish.to_json()}
            engine.keep(folder / f"{key}.json", json.dumps(facts).encode())
            return replace(native, predict=compiled.predict, native=True)
    compiled = CompiledForest(code, native.width, finish, threads)
    _check_agrees(compiled.predict, native.predict, native.width)
    return replace(native, predict=compiled.predict, native=True)


def _object_code(path: Path, frontend: Frontend) -> tuple[bytes, Finish]:
    with patience(f"{path.name}: compiling its trees (once; later loads use the cache)", log):
        trees = forest.read(path, frontend)
        why = forest.unfit(trees)
        if why is not None:
            raise CannotCompile(why)
        return engine.compile_ir(codegen.module(trees)), trees.finish


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
