"""`thresher.predict` and `thresher.run` / `thresher.resume` with data and models in
memory: each builds a spec as a user would write one and runs it through the engine, so
an in-memory job has every guarantee a spec file's has.

`predict` runs in a private folder (on `/dev/shm` where there is one: the input and output
files are then memory, not disk) with a store of its own, and reads the output back in the
input's kind; `run` records its job in the user's store, and keeps the input under the
cache folder named by its content, so that `resume` given the same data and model finds
the same files and refuses other ones, naming which.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import logging
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from thresher.errors import BadInputError, SpecError
from thresher.inmemory.data import ROW_COLUMN, Written, is_in_memory, restore, write_input
from thresher.inmemory.objects import live, model_section

if TYPE_CHECKING:
    from thresher.coordinator.job import JobResult
    from thresher.coordinator.progress import Reporter
    from thresher.spec import JobSpec

__all__ = ["SPEC_OPTIONS", "in_memory_resume", "in_memory_run", "predict"]

log = logging.getLogger("thresher")

# `predict`'s and `run`'s keyword options: the spec's own fields, by the section they are in.
SPEC_OPTIONS = {
    "format": ("source", "format"),  # a path's source format ("images": a folder of them)
    "source_options": ("source", "options"),
    "columns": ("source", "columns"),
    "id_column": ("source", "id_column"),
    "shard_bytes": ("source", "shard_bytes"),
    "keep_columns": ("sink", "keep_columns"),
    "batch_size": ("batch", "size"),
    "workers": ("run", "workers"),
    "device": ("run", "device"),
    "executor": ("run", "executor"),
    "outputs": ("model", "outputs"),
    "kind": ("model", "kind"),
    "batch_format": ("model", "batch_format"),
    "model_options": ("model", "options"),
    "on_bad_input": ("errors", "on_bad_input"),
    "max_error_rate": ("errors", "max_error_rate"),
    "profile": ("monitor", "profile"),
}
INLINE_ROWS = 65_536  # an input this small is one call of the model, as the caller's

ERRORS_SHOWN = 3


def predict(data: Any, model: Any, progress: bool | None = None, **options: Any) -> Any:
    """See `thresher.predict`."""
    on_bad_input = options.pop("on_bad_input", "fail")
    if on_bad_input not in ("fail", "skip"):
        raise SpecError([f'on_bad_input: {on_bad_input!r}; use "fail" or "skip"'])
    with _workspace() as folder, live(model) as uri:
        sections = _sections(options)
        written = _add_source(sections, data, folder, for_run=False)
        inline = written is not None and _in_process(sections, written, model)
        _add_model(sections, model, _process_folder(), uri if inline else None)
        sections["sink"].update({"uri": str(folder / "out"), "format": "arrow"})
        sections.setdefault("monitor", {}).setdefault("profile", False)
        result = _run_spec(sections, _predict_store(), reporter_for(progress))
        result.raise_for_state()
        table, errors = result.to_arrow(), result.errors
        if written is None:  # a path in: Arrow out, as read
            return _without_bad(table, errors, on_bad_input)
        if errors.num_rows:
            errors = errors.append_column("index", pa.array(_indexes(errors, written)))
        return _without_bad(restore(table, written), errors, on_bad_input)


def _in_process(sections: dict[str, dict[str, Any]], written: Written, model: Any) -> bool:
    """Whether the job runs here, on the caller's object itself (and if so, set it up to):
    unless the caller chose workers, always. A model's own threads (BLAS, OpenMP,
    torch's, compiled trees') use every core here; a copy of the object per worker costs
    its start and its memory, and measured, more time than it saves: a 1M-row frame took
    1.6 s here and 2.2 s in two workers for LightGBM, 1.3 s and 2.9 s for an MLP
    (benchmarks/in_memory.py). A function that holds the GIL gains from `workers=`."""
    chosen = sections.get("run", {}).keys() & {"workers", "executor"}
    chosen |= sections["source"].keys() & {"shard_bytes"}
    if chosen:
        return False
    # One shard, so one worker: the job's worker is then a thread of this process.
    sections.setdefault("run", {})["workers"] = 1
    sections["source"]["shard_bytes"] = max(written.path.stat().st_size + 1, 1024)
    if written.rows <= INLINE_ROWS:  # one call, as the caller's own model.predict(frame):
        # a model's checks per call cost more than a small input's rows
        sections.setdefault("batch", {}).setdefault("size", max(written.rows, 1))
    return True


def _without_bad(output: Any, errors: pa.Table, on_bad_input: str) -> Any:
    """`output`, or BadInputError when rows were bad and the caller said `fail`."""
    if not errors.num_rows:
        return output
    shown = "; ".join(str(m) for m in errors.column("message").to_pylist()[:ERRORS_SHOWN])
    more = errors.num_rows - ERRORS_SHOWN
    message = f"{errors.num_rows} bad row(s): {shown}" + (f"; and {more} more" if more > 0 else "")
    if on_bad_input == "skip":
        log.warning("%s (left out of the predictions)", message)
        return output
    error = BadInputError(
        f"{message}. The predictions of the other rows are in this error's .predictions,"
        ' the bad rows in .errors; on_bad_input="skip" returns the predictions instead'
    )
    error.predictions = output  # type: ignore[attr-defined]
    error.errors = errors  # type: ignore[attr-defined]
    raise error


def _indexes(errors: pa.Table, written: Written) -> list[Any]:
    """Each bad record's row in the caller's terms: its pandas index label, else its
    row number."""
    rows: list[Any] = errors.column("row").to_pylist()
    if written.index is None:
        return rows
    return [None if row is None else written.index[row] for row in rows]


def in_memory_run(
    data: Any,
    model: Any,
    sink: Mapping[str, Any] | str,
    *,
    store: str | None,
    reporter: Reporter | None,
    options: dict[str, Any],
) -> JobResult:
    """See `thresher.run`: a job over `data` and `model` to `sink`, in the user's store."""
    folder = _kept_folder()
    sections = _sections(options)
    # The input in a folder of this call's own: two scripts running the same data at once
    # write the same file name, and each removes its copy when its job ends.
    written = _add_source(sections, data, folder / "inputs" / secrets.token_hex(8), for_run=True)
    _add_model(sections, model, folder, None)
    sections["sink"].update({"uri": sink} if isinstance(sink, str) else dict(sink))
    try:
        return _run_spec(sections, store, reporter)
    finally:
        _remove_input(written)  # `resume` writes it again, from the data


