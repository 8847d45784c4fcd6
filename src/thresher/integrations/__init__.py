"""thresher inside the pipelines teams already run: each module is one orchestrator's
way in (`kubeflow`: a Kubeflow Pipelines step), importing that orchestrator's SDK, an
optional extra, only when used."""

__all__: list[str] = []
