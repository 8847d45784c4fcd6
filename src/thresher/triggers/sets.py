"""Which new files form a complete set, at one look at a watched folder.

A file is a *candidate* when its path below the watch matches `pattern` (fnmatch: `*`
matches across `/` too), no part of that path starts with `.` or `_` (temporary and
hidden files, `_SUCCESS`), it is not a marker, and it was never taken before — or, with
`reprocess_changed`, never taken with this size and version. A set is complete:

- with no `marker`: when there are candidates and none was added, changed or removed for
  `settle_seconds` (as Airflow's `S3KeysUnchangedSensor`): all of them are one set;
- with a `marker` (fnmatch on a file's name, such as `_SUCCESS` or `*.done`): when a
  marker not taken before is in a folder, the folder's own candidates (not its
  subfolders') are one set, once each of them and the marker has looked the same for
  `settle_seconds` (default 0). The marker is taken with the set, so it fires once;
  rewritten (a new version), it fires again for the files that came since. A marker
  whose folder holds no candidate makes a set of no files (recorded, no job).

A file still being written changes size or mtime between looks, so it keeps its set from
settling. What the looks saw lives in `Settling`, in memory: after a restart every file
counts as just seen and waits `settle_seconds` again, which delays a set but never loses
or repeats one (what was taken is in the store).

    >>> from datetime import datetime, timedelta, UTC
    >>> from thresher.triggers.listing import FileSeen
    >>> rule = TriggerSettings(watch="/in", tenant="t", job={}, settle_seconds=60)
    >>> memory, t0 = Settling(), datetime(2026, 1, 1, tzinfo=UTC)
    >>> files = [FileSeen("/in/a.csv", 10, "1"), FileSeen("/in/.b.csv.tmp", 5, "1")]
    >>> complete_sets(files, {}, rule, memory, t0)
    []
    >>> [s.paths for s in complete_sets(files, {}, rule, memory, t0 + timedelta(seconds=60))]
    [('/in/a.csv',)]
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fnmatch import fnmatchcase

from thresher.triggers.listing import FileSeen
from thresher.triggers.settings import TriggerFields, TriggerSettings

__all__ = ["FileSet", "Settling", "Taken", "candidates", "complete_sets"]

# path -> the (size, version) pairs of it taken so far
Taken = Mapping[str, Collection[tuple[int, str]]]
HIDDEN_PREFIXES = ("_", ".")


@dataclass(frozen=True)
class FileSet:
    """A complete set: the data files its job reads (sorted by path) and the markers
    that completed it (taken with it, never read)."""

    files: tuple[FileSeen, ...]
    markers: tuple[FileSeen, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    def key(self, epoch: int = 0) -> str:
        """The set's identity: a digest of its files' paths, sizes and versions and of
        the trigger's reset count (`epoch`), so files taken again after a reset make a
        new set and a new job, and the same files at one epoch always the same one."""
        digest = hashlib.sha256(f"epoch {epoch}\n".encode())
        for f in (*self.files, *self.markers):
            digest.update(f"{f.path}\0{f.size}\0{f.version}\n".encode())
        return digest.hexdigest()[:32]


@dataclass
class Settling:
    """Since when each candidate has looked as it does now, and when the candidates
    last changed (one appeared, changed or went away)."""

    since: dict[str, tuple[FileSeen, datetime]] = field(default_factory=dict)
    changed_at: datetime | None = None

    def observe(self, files: Sequence[FileSeen], now: datetime) -> None:
        seen: dict[str, tuple[FileSeen, datetime]] = {}
        for f in files:
            prior = self.since.get(f.path)
            seen[f.path] = prior if prior is not None and prior[0] == f else (f, now)
        if seen.keys() != self.since.keys() or any(t == now for _, t in seen.values()):
            self.changed_at = now
        self.since = seen

    def stable(self, f: FileSeen, now: datetime, settle: timedelta) -> bool:
        prior = self.since.get(f.path)
        return prior is not None and prior[0] == f and now - prior[1] >= settle

    def quiet(self, now: datetime, settle: timedelta) -> bool:
        return self.changed_at is None or now - self.changed_at >= settle


def below(watch: str, path: str) -> str:
    """`path` relative to the watched folder or prefix."""
    root = watch.removeprefix("file://").rstrip("/") + "/"
    return path[len(root) :] if path.startswith(root) else path.rsplit("/", 1)[-1]


def candidates(
    files: Sequence[FileSeen], taken: Taken, rule: TriggerFields
) -> tuple[list[FileSeen], list[FileSeen]]:
    """The new data files and the new markers among `files`."""
    data, markers = [], []
    for f in files:
        relative = below(rule.watch, f.path)
        name = relative.rsplit("/", 1)[-1]
        if rule.marker is not None and fnmatchcase(name, rule.marker):
            if _new(f, taken, True):
                markers.append(f)
        elif _data(relative, rule.pattern) and _new(f, taken, rule.reprocess_changed):
            data.append(f)
    return data, markers


def complete_sets(
    files: Sequence[FileSeen], taken: Taken, rule: TriggerSettings, memory: Settling, now: datetime
) -> list[FileSet]:
    """The complete sets among `files` (everything the watch holds now) at `now`;
    `memory` is updated with this look."""
    data, markers = candidates(files, taken, rule)
    memory.observe([*data, *markers], now)
    settle = timedelta(seconds=rule.settle)
    if rule.marker is None:
        quiet = data and memory.quiet(now, settle)
        return [FileSet(tuple(sorted(data, key=_path)))] if quiet else []
    folders: dict[str, list[FileSeen]] = {}
    for f in data:
        folders.setdefault(_folder(f.path), []).append(f)
    fired: dict[str, list[FileSeen]] = {}
    for marker in markers:
        fired.setdefault(_folder(marker.path), []).append(marker)
    sets = []
    for folder, found in sorted(fired.items()):
        members = sorted(folders.get(folder, []), key=_path)
        if all(memory.stable(f, now, settle) for f in (*members, *found)):
            sets.append(FileSet(tuple(members), tuple(sorted(found, key=_path))))
    return sets


def _new(f: FileSeen, taken: Taken, changed_too: bool) -> bool:
    before = taken.get(f.path)
    return not before or (changed_too and (f.size, f.version) not in before)


def _data(relative: str, pattern: str) -> bool:
    hidden = any(part.startswith(HIDDEN_PREFIXES) for part in relative.split("/"))
    return not hidden and fnmatchcase(relative, pattern)


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0]


def _path(f: FileSeen) -> str:
    return f.path