def _remove_input(written: Written | None) -> None:
    if written is not None:
        written.path.unlink(missing_ok=True)
        with suppress(OSError):  # another call's file may be there too
            written.path.parent.rmdir()


def in_memory_resume(
    job_id: str, data: Any, model: Any, store: str | None, reporter: Reporter | None
) -> JobResult:
    """See `thresher.resume`: the job's data and model given again, checked against the
    ones it was planned with by their fingerprints (the files' names)."""
    from thresher.coordinator.job import resume_job
    from thresher.store import open_store

    opened = open_store(store)
    recorded = opened.job(job_id).spec
    folder = _kept_folder()
    written = None
    try:
        if data is not None:
            written = write_input(data, _input_folder(recorded.source.uri, folder))
            _same("data", str(written.path), recorded.source.uri)
        if model is not None:
            given = model_section(model, folder, {})
            _same("model", given["uri"], recorded.model.uri)
        return resume_job(job_id, opened, reporter)
    finally:
        _remove_input(written)


def _input_folder(recorded: str, kept: Path) -> Path:
    """Where a resume writes the data again: where its job read it, which `run` chose
    under the kept folder; anything else is not a job of `thresher.run`'s."""
    folder = Path(recorded).parent
    if not folder.resolve().is_relative_to(kept.resolve()):
        raise SpecError(
            [f"data: job's input {recorded} is not one thresher.run wrote; resume it without data="]
        )
    return folder


def _same(what: str, given: str, recorded: str) -> None:
    if Path(given).name != Path(recorded).name:
        raise SpecError(
            [
                f"{what}: not the {what} this job was planned with (fingerprint"
                f" {Path(given).stem[:12]}, the job's {Path(recorded).stem[:12]}); pass the"
                f" same {what}, or run a new job"
            ]
        )


