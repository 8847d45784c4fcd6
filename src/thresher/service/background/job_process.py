"""Each service job is coordinated in a child process of its own, never in the server's.

Planning a job parses the tenant's files (schema inference, samples), and a native
library can crash on hostile input (a deeply nested JSON line overflowed pyarrow's C
stack). In the server process that took every tenant's service down, and again at each
restart as the orphaned job was resumed. In a child, a crash — even a segfault — ends
that job's coordinator alone: the server sees the exit code, records it, and runs the
job again at most once more (`MAX_CRASHES`), then fails it with a message that says what
happened.

A submission's columns are checked against its input's schema the same way: the schema
is read in a child (`isolated.input_columns`, from this module's fork server), so a
hostile file fails the submission, not the server.

Children come from a forkserver with thresher's coordinator preloaded, so a job starts in
milliseconds rather than an interpreter's import time; they die with the server (a killed
server leaves no coordinator behind a restarted one's back, which resumes the job). The
forkserver also imports the registered models' libraries (`warm.py`), and a job process
forks its workers' zygote rather than spawning it, so a batch over MiniLM starts
predicting ~4 s sooner (torch, transformers and BERT's code already in memory).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import threading
from collections.abc import Iterable, MutableMapping
from multiprocessing.process import BaseProcess

from thresher.children import child_environment, describe_exit, die_with_parent
from thresher.coordinator.job import resume_job, run_job, with_workers
from thresher.coordinator.retry import retry_errors
from thresher.errors import ThresherError
from thresher.executors.zygote import fork_zygotes_here, preloads
from thresher.models.libraries import library_modules
from thresher.service.background import warm
from thresher.service.logs import configure, logging_context
from thresher.spec import ModelSection
from thresher.store import JobRecord, JobState, Store, open_store, retry_lease, this_owner

log = logging.getLogger("thresher.service.background.job_process")

# A job whose coordinator crashed this many times is failed, not started again.
MAX_CRASHES = 2

# The forkserver imports these once; each job process starts with them loaded (what a
# job over files imports, so a job process starts in milliseconds).
PRELOAD = [
    "pyarrow",
    "thresher.coordinator.job",
    "thresher.executors.local",
    "thresher.sinks.files",
    "thresher.sources.text",
    "thresher.store",
    "thresher.monitor.actuals",  # a part of actuals is read in a child (`isolated.py`)
    warm.__name__,
]

children_context = mp.get_context("forkserver")
children_context.set_forkserver_preload(PRELOAD)


def start_fork_server(models: Iterable[ModelSection] = ()) -> None:
    """Start the fork server now (its imports take seconds), not at the first job, with
    the libraries of `models` (the registered ones) imported too: those whose workers
    fork from a zygote that loads the model, so the zygote only reads the weights."""
    from multiprocessing import forkserver

    modules = dict.fromkeys(
        name for model in models if preloads(model) for name in library_modules(model)
    )
    with child_environment({warm.VARIABLE: ",".join(modules)}):
        forkserver.ensure_running()


def start_job_process(
    store_url: str, job_id: str, resume: bool, workers: int | None = None
) -> BaseProcess:
    """Start the process that coordinates job `job_id` (resume its stored plan if it has
    one and `resume` is set; otherwise plan and run it) to its end, with `workers`
    workers when given (the slots its lease holds), in this server's name: the job's
    owner is the server, whose heartbeat says it lives (`store/_owners.py`)."""
    process = children_context.Process(
        target=coordinate,
        args=(store_url, job_id, resume, workers, this_owner()),
        name=f"thresher-job-{job_id}",
    )
    process.start()
    return process


def coordinate(
    store_url: str, job_id: str, resume: bool, workers: int | None = None, owner: str | None = None
) -> None:
    """The job process: run the job (recorded under `owner`, its server), and record any
    failure the engine did not."""
    die_with_parent()
    fork_zygotes_here()  # the fork server's imports are this process's: a zygote keeps them
    configure()  # the server's format and level, from the environment it was forked with
    store = open_store(store_url, owner)
    record = store.job(job_id)
    pin_leased_gpus(store, job_id)
    with logging_context(job_id=job_id, request_id=record.spec.job.request_id):
        _coordinate(store, record, resume, workers)


def _coordinate(store: Store, record: JobRecord, resume: bool, workers: int | None) -> None:
    job_id = record.id
    try:
        if resume and record.plan.get("shards"):
            # The server claimed it for this child; the claim must not block the resume.
            result = resume_job(job_id, store, force=True, workers=workers)
        else:
            spec = record.spec if workers is None else with_workers(record.spec, workers)
            result = run_job(spec, store, queued_id=job_id)
        m = result.manifest
        log.info(
            "job %s %s: %s rows in, %s out, %s bad", job_id, result.state.value,
            m.get("rows_in", "?"), m.get("rows_out", "?"), m.get("rows_error", "?"),
        )  # fmt: skip
    except ThresherError as exc:
        log.warning("job %s failed: %s", job_id, exc)
        fail_unless_finished(store, job_id, str(exc))
    except Exception:
        log.exception("job %s crashed", job_id)
        fail_unless_finished(store, job_id, "the server hit an internal error running this job")
    finally:
        store.db.close()


def retry_in_background(store: Store, record: JobRecord, workers: int) -> None:
    """Run a retry round over finished job `record`'s failed rows (`thresher retry-errors`)
    on the `workers` slots leased to it (`store.retry_lease`), in a process of its own,
    in this server's name, watched from a thread that gives the slots back when it ends:
    a process that dies mid-round (killed, crashed) leaves the job as it was, saying so,
    instead of `running` under a server that lives; asking again finishes the round."""
    lease = retry_lease(record.id)
    process = children_context.Process(
        target=retry_round,
        args=(store.url, record.id, this_owner(), workers),
        name=f"thresher-retry-{record.id}",
    )

    def settle() -> None:
        """After the process: a round that did not finish leaves the job as it was."""
        if process.exitcode != 0 and store.job(record.id).state == JobState.RUNNING:
            how = describe_exit(process.exitcode)
            message = f"its retry round's process {how}; retry its errors again to finish the round"
            store.finish(record.id, record.state, record.manifest, message)

    def watch() -> None:
        try:
            process.join()
            settle()
        finally:
            store.leases.release(lease)  # a dead server's: reclaimed by the next taker

    try:
        process.start()
        threading.Thread(target=watch, name=process.name, daemon=True).start()
    except BaseException:  # no watcher: a round that runs would never give its slots back
        if process.is_alive():
            process.kill()
            process.join()
            settle()
        store.leases.release(lease)
        raise


def retry_round(
    store_url: str, job_id: str, owner: str | None = None, workers: int | None = None
) -> None:
    """The retry round's process: `retry_errors` on `workers` workers (on the GPUs its
    lease holds), which leaves the job as it was when the round does not finish."""
    die_with_parent()
    fork_zygotes_here()
    configure()
    store = open_store(store_url, owner)
    record = store.job(job_id)
    pin_leased_gpus(store, retry_lease(job_id))
    with logging_context(job_id=job_id, request_id=record.spec.job.request_id):
        try:
            result = retry_errors(job_id, store, workers=workers)
            log.info("job %s: retry round ended %s, %s bad rows left", job_id,
                     result.state.value, result.manifest.get("rows_error", "?"))  # fmt: skip
        except ThresherError as exc:
            log.warning("job %s: retry round did not finish: %s", job_id, exc)
        finally:
            store.db.close()


def pin_leased_gpus(
    store: Store, lease_id: str, environ: MutableMapping[str, str] = os.environ
) -> None:
    """Make the GPUs leased (to a job, or a retry round) the only ones this process and
    its workers see (placement then puts one worker on each); none leased: as it is."""
    lease = store.leases.lease(lease_id)
    if lease is not None and lease.devices:
        environ["CUDA_VISIBLE_DEVICES"] = ",".join(lease.devices)


def fail_unless_finished(store: Store, job_id: str, message: str) -> None:
    """Record the job as failed with `message`, unless it already ended (or its publish
    gate held it: its shards are committed, and approve or reject decides it)."""
    state = store.job(job_id).state
    if not state.finished and not state.awaiting_decision:
        store.finish(job_id, JobState.FAILED, None, message)


def crash_message(exitcode: int | None, planned: bool, crashes: int) -> str:
    """What a tenant reads when a job's coordinator died: how, while doing what, and
    whether it runs again.

    >>> crash_message(-11, planned=False, crashes=2)[:78]
    "the job's coordinator process was killed by signal 11 (SIGSEGV) while planning"
    """
    doing = "running its shards" if planned else "planning its input (reading the input's schema)"
    how = f"the job's coordinator process {describe_exit(exitcode)} while {doing}"
    if crashes < MAX_CRASHES:
        return f"{how}; starting it again"
    return (
        f"{how}, {crashes} times; not started again (an input that crashes a reader would"
        " crash it every time: check the input file)"
    )
