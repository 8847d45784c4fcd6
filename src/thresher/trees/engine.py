"""Compiled forests: LLVM (through llvmlite's wheel) turns `codegen`'s IR into machine code
in this process, and a per-user cache keeps the object code for the next worker.

No C compiler is run, here or anywhere: llvmlite carries LLVM in its wheel. Code is
generated for this CPU (`get_host_cpu_name`), so there is no instruction-set guess to
guard. Object code is cached under `$THRESHER_CACHE/compiled` (default
`~/.cache/thresher/compiled`), a folder made private to its user; a cached file is run
only when it and its folder belong to this user and nobody else can write them, since
running it is running its code. Elsewhere (a shared cache folder) a forest is compiled
in memory on each load and a warning says so once.

Threads: ctypes releases the GIL while the code runs, so a batch is split between a
few Python threads, each scoring its own rows.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import itertools
import logging
import os
import stat
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from thresher.arrays import to_matrix, to_numpy
from thresher.trees.forest import Finish

log = logging.getLogger("thresher.models")
# Rows below this many per thread are not worth a thread's hand-off.
MIN_ROWS_PER_THREAD = 1_024
_PREDICT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)


class EngineError(Exception):
    """Why a forest cannot be compiled or run here: one line, for a warning or an error."""


def cache_dir() -> Path:
    """Where object code is kept: `$THRESHER_CACHE/compiled`, else the user's own."""
    root = os.environ.get("THRESHER_CACHE") or Path.home() / ".cache" / "thresher"
    return Path(root) / "compiled"


def private_cache() -> Path | None:
    """The cache folder, made if need be (mode 0700); None when it is not this user's
    alone (then nothing is read from it or written to it)."""
    folder = cache_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if _ours(folder) else None


def _ours(path: Path) -> bool:
    """`path` is this user's, not a link, and nobody else may write it."""
    try:
        info = path.lstat()
    except OSError:
        return False
    kind_ok = stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)
    return kind_ok and info.st_uid == os.getuid() and not info.st_mode & 0o022


@contextlib.contextmanager
def locked(lock: Path) -> Iterator[None]:
    """Hold `lock` (a file in the cache folder) exclusively: one worker compiles a forest
    while the others wait for its object code."""
    try:
        handle = os.fdopen(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a")
    except OSError as exc:
        raise EngineError(f"cache folder {lock.parent}: {exc.strerror or exc}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _machine() -> Any:
    """A new LLVM target machine for this CPU. Not shared: an execution engine takes
    ownership of its machine and frees it with itself."""
    import llvmlite.binding as llvm

    _initialised()
    target = llvm.Target.from_default_triple()
    features = llvm.get_host_cpu_features().flatten()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=features, opt=2)


@functools.cache
def _initialised() -> None:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def host() -> str:
    """This CPU as LLVM names it and its features: part of a cache key."""
    import llvmlite.binding as llvm

    return f"{llvm.get_process_triple()} {llvm.get_host_cpu_name()}"


def compile_ir(text: str) -> bytes:
    """Object code for the IR `text`. Code generation only: LLVM's optimiser adds
    nothing to straight if/else code but seconds (see `codegen`)."""
    import llvmlite.binding as llvm

    try:
        module = llvm.parse_assembly(text)
        module.triple = llvm.get_process_triple()
        module.verify()
        return bytes(_machine().emit_object(module))
    except RuntimeError as exc:  # llvmlite's errors: a bug here, never the user's
        raise EngineError(f"LLVM cannot compile the forest: {exc}") from None


class CompiledForest:
    """A forest's object code, loaded; `predict` scores batches with `threads` threads."""

    def __init__(self, code: bytes, width: int, finish: Finish, threads: int) -> None:
        import llvmlite.binding as llvm

        try:
            empty = llvm.parse_assembly("")
            empty.triple = llvm.get_process_triple()
            self._engine = llvm.create_mcjit_compiler(empty, _machine())
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(code))
            self._engine.finalize_object()
            address = self._engine.get_function_address("predict")
        except RuntimeError as exc:
            raise EngineError(f"cannot load the compiled forest: {exc}") from None
        if not address:
            raise EngineError("the compiled forest has no predict function")
        self._run = _PREDICT(address)
        self.width, self.finish = width, finish
        self._threads = max(1, threads)
        self._pool: ThreadPoolExecutor | None = None

    def predict(self, table: pa.Table) -> np.ndarray:
        """The model's outputs for the rows of `table` (its features, in model order).
        Text raises ValueError (from `to_matrix`), which the engine reports row by row."""
        if table.num_columns != self.width:
            raise ValueError(
                f"the model takes {self.width} features, the batch has {table.num_columns}"
            )
        columns = []
        for column in table.columns:  # float64 without nulls, in one chunk: read in place
            if column.type != pa.float64() or column.null_count or column.num_chunks != 1:
                return self.predict_matrix(to_matrix(table))
            columns.append(to_numpy(column.chunk(0)))
        return self._columns(columns, table.num_rows)

    def predict_matrix(self, matrix: np.ndarray) -> np.ndarray:
        """The same for the rows of a matrix (row i, feature j at [i, j])."""
        if matrix.ndim != 2 or matrix.shape[1] != self.width:
            raise ValueError(f"the model takes {self.width} features, the matrix is {matrix.shape}")
        columns = np.asfortranarray(matrix, dtype=np.float64)  # the code reads columns
        return self._columns([columns[:, j] for j in range(self.width)], len(columns))

    def _columns(self, columns: list[np.ndarray], rows: int) -> np.ndarray:
        sums = np.empty((rows, self.finish.outputs), dtype=np.float64)
        parts = min(self._threads, rows // MIN_ROWS_PER_THREAD) or 1
        bounds = np.linspace(0, rows, parts + 1).astype(np.int64)
        spans = [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        if parts == 1:
            self._score(columns, sums, spans[0])
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="trees")
            for run in [self._pool.submit(self._score, columns, sums, span) for span in spans]:
                run.result()
        out = self.finish.apply(sums)
        return out[:, 0] if self.finish.outputs == 1 else out

    def _score(self, columns: list[np.ndarray], sums: np.ndarray, span: tuple[int, int]) -> None:
        start, stop = span
        if stop > start:
            starts = [values[start:].ctypes.data for values in columns]
            pointers = (ctypes.c_void_p * len(starts))(*starts)
            self._run(pointers, stop - start, sums[start:].ctypes.data)


def read_kept(path: Path) -> bytes | None:
    """Object code kept at `path`, if it is there and may be trusted (`_ours`)."""
    if not (_ours(path.parent) and _ours(path)):
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def keep(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all, readable by this user only."""
    partial = path.with_suffix(f".{os.getpid()}.partial")
    try:
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(partial, path)
    except OSError as exc:  # the next load compiles again; this one is fine
        partial.unlink(missing_ok=True)
        log.warning("cannot keep %s (the next load compiles again): %s", path, exc)
