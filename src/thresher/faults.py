"""Named crash points, so fault-injection tests can kill a process at an exact moment.

`THRESHER_FAULT=point` (or `point:shard`) makes the process that reaches that point send
itself SIGKILL — a real, unclean death, as if the machine pulled the plug
(`THRESHER_FAULT_SIGNAL=SIGSEGV` sends that signal instead: a native library's crash, as
the parent sees it). Unset (always, outside tests), `crash_point` is a dictionary lookup
and nothing else.

Points: `worker_after_stage` (a worker staged its part, the coordinator has not heard),
`plan_input` (a job is about to read its input to plan it),
`before_commit`, `mid_commit` (data part renamed, error part not yet), `after_commit`
(committed, not yet recorded in the store), `mid_answers` (an `openai-batch` sink wrote
its output file, not yet its error file, and replaced neither), `mid_publish` (a
finishing job removed the previous output, and has not moved all of its own in),
`kafka_mid_part` (a Kafka sink delivered half a part's messages, in its transaction
when it has one), `kafka_part_sent` (a Kafka sink's part delivered and committed, its
ledger not told), `after_publish_commit` (a Delta sink's job made its one table commit, and has not
finished publishing), `after_table_commit` (an Iceberg sink's snapshot landed, its parts
not yet removed), `after_publish` (a job published its output, its source's
`published` hook not run: a Kafka group's offsets not committed), `resume_start` (a
resume claimed the job),
the publish gate's: `gate_judged` (a job's checks judged, its hold not recorded),
`approve_decided` (a held job recorded approved, its output not published),
`approve_published` (an approved job's output published, its success not recorded),
`reject_decided` (a held job recorded rejected, its staged output not discarded),
`retry_after_output` / `retry_after_errors` (a retry round committed a shard's fixed rows
/ replaced its error part, and has not recorded it), and a schedule's tick:
`tick_claiming` (its ledger row written, not committed), `tick_claimed` (committed, no
job yet), `tick_queued` (its job queued, the ledger not told), and the same three steps
of a backfill's tick: `backfill_claiming`, `backfill_claimed`, `backfill_queued`; in a
server, `job_ended` (a job it ran ended, its end hooks not run) and `batch_ended` (an
OpenAI-style batch ended, its hooks not run); `read_upload` (the child reading a
tenant's uploaded file, before it reads).
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset(
    {
        "worker_after_stage",
        "plan_input",
        "before_commit",
        "mid_commit",
        "after_commit",
        "mid_answers",
        "mid_publish",
        "kafka_mid_part",
        "kafka_part_sent",
        "after_publish_commit",
        "after_table_commit",
        "after_publish",
        "resume_start",
        "gate_judged",
        "approve_decided",
        "approve_published",
        "reject_decided",
        "retry_after_output",
        "retry_after_errors",
        "tick_claiming",
        "tick_claimed",
        "tick_queued",
        "backfill_claiming",
        "backfill_claimed",
        "backfill_queued",
        "job_ended",
        "batch_ended",
        "read_upload",
    }
)


def crash_point(point: str, shard: int | None = None) -> None:
    """Die here if THRESHER_FAULT names this point (and this shard, when it names one)."""
    if armed(point, shard):
        os.kill(os.getpid(), signal.Signals[os.environ.get("THRESHER_FAULT_SIGNAL", "SIGKILL")])


def armed(point: str, shard: int | None = None) -> bool:
    """Whether THRESHER_FAULT names this point (and shard): for a point that must first
    make its moment real (deliver what is in flight) before it dies."""
    wanted = os.environ.get("THRESHER_FAULT")
    if not wanted:
        return False
    name, _, at_shard = wanted.partition(":")
    return name == point and (not at_shard or shard is None or int(at_shard) == shard)
