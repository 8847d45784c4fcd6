"""Overlap: read the next chunk and write the last result while the model runs.

Arrow's readers and writers and most model runtimes release the GIL, so one thread for
each stage is enough to keep the model busy. Queues are short (two items): memory stays
bounded by a few batches per worker, whatever the input size.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")
DEPTH = 2
_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetch(Generic[T]):
    """Iterate `source` in a background thread, `DEPTH` items ahead of the consumer."""

    def __init__(self, source: Iterator[T]) -> None:
        self._source = source
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=DEPTH)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thresher-read", daemon=True)

    def __enter__(self) -> Iterator[T]:
        self._thread.start()
        return self._items()

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        while self._thread.is_alive():  # unblock a producer waiting on a full queue
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=0.05)
        self._thread.join()

    def _items(self) -> Iterator[T]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item

    def _run(self) -> None:
        try:
            for item in self._source:
                if self._stop.is_set():
                    return
                self._queue.put(item)
        except BaseException as exc:
            self._queue.put(_Failure(exc))
            return
        self._queue.put(_END)


class WriteBehind(Generic[T]):
    """Hand items to `write` on a background thread; errors surface on the next `put`
    or at exit, so a failed write never goes unnoticed."""

    def __init__(self, write: Callable[[T], None]) -> None:
        self._write = write
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="thresher-write", daemon=True)

    def __enter__(self) -> WriteBehind[T]:
        self._thread.start()
        return self

    def put(self, item: T) -> None:
        self._raise_if_failed()
        self._queue.put(item)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._queue.put(_END)
        self._thread.join()
        if kind is None:
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while (item := self._queue.get()) is not _END:
            if self._error is None:
                try:
                    self._write(item)
                except BaseException as exc:
                    self._error = exc
