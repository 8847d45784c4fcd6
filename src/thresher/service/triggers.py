"""A trigger checked against the server config it runs under, before the server starts:
its watch must lie under `allowed_roots` and its `job` must make a job with the files it
will take. A pattern that matches no file yet is allowed (the files may come later), but
said."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ValidationError

from thresher.errors import SourceError, describe_errors
from thresher.sources.files import confine
from thresher.triggers import TriggerSettings, candidates, list_watch

if TYPE_CHECKING:
    from thresher.service.config import ServerConfig

__all__ = ["trigger_problems", "trigger_warnings"]

# A first listing at start that finds this many files has found enough to say whether
# the pattern matches (a prefix of millions is not listed twice at start).
CHECK_FILES = 10_000


def trigger_problems(config: ServerConfig, name: str, trigger: TriggerSettings) -> list[str]:
    """What keeps the trigger from running, each naming `triggers.<name>.<field>`."""
    field = f"triggers.{name}"
    return _watch_problems(config, field, trigger.watch) + _job_problems(config, field, trigger)


def _job_problems(config: ServerConfig, field: str, trigger: TriggerSettings) -> list[str]:
    from thresher.service.submission import JobRequest

    source = trigger.job.get("source", {})
    if not isinstance(source, dict):
        return [f"{field}.job.source: a table with at most `format`"]
    given = [f"source.{key}" for key in ("uri", "files") if key in source]
    given += ["input_file_id"] if "input_file_id" in trigger.job else []
    if given:
        return [f"{field}.job.{key}: the trigger gives its job the files it takes; remove it"
                for key in given]  # fmt: skip
    example = {**source, "files": [f"{trigger.watch.rstrip('/')}/example"]}
    try:
        request = JobRequest.model_validate({**trigger.job, "source": example})
    except ValidationError as exc:
        return [f"{field}.job.{p}" for p in describe_errors(exc)]
    if request.model not in config.models:
        return [f"{field}.job.model: no model named {request.model!r}"]
    return []


def _watch_problems(config: ServerConfig, field: str, watch: str) -> list[str]:
    roots = config.allowed_roots
    local = "://" not in watch or watch.startswith("file://")
    if local and not watch.removeprefix("file://").startswith("/"):
        return [f"{field}.watch: {watch} is not an absolute path"]
    try:
        confine([watch.rstrip("/") + "/" if not local else watch], roots)
    except SourceError:
        shown = ", ".join(roots) or "none"
        return [f"{field}.watch: {watch} is outside the server's allowed_roots ({shown})"]
    return []


def trigger_warnings(name: str, trigger: TriggerSettings) -> list[str]:
    """What is odd but allowed: a watch that cannot be listed yet, or whose pattern
    matches no file yet."""
    field = f"triggers.{name}"
    files = []
    try:
        for count, found in enumerate(list_watch(trigger.watch)):
            files.append(found)
            if count >= CHECK_FILES:
                break
    except Exception as exc:  # any filesystem's error (botocore's are not OSErrors)
        return [f"{field}.watch: cannot be listed yet ({exc}); the trigger will keep looking"]
    data, _ = candidates(files, {}, trigger)
    if not data:
        return [f"{field}.pattern: {trigger.pattern!r} matches no file under {trigger.watch} yet"]
    return []
