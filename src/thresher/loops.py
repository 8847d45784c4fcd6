"""Background loops: a daemon thread that runs until its stop is called.

The server's heartbeat, ticker, watcher, request buffer and batch worker each run one.
A loop is a function of its `stopping` event, which it checks (or waits on) between
steps; the stop sets it, sets `wake` too when the loop waits on an event of its own (so
it ends at once, not at its next timeout), and joins the thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["start_loop"]


def start_loop(
    name: str, loop: Callable[[threading.Event], None], wake: threading.Event | None = None
) -> Callable[[], None]:
    """Run `loop(stopping)` on a daemon thread called `name`; returns its stop."""
    stopping = threading.Event()
    thread = threading.Thread(target=loop, args=(stopping,), name=name, daemon=True)
    thread.start()

    def stop() -> None:
        stopping.set()
        if wake is not None:
            wake.set()
        thread.join()

    return stop
