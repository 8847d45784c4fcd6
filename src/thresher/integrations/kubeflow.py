"""A thresher job as a Kubeflow Pipelines step (the `kfp` SDK, the `kubeflow` extra).

    from kfp import compiler, dsl
    from thresher.integrations.kubeflow import thresher_step

    score = thresher_step(image="registry.example/thresher:1.0")

    @dsl.pipeline(name="nightly-scores")
    def nightly(spec: str) -> None:
        score(spec=spec).set_caching_options(False)  # tonight's data is not last night's

    compiler.Compiler().compile(nightly, "nightly-scores.yaml")

The step runs `thresher run` in the thresher container on the spec given as text (TOML:
its paths absolute or URLs, as there is no folder to resolve them against), its store
from the container's `THRESHER_STORE`; the step fails when the job does not
succeed (the exit code is thresher's: 2 for a bad spec or input, 1 for a failed job), and
its output `result` is the job's `ended` event (`thresher run --json`: the job id, state,
output, errors file and manifest) for the steps after it.
"""

# No `from __future__ import annotations` here: kfp reads the component's annotations at
# run time, as objects (dsl.OutputPath(str)), not as strings.
from typing import Any

# The step's shell: the spec to a file, the job's events to another, the last event (how
# it ended) to the step's output, and thresher's exit code as the step's.
_SCRIPT = """\
set -u
mkdir -p "$(dirname "$1")"
work="$(mktemp -d)"
printf '%s' "$0" > "$work/job.toml"
thresher run "$work/job.toml" --json > "$work/events.jsonl"
code=$?
tail -n 1 "$work/events.jsonl" > "$1"
exit "$code"
"""


def thresher_step(image: str = "thresher:latest") -> Any:
    """A Kubeflow container component running one thresher job in `image` (the project's
    Dockerfile, with the extras the job's model and sink need)."""
    from kfp import dsl

    @dsl.container_component  # type: ignore[untyped-decorator]
    def thresher_job(spec: str, result: dsl.OutputPath(str)) -> dsl.ContainerSpec:  # type: ignore[valid-type]
        """Run one thresher job on `spec` (a job spec's TOML); `result`: how it ended."""
        return dsl.ContainerSpec(image=image, command=["sh", "-c", _SCRIPT], args=[spec, result])

    return thresher_job
