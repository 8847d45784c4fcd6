"""Every error thresher raises on purpose.

Each error says which stage it comes from and what it concerns (a spec field, a shard, a
file and line), and the user-facing ones say what to do next.
"""

from __future__ import annotations


class ThresherError(Exception):
    """Base of every error thresher raises on purpose."""

    stage: str = "job"


class SpecError(ThresherError):
    """A job spec that cannot run, with one message per problem (`field: what is wrong`)."""

    stage = "spec"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid job spec:\n" + "\n".join(f"  {p}" for p in problems))


class SourceError(ThresherError):
    """The input cannot be found, listed or planned."""

    stage = "read"


class ModelLoadError(ThresherError):
    """The model file or class cannot be loaded."""

    stage = "load"


class ModelOutputError(ThresherError):
    """The model returned something thresher cannot line up with its input rows."""

    stage = "predict"


class SinkError(ThresherError):
    """The output location refuses the job (not empty, not writable, wrong kind)."""

    stage = "write"


class BadInputError(ThresherError):
    """A bad record met with `errors.on_bad_input = "fail"`; names the file and line."""

    stage = "decode"


class JobFailed(ThresherError):
    """The job ran but did not succeed: shards failed or too many rows were bad."""
