"""Native code built on the machine it runs on: a C compiler, a cache, and a file lock.

Tree ensembles are compiled per model (`trees/compiled.py`); small kernels of thresher's
own, such as the profiler's one-pass moments, per machine (`kernel`). A library is kept
under `$THRESHER_CACHE/compiled` (default `~/.cache/thresher/compiled`) by a digest of
its source, the compiler and the machine, and built under a file lock, so a pool of
workers builds it once and a later job builds nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("thresher.native")


class CompileError(Exception):
    """Why native code could not be had here: no compiler, a failed build, no cache."""


def which_compiler() -> str | None:
    """The C compiler to build with: gcc, else clang, else None."""
    return next((name for name in ("gcc", "clang") if shutil.which(name)), None)


def cache_dir() -> Path:
    """Where compiled libraries are kept: `$THRESHER_CACHE/compiled`, else the user's."""
    root = os.environ.get("THRESHER_CACHE") or Path.home() / ".cache" / "thresher"
    return Path(root) / "compiled"


@contextlib.contextmanager
def locked(lock: Path) -> Iterator[None]:
    """Hold `lock` (a file in the cache folder, made if need be) exclusively."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")  # noqa: SIM115 - closed below, after the lock is released
    except OSError as exc:  # an unwritable cache folder
        raise CompileError(f"cache folder {lock.parent}: {exc.strerror or exc}") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@functools.cache
def kernel(name: str, source: str) -> ctypes.CDLL | None:
    """The library built from the C `source`, from the cache or compiled now; None (said
    once, in the log) where it cannot be: the caller then runs its numpy path."""
    try:
        return ctypes.CDLL(str(_built(name, source)))
    except (CompileError, OSError) as reason:
        log.info("%s: no native kernel here (%s); numpy does its work", name, reason)
        return None


def declared(function: Any, *arguments: Any) -> Any:
    """A library function, told its arguments (ctypes types) and that it returns nothing."""
    function.argtypes = list(arguments)
    function.restype = None
    return function


def _built(name: str, source: str) -> Path:
    toolchain = which_compiler()
    if toolchain is None:
        raise CompileError("no C compiler (gcc or clang) on PATH")
    digest = hashlib.sha256(f"{toolchain} {platform.machine()}\n{source}".encode())
    library = cache_dir() / f"{name}-{digest.hexdigest()[:32]}.so"
    if library.exists():
        return library
    with locked(library.with_suffix(".lock")):
        if library.exists():  # another worker built it while this one waited
            return library
        with tempfile.TemporaryDirectory(prefix="build-", dir=library.parent) as folder:
            code, partial = Path(folder) / f"{name}.c", Path(folder) / f"{name}.so"
            code.write_text(source)
            command = [toolchain, "-O3", "-fopenmp-simd", "-shared", "-fPIC", "-o", str(partial)]
            done = subprocess.run(
                [*command, str(code)], check=False, capture_output=True, text=True
            )
            if done.returncode:
                lines = (done.stderr or done.stdout).strip().splitlines()
                raise CompileError(f"{toolchain} failed: {lines[0] if lines else done.returncode}")
            os.replace(partial, library)  # whole or absent: a reader never sees half of one
    return library
