"""Where Arrow's buffers come from in thresher's processes: jemalloc.

A worker reads a chunk, converts it, predicts, writes, and lets every buffer go, over and
over. pyarrow's default pool (mimalloc) gave those pages back to the kernel between
chunks and took them again, each one zeroed by the kernel on its first touch: on the
benchmark's 5M-row jobs the kernel's page clearing was 40% of all the CPU the job used,
where with jemalloc, which keeps freed pages for reuse a while, the same jobs ran 1.6
times as fast in less memory (benchmarks/results/allocator.md).

The choice is made through `ARROW_DEFAULT_MEMORY_POOL` by the `thresher` command, before
pyarrow is imported, so the command's own process and every process it starts (workers,
the zygote and its forks, a local Ray, the service's job processes) use it. A pool the
user chose in that variable stands. A Python program that calls thresher's API keeps
the pool it has.
"""

from __future__ import annotations

import os
import sys

__all__ = ["POOL_VARIABLE", "use_jemalloc"]

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def use_jemalloc() -> None:
    """Make jemalloc the default Arrow pool of this process and its children, unless the
    user named one. Linux only: there every pyarrow wheel has jemalloc built in, and
    naming a pool a build lacks makes Arrow warn on every start."""
    if sys.platform != "linux" or os.environ.get(POOL_VARIABLE):
        return
    os.environ[POOL_VARIABLE] = "jemalloc"
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None and "jemalloc" in pyarrow.supported_memory_backends():
        pyarrow.set_memory_pool(pyarrow.jemalloc_memory_pool())  # imported already
