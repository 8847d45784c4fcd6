"""Every error thresher raises on purpose.

Each error says which stage it comes from and what it concerns (a spec field, a shard, a
file and line), and the user-facing ones say what to do next.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError


class ThresherError(Exception):
    """Base of every error thresher raises on purpose.

    `stage` is where it happened (spec, read, load, predict, write, decode, store, job),
    `shard` the shard it concerns, if one; the CLI shows both before the message:

        >>> str(JobFailed("a worker could not start", stage="load").context)
        'stage load'
        >>> ModelOutputError("3 rows for 4 inputs", shard=7).context
        'stage predict, shard 7'
    """

    stage: str = "job"
    shard: int | None = None

    def __init__(self, *args: object, stage: str | None = None, shard: int | None = None) -> None:
        super().__init__(*args)
        if stage is not None:
            self.stage = stage
        if shard is not None:
            self.shard = shard

    @property
    def context(self) -> str:
        """`stage X` or `stage X, shard N`."""
        return f"stage {self.stage}" + ("" if self.shard is None else f", shard {self.shard}")


# A message lists at most this many problems (and how many more there were): a request
# that names 2,000 bad fields gets a message of a few KB, not megabytes.
MAX_PROBLEMS = 20


class SpecError(ThresherError):
    """A job spec that cannot run, with one message per problem (`field: what is wrong`);
    the message shows the first MAX_PROBLEMS of them.

    >>> str(SpecError([f"f{i}: bad" for i in range(25)])).splitlines()[-1]
    '  … and 5 more problems'
    """

    stage = "spec"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = [f"  {p}" for p in problems[:MAX_PROBLEMS]]
        if len(problems) > MAX_PROBLEMS:
            lines.append(f"  … and {len(problems) - MAX_PROBLEMS:,} more problems")
        super().__init__("invalid job spec:\n" + "\n".join(lines))


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
    """The job ran but did not succeed: shards failed or too many rows were bad.
    `result` is the job's JobResult, when there is one (its id, problems, errors)."""

    def __init__(self, *args: object, result: Any = None, **where: Any) -> None:
        super().__init__(*args, **where)
        self.result = result


class MonitorError(ThresherError):
    """A drift comparison (or another monitor question) that cannot be answered: no job,
    job name or file by that name, or a job without a profile; actuals that cannot be
    read or joined (naming the part, the row and the field)."""

    stage = "monitor"


class StoreError(ThresherError):
    """The job store cannot be opened or does not hold what was asked for."""

    stage = "store"


def describe_errors(exc: ValidationError, model: type[BaseModel] | None = None) -> list[str]:
    """One `field.path: what is wrong` line per problem pydantic found (a validator may
    report several, one a line: a plug-in's options). Given the `model` that was
    validated, an unknown key names the known key it looks like (`did you mean 'uri'?`)."""
    problems = []
    for error in exc.errors():
        loc = ".".join(_key(p) for p in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "literal_error":
            expected = error.get("ctx", {}).get("expected", "")
            message = f"must be one of {expected.replace(' or ', ', ')}"
        elif error["type"] == "extra_forbidden":
            message = _unknown_key(model, error["loc"])
        elif error["type"] == "missing":
            message = "required"
        # A problem with the whole document (not a mapping at all) has no field path.
        problems += [_at(loc, line) for line in message.splitlines()]
    return problems


def _key(part: object) -> str:
    """A field path's part as a reader can see it: `model`, `0`, or quoted when it is
    empty or holds spaces, dots or colons (`'my key'`)."""
    text = str(part)
    plain = text.isprintable() and not any(c in text for c in " .:")
    return text if text and plain else repr(text)


def _at(loc: str, message: str) -> str:
    """`loc: message`, or `loc.sub: rest` when a validator named a sub-field itself; a
    problem with the whole document (not a mapping at all) is the `spec`'s."""
    if ":" in message.split(" ", 1)[0]:
        sub, _, message = message.partition(": ")
        loc = f"{loc}.{sub}" if loc else sub
    return f"{loc or 'spec'}: {message.strip()}"


def unknown_key(key: str, known: Sequence[str]) -> str:
    """What to say of a key that is not one of `known`: the known key it looks most like
    (difflib's ratio of 0.6 or more), or to check the spelling.

    >>> unknown_key("urii", ["uri", "format"])
    "unknown key (did you mean 'uri'?)"
    """
    close = difflib.get_close_matches(key, known, n=1)
    return (
        f"unknown key (did you mean {close[0]!r}?)"
        if close
        else ("unknown key (check the spelling)")
    )


def _unknown_key(model: type[BaseModel] | None, loc: Sequence[int | str]) -> str:
    """`unknown_key` for the key at `loc`, among the keys of its section of `model`."""
    section: object = model
    for part in loc[:-1]:
        section = _below(section, part)
    known = [name for found in _models(section) for name in _keys(found)]
    return unknown_key(str(loc[-1]) if loc else "", known)


def _models(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation can be: itself, or those in its union."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, types.UnionType, Annotated):
        return [found for arg in get_args(annotation) for found in _models(arg)]
    return []


def _keys(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _below(annotation: object, part: int | str) -> object:
    """The annotation one step down a field path: a model's field, a union's member by
    its name (as pydantic's paths give it), a mapping's value, a sequence's item."""
    for found in _models(annotation):
        if part == found.__name__:
            return found
        for name, field in found.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(origin, type) and issubclass(origin, Mapping) and len(args) == 2:
        return args[1]
    if isinstance(origin, type) and issubclass(origin, Sequence) and args:
        return args[0]
    for arg in args if origin in (Union, types.UnionType) else ():
        if _models(step := _below(arg, part)):
            return step
    return None