def _sections(options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The spec's sections the caller's keyword options fill (`SPEC_OPTIONS`)."""
    sections: dict[str, dict[str, Any]] = {"source": {}, "model": {}, "sink": {}}
    for name, value in options.items():
        if name not in SPEC_OPTIONS:
            known = ", ".join(sorted(SPEC_OPTIONS))
            raise SpecError([f"{name}: not an option of thresher.predict / run; use {known}"])
        section, key = SPEC_OPTIONS[name]
        sections.setdefault(section, {})[key] = value
    return sections


def _add_source(
    sections: dict[str, dict[str, Any]], data: Any, folder: Path, for_run: bool
) -> Written | None:
    """The source section for `data`: a path as it is, a table in memory written to
    `folder` (returned) and read from there."""
    source = sections["source"]
    if isinstance(data, str | os.PathLike):
        source["uri"] = str(data)
        return None
    if not is_in_memory(data):
        raise SpecError(
            [
                f"data: a {type(data).__name__}; pass a pandas or polars DataFrame, an Arrow"
                " table, reader or dataset, or a path"
            ]
        )
    written = write_input(data, folder)
    source.update({"uri": str(written.path), "format": "arrow"})
    if not source.get("id_column"):
        source["id_column"] = ROW_COLUMN
    elif not for_run:  # the row number still puts the output back in input order
        keep = sections["sink"].get("keep_columns", [])
        sections["sink"]["keep_columns"] = [*keep, ROW_COLUMN]
    return written


def _add_model(
    sections: dict[str, dict[str, Any]], model: Any, folder: Path, live_uri: str | None
) -> None:
    """The model section for `model`: a path with its kind, or an object (`live_uri`:
    the object itself, in this process)."""
    if isinstance(model, str | os.PathLike):
        if "kind" not in sections["model"]:
            raise SpecError(["kind: a model given as a path needs its kind (kind='sklearn', …)"])
        sections["model"]["uri"] = str(model)
        return
    sections["model"] = model_section(model, folder / "models", sections["model"], live_uri)


def _run_spec(spec: Mapping[str, Any], store: str | None, reporter: Reporter | None) -> JobResult:
    from thresher.coordinator.job import run_job
    from thresher.spec import parse_spec
    from thresher.store import open_store

    job: JobSpec = parse_spec(spec)
    return run_job(job, open_store(store), reporter)


def reporter_for(progress: bool | None) -> Reporter | None:
    """A progress bar where a person watches, unless `progress=False`: tqdm's in a
    notebook or IPython (when tqdm is installed), the CLI's on a terminal; nothing
    otherwise."""
    from thresher.coordinator.progress import BarReporter, NotebookReporter

    in_ipython = _in_ipython()
    if progress is False or (progress is None and not (in_ipython or sys.stderr.isatty())):
        return None
    if in_ipython and importlib.util.find_spec("tqdm") is not None:
        return NotebookReporter()
    return BarReporter()


def _in_ipython() -> bool:
    ipython = sys.modules.get("IPython")
    return ipython is not None and getattr(ipython, "get_ipython", lambda: None)() is not None


@contextmanager
def _workspace() -> Iterator[Path]:
    """A private folder for one call, in memory where the system has one."""
    folder = Path(tempfile.mkdtemp(prefix="thresher-", dir=_memory_folder()))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _predict_store() -> str:
    """The store `predict`'s jobs are recorded in: one per process (its tables made once,
    not per call)."""
    return f"sqlite:///{_process_folder() / 'store.db'}"


def _process_folder() -> Path:
    """`predict`'s folder for this process: its store and its models' files (a booster
    saved once, not per call), made at the first call and removed when the process
    exits. A forked child has its own."""
    return _folder_of(os.getpid())


@functools.cache
def _folder_of(pid: int) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="thresher-predict-", dir=_memory_folder()))
    atexit.register(_remove_if_mine, folder, pid)
    return folder


def _remove_if_mine(folder: Path, pid: int) -> None:
    if os.getpid() == pid:  # a forked child leaving runs its parent's handlers too
        shutil.rmtree(folder, ignore_errors=True)


def _memory_folder() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _kept_folder() -> Path:
    """Where `run` keeps an in-memory job's input and model while it runs (and the model
    after: a resume finds it by name)."""
    from thresher.trees.engine import cache_dir

    folder = cache_dir().parent / "inmemory"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder
