"""Files named by a column, fetched by the workers: a local path, any fsspec URL
(`s3://…`), or `http(s)://`, on a few threads at once, each bounded in time and bytes.

A failure is one bad record (stage `fetch`), never a crash: a timeout, a connection
refused, a 5xx or a 429 is tried again (`retries` times, waiting 0.25 s, 0.5 s, 1 s, …
between), a 404 or a missing file is not — `thresher retry-errors` tries those rows again
later. HTTP goes through the standard library (no dependency, and one blocking call per
thread is all a pool of threads needs); everything else through fsspec.
"""

from __future__ import annotations

import posixpath
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from thresher.errors import SourceError
from thresher.media.decode import MediaError
from thresher.sources.files import confine, filesystem

TRANSIENT_HTTP = frozenset({408, 425, 429, 500, 502, 503, 504})
FIRST_WAIT = 0.25  # seconds before the first retry; doubled each time after


class _Transient(Exception):
    """A failure worth another try (the message says what it was)."""


@dataclass
class Fetcher:
    """Fetches the files of a column's paths and URLs. `base`: the folder (or URL prefix)
    relative paths are against; `roots`: where every file must lie (empty: anywhere), as
    for a source's own files (the service sets them)."""

    base: str
    roots: tuple[str, ...] = ()
    threads: int = 16
    retries: int = 3
    timeout: float = 30.0
    max_bytes: int = 64 * 1024 * 1024
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)

    def fetch_all(self, locations: Sequence[str | None]) -> list[bytes | MediaError]:
        """Each location's bytes, or why it could not be had, in order."""
        if self.threads <= 1 or len(locations) < 2:
            return [self.fetch(loc) for loc in locations]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="thresher-fetch")
        return list(self._pool.map(self.fetch, locations))

    def fetch(self, location: str | None) -> bytes | MediaError:
        """One location's bytes, tried up to `retries` more times on a transient failure."""
        if location is None or not location.strip():
            return MediaError("fetch", "NoLocation", "no path or URL in this row")
        try:
            url = self.where(location.strip())
        except SourceError as exc:
            return MediaError("fetch", "OutsideRoots", str(exc))
        wait = FIRST_WAIT
        for attempt in range(self.retries + 1):
            try:
                return self._read(url)
            except _Transient as exc:
                if attempt == self.retries:
                    tries = f"{self.retries + 1} tries" if self.retries else "1 try"
                    return MediaError("fetch", "Unreachable", f"{url}: {exc} ({tries})")
            except MediaError as exc:
                return exc
            time.sleep(wait)
            wait *= 2
        raise AssertionError("unreachable")  # the loop returns on its last try

    def where(self, location: str) -> str:
        """The URL or path `location` names: relative ones joined to `base`, then held to
        `roots` (SourceError when outside)."""
        if "://" not in location and not location.startswith("/"):
            location = posixpath.join(self.base, location)
        return confine([location], self.roots)[0] if self.roots else location

    def _read(self, url: str) -> bytes:
        if url.startswith(("http://", "https://")):
            return self._read_http(url)
        try:
            fs, path = filesystem(url)
            with fs.open(path, "rb") as f:
                data: bytes = f.read(self.max_bytes + 1)
        except FileNotFoundError:
            raise MediaError("fetch", "NotFound", f"{url}: no such file") from None
        except TimeoutError as exc:
            raise _Transient(f"timed out: {exc}") from exc
        except OSError as exc:
            raise MediaError("fetch", type(exc).__name__, f"{url}: {exc}") from exc
        return self._bounded(url, data)

    def _read_http(self, url: str) -> bytes:
        request = urllib.request.Request(url, headers={"User-Agent": "thresher"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                data: bytes = answer.read(self.max_bytes + 1)
        except urllib.error.HTTPError as exc:
            if exc.code in TRANSIENT_HTTP:
                raise _Transient(f"HTTP {exc.code}") from exc
            raise MediaError("fetch", f"HTTP{exc.code}", f"{url}: HTTP {exc.code}") from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Transient(f"{type(reason).__name__}: {reason}") from exc
        return self._bounded(url, data)

    def _bounded(self, url: str, data: bytes) -> bytes:
        if len(data) > self.max_bytes:
            message = (
                f"{url}: more than {self.max_bytes:,} bytes; raise source.images.max_bytes"
                " if the file is trusted"
            )
            raise MediaError("fetch", "TooLarge", message)
        return data

    def __getstate__(self) -> dict[str, object]:
        # A reader travels to its worker pickled; the worker makes its own pool.
        return {**self.__dict__, "_pool": None}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
