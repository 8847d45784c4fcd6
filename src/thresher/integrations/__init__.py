"""thresher inside the pipelines teams already run: each module is one orchestrator's
way in (`kubeflow`: a Kubeflow Pipelines step; `airflow`: an operator, its trigger and a
sensor; `dagster`: a resource, assets and checks), importing that orchestrator's SDK, an
optional extra, only when used; `jobs` is what the last two share (a job run here or on
`thresher serve`, and how it ended)."""

__all__: list[str] = []
