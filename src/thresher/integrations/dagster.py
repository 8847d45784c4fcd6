"""thresher jobs as Dagster assets (the `dagster` extra).

    import dagster as dg
    from thresher.integrations.dagster import ThresherResource, thresher_asset

    scores = thresher_asset("jobs/score.toml", name="scores", baseline="nightly")

    defs = dg.Definitions(
        assets=[scores],
        resources={"thresher": ThresherResource(store="sqlite:////var/lib/thresher.db")},
    )

Materialising the asset runs the job once — in the Dagster process by default, or through
`thresher serve` when the resource names a `server` — and records its job id, rows in and
out, bad records, error rate, output location and (with a baseline) drift verdict as the
materialisation's metadata. A job that fails fails the asset. Two blocking checks come
with it, so nothing downstream reads predictions that look wrong: `error_rate` (bad records
over rows at most `max_error_rate`) and, with a baseline, `drift` (the job's verdict is not
"drift"). `thresher_quality_check` adds a check on the job's quality once actuals arrive.
"""

# No `from __future__ import annotations`: Dagster reads resources' field annotations at
# run time.
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from thresher.integrations.jobs import JobOutcome, JobsApi, run_in_process

__all__ = ["ThresherResource", "thresher_asset", "thresher_quality_check"]

Spec = str | Path | Mapping[str, Any]


class ThresherResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # as documented
    """Where thresher jobs run: in this process on the store `store` (default
    `$THRESHER_STORE`), or, with `server`, on `thresher serve` as the tenant of `token`
    (then an asset's spec is the body of `POST /v1/jobs`)."""

    store: str | None = None
    server: str | None = None
    token: str | None = None
    poll_seconds: float = 2.0
    timeout_seconds: float | None = None

    def run(self, spec: Spec, task: str, attempt: int = 0) -> JobOutcome:
        """Run one job to its end; a failed job is an outcome, a bad spec an exception.
        Through a server, `task` names the step (a retry, `attempt` above 0, gets its
        running or succeeded job back: `JobsApi.submit_once`)."""
        if self.server is None:
            return run_in_process(spec, self.store)
        if not isinstance(spec, Mapping):
            raise dg.Failure(
                "through a server, a thresher asset's spec is the body of POST /v1/jobs "
                "(a mapping), not a spec file"
            )
        api = self._api()
        job_id = api.submit_once(spec, task, attempt)
        return api.wait(job_id, self.poll_seconds, self.timeout_seconds)

    def drift_verdict(self, job_id: str, baseline: str) -> str:
        """The job's drift verdict ("ok", "warn" or "drift") against `baseline` (a job
        id, a job name — its newest succeeded job — or a reference file in process)."""
        if self.server is not None:
            return str(self._api().drift(job_id, baseline)["verdict"])
        import thresher

        return thresher.drift(baseline, job_id, store=self.store).verdict

    def quality(self, job_id: str) -> dict[str, Any]:
        """The job's quality over the actuals added so far (`metrics` None before any)."""
        if self.server is not None:
            return self._api().quality(job_id)
        import thresher

        found = thresher.quality(job_id, store=self.store)
        return found.to_json()

    def _api(self) -> JobsApi:
        assert self.server is not None
        return JobsApi(self.server, self.token)


def thresher_asset(
    spec: Spec,
    *,
    name: str,
    deps: Sequence[Any] = (),
    baseline: str | None = None,
    max_error_rate: float = 0.0,
    group_name: str | None = None,
    description: str | None = None,
    resource_key: str = "thresher",
) -> dg.AssetsDefinition:
    """An asset whose materialisation runs the thresher job `spec` (a spec file or a spec
    as a mapping; through a server, the body of `POST /v1/jobs`), after `deps`, with its
    blocking checks `error_rate` and (with a `baseline`) `drift`."""
    checks = [_check("error_rate", name, f"bad records at most {max_error_rate:.2%} of rows")]
    if baseline is not None:
        checks.append(
            _check("drift", name, f"the job's drift verdict against {baseline} is not 'drift'")
        )

    # Dagster reads the return annotation: a subscripted MaterializeResult[T] is taken
    # for a tuple of outputs.
    @dg.asset(
        name=name,
        deps=list(deps),
        group_name=group_name,
        description=description or f"Predictions of the thresher job {_label(spec)}.",
        check_specs=checks,
        required_resource_keys={resource_key},
    )
    def _materialise(context: dg.AssetExecutionContext) -> dg.MaterializeResult:  # type: ignore[type-arg]
        runner: ThresherResource = getattr(context.resources, resource_key)
        outcome = runner.run(spec, f"{context.run.run_id}/{name}", context.retry_number)
        if not outcome.succeeded:
            why = "; ".join(outcome.problems) or "no reason given"
            raise dg.Failure(
                f"thresher job {outcome.job_id} {outcome.state}: {why}",
                metadata=_metadata(outcome, None),
            )
        verdict = None
        if baseline is not None:
            assert outcome.job_id is not None
            verdict = runner.drift_verdict(outcome.job_id, baseline)
        return dg.MaterializeResult(
            metadata=_metadata(outcome, verdict, baseline),
            check_results=_check_results(outcome, verdict, max_error_rate),
        )

    return _materialise


