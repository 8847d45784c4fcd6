"""The publish gate's checks (`[publish.checks]`), judged once every shard is committed and
before anything is published.

Each check gives one `CheckResult`: its name, its bound, what the job showed and whether
that holds. A check that cannot be judged for want of history passes and says why (the
first run of a name has no previous run and no baseline): the gate holds a job for what
it shows, never for what is missing. A user's check that raises fails, with the
exception's text: a check that cannot run has not passed.

- `rows_out_ratio`: rows out over the previous run's, where the previous run is the newest
  succeeded job created before this one of the same schedule (a schedule's job), else of
  the same name, and tenant (`store.views.previous_run`);
- `max_error_rate`: bad rows over rows in;
- `max_null_share`: a column's null and NaN values over its rows, from the profile;
- `no_drift`: the drift verdict against `[monitor] baseline`, else the previous run, is
  not `drift`;
- `custom`: `module:function(profile, manifest)`, returning None or True to pass, or a
  string (the reason) to fail; `profile` is the job's `Profile` (None unprofiled).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from thresher.monitor.alerts import job_drift
from thresher.profiles.profile import Profile
from thresher.store import JobRecord, Store

__all__ = ["CheckResult", "custom_check_problems", "failed_reasons", "judge"]


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict: `bound` is what the spec asked, `observed` what the job did."""

    name: str
    bound: Any
    observed: Any
    passed: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(
    store: Store, job: JobRecord, manifest: dict[str, Any], profile: Profile | None
) -> list[CheckResult]:
    """Every check `job`'s spec asks for, in the order the section lists them."""
    checks = job.spec.publish.checks
    if checks is None:
        return []
    results: list[CheckResult] = []
    if checks.rows_out_ratio is not None:
        results.append(_rows_out(store, job, manifest, checks.rows_out_ratio))
    if checks.max_error_rate is not None:
        results.append(_error_rate(manifest, checks.max_error_rate))
    for column, share in checks.max_null_share.items():
        results.append(_null_share(profile, column, share))
    if checks.no_drift:
        results.append(_no_drift(store, job))
    results += [_custom(path, profile, manifest) for path in checks.custom]
    return results


def failed_reasons(results: list[CheckResult]) -> list[str]:
    """One line per failed check, for a job's message and `thresher status`."""
    return [f"publish check {r.name} failed: {r.reason}" for r in results if not r.passed]


def _rows_out(
    store: Store, job: JobRecord, manifest: dict[str, Any], ratio: tuple[float, float]
) -> CheckResult:
    name, rows = "rows_out_ratio", int(manifest["rows_out"])
    previous = store.views.previous_run(job)
    if previous is None:
        return CheckResult(name, list(ratio), None, True, f"no previous run of {_of(job)}")
    before = int((store.job(previous).manifest or {}).get("rows_out", 0))
    observed = rows / before if before else (1.0 if rows == 0 else float("inf"))
    passed = ratio[0] <= observed <= ratio[1]
    reason = (
        f"{rows:,} rows out, {observed:.3g} times the {before:,} of job {previous},"
        f" {'within' if passed else 'outside'} [{ratio[0]}, {ratio[1]}]"
    )
    return CheckResult(name, list(ratio), round(observed, 6), passed, reason)


def _error_rate(manifest: dict[str, Any], bound: float) -> CheckResult:
    rows_in, bad = int(manifest["rows_in"]), int(manifest["rows_error"])
    rate = bad / rows_in if rows_in else 0.0
    passed = rate <= bound
    reason = f"{bad:,} of {rows_in:,} rows bad ({rate:.2%}), bound {bound:.2%}"
    return CheckResult("max_error_rate", bound, round(rate, 6), passed, reason)


def _null_share(profile: Profile | None, column: str, bound: float) -> CheckResult:
    name = f"max_null_share.{column}"
    found = profile.columns.get(column) if profile is not None else None
    if found is None:
        known = ", ".join(sorted(profile.columns)) if profile is not None else "none"
        why = f"the job's profile has no column {column!r} (it has: {known})"
        return CheckResult(name, bound, None, False, why)
    share = (found.nulls + found.nan) / found.rows if found.rows else 0.0
    passed = share <= bound
    reason = f"{found.nulls + found.nan:,} of {found.rows:,} values null or NaN ({share:.2%})"
    return CheckResult(name, bound, round(share, 6), passed, f"{reason}, bound {bound:.2%}")


def _no_drift(store: Store, job: JobRecord) -> CheckResult:
    try:
        baseline = job.spec.monitor.baseline or store.views.previous_run(job)
        report = job_drift(store, job, baseline) if baseline is not None else None
    except Exception as exc:  # a baseline that cannot be read: not judged, so not passed
        return CheckResult("no_drift", "not drift", None, False, f"cannot compare: {exc}")
    if report is None:
        return CheckResult("no_drift", "not drift", None, True, "no baseline: a first run")
    drifted = [c.name for c in report.columns if c.verdict == "drift"]
    passed = report.verdict != "drift"
    against = f"against {report.baseline}" + (f" ({', '.join(drifted)})" if drifted else "")
    reason = f"{report.verdict} {against}"
    return CheckResult("no_drift", "not drift", report.verdict, passed, reason)


def custom_check_problems(paths: list[str]) -> list[str]:
    """Before any work: a custom check that cannot be found would hold every run of the
    job only once the run is done, so each is imported now, and a problem is a spec error."""
    problems = []
    for path in paths:
        try:
            _load(path)
        except Exception as exc:  # the user's module: whatever its import raises
            problems.append(f"publish.checks.custom: {path}: {type(exc).__name__}: {exc}")
    return problems


def _of(job: JobRecord) -> str:
    schedule = job.spec.job.schedule
    return f"schedule {schedule!r}" if schedule else f"{job.name!r}"


def _custom(path: str, profile: Profile | None, manifest: dict[str, Any]) -> CheckResult:
    name = f"custom:{path}"
    try:
        answer = _load(path)(profile, manifest)
    except Exception as exc:  # the user's code: whatever it raises fails the check
        return CheckResult(name, "pass", "raised", False, f"{type(exc).__name__}: {exc}")
    if answer is None or answer is True:
        return CheckResult(name, "pass", "pass", True, "passed")
    reason = answer if isinstance(answer, str) else f"returned {answer!r}, not None/True/a reason"
    return CheckResult(name, "pass", "fail", False, reason)


def _load(path: str) -> Callable[[Profile | None, dict[str, Any]], object]:
    module, _, function = path.partition(":")
    found = getattr(importlib.import_module(module), function)
    if not callable(found):
        raise TypeError(f"{path} is not a function")
    return found  # type: ignore[no-any-return]