def _check(check: str, asset: str, description: str) -> dg.AssetCheckSpec:
    # Blocking: when the check fails, assets downstream of this one are not materialised
    # in the same run.
    return dg.AssetCheckSpec(check, asset=asset, blocking=True, description=description)


def _check_results(
    outcome: JobOutcome, verdict: str | None, max_error_rate: float
) -> list[dg.AssetCheckResult]:
    results = [
        dg.AssetCheckResult(
            check_name="error_rate",
            passed=outcome.error_rate <= max_error_rate,
            metadata={
                "error_rate": outcome.error_rate,
                "max_error_rate": max_error_rate,
                "rows_error": outcome.rows_error or 0,
            },
        )
    ]
    if verdict is not None:
        results.append(
            dg.AssetCheckResult(
                check_name="drift",
                passed=verdict != "drift",
                severity=dg.AssetCheckSeverity.ERROR,
                metadata={"verdict": verdict},
            )
        )
    return results


def _metadata(
    outcome: JobOutcome, verdict: str | None, baseline: str | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "job_id": outcome.job_id,
        "state": outcome.state,
        "rows_in": outcome.rows_in,
        "rows_out": outcome.rows_out,
        "rows_error": outcome.rows_error,
        "error_rate": outcome.error_rate,
        "output": _location(outcome.output),
        "errors_uri": _location(outcome.errors_uri),
    }
    if verdict is not None:
        metadata |= {"drift_verdict": verdict, "baseline": baseline}
    if manifest := outcome.record.get("manifest"):
        metadata["manifest"] = dg.MetadataValue.json(manifest)
    return {key: value for key, value in metadata.items() if value is not None}


def _location(uri: str | None) -> Any:
    """A URL as a link, anything else (a local path, a table) as a path."""
    if uri is None:
        return None
    if uri.startswith(("http://", "https://")):
        return dg.MetadataValue.url(uri)
    return dg.MetadataValue.path(uri)


def _label(spec: Spec) -> str:
    return str(spec) if isinstance(spec, str | Path) else "given as a mapping"


def thresher_quality_check(
    asset: dg.AssetsDefinition,
    metric: str,
    at_least: float | None = None,
    at_most: float | None = None,
    *,
    resource_key: str = "thresher",
) -> dg.AssetChecksDefinition:
    """A check named `quality_<metric>` on the quality of `asset`'s newest job, to run
    once actuals arrived (`thresher actuals add`): it fails when `metric` (`roc_auc`,
    `accuracy`, `f1`, `rmse`, …) is below `at_least` or above `at_most`, and passes,
    saying so, while there are no actuals yet; it fails when labels came but `metric`
    cannot be computed from them (the job's notes say why)."""
    key = asset.key

    @dg.asset_check(
        asset=key,
        name=f"quality_{metric}",
        required_resource_keys={resource_key},
        description=f"{metric} over the actuals of the newest job",
    )
    def _quality(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        runner: ThresherResource = getattr(context.resources, resource_key)
        event = context.instance.get_latest_materialization_event(key)
        materialised = None if event is None else event.asset_materialization
        if materialised is None or "job_id" not in materialised.metadata:
            return dg.AssetCheckResult(passed=False, metadata={"note": "never materialised"})
        job_id = str(materialised.metadata["job_id"].value)
        found = runner.quality(job_id)
        value = (found.get("metrics") or {}).get(metric)
        facts = {"job_id": job_id, "labelled": found.get("labelled"), metric: value}
        if value is None:  # before any label, nothing to judge; after, a metric it lacks
            labelled = bool(found.get("labelled"))
            facts["note"] = "; ".join(found.get("notes") or ()) or "not computable"
            if not labelled:
                facts["note"] = "no actuals yet"
            return dg.AssetCheckResult(passed=not labelled, metadata=_present(facts))
        low = at_least is not None and value < at_least
        high = at_most is not None and value > at_most
        return dg.AssetCheckResult(passed=not (low or high), metadata=_present(facts))

    return _quality


def _present(facts: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in facts.items() if value is not None}
