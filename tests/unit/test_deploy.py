"""The deployment files in deploy/ are checked as far as this machine allows: every
Kubernetes manifest against the Kubernetes API's schemas (strict: an unknown field fails),
KubeRay's pod templates as pods, the job specs and server config they carry by thresher
itself, the AWS Batch job definition against botocore's model of RegisterJobDefinition,
and the Kubeflow step compiled to its pipeline YAML. None of them ran on a real cluster."""

# No `from __future__ import annotations`: kfp reads the pipeline's annotations as objects.

import json
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from thresher.service.config import ServerConfig
from thresher.spec import parse_spec

pytestmark = pytest.mark.unit

DEPLOY = Path(__file__).parents[2] / "deploy"
KUBERNETES = "1.30.0"  # the oldest Kubernetes the manifests are for (CronJob timeZone: 1.27)
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))


def resources() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
        for path in MANIFESTS
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def test_there_are_manifests_for_the_service_the_jobs_and_ray() -> None:
    kinds = {doc["kind"] for _, doc in resources()}
    assert {"Deployment", "Service", "ConfigMap", "Job", "CronJob", "RayJob"} <= kinds


@pytest.mark.parametrize(
    "doc",
    [doc for _, doc in resources() if doc["apiVersion"] != "ray.io/v1"],
    ids=[name for name, doc in resources() if doc["apiVersion"] != "ray.io/v1"],
)
def test_a_manifest_is_valid_kubernetes(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_a_bad_field_is_caught() -> None:  # the check above can fail
    deployment = next(doc for _, doc in resources() if doc["kind"] == "Deployment")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicey"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_the_ray_job_s_pods_are_valid_pods() -> None:
    """KubeRay's own schema is a CRD's, not in the API's: its pod templates are checked as
    the pods KubeRay makes of them."""
    (rayjob,) = [doc for _, doc in resources() if doc["kind"] == "RayJob"]
    cluster = rayjob["spec"]["rayClusterSpec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for group in groups:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ray"}, **group["template"]}
        kubernetes_validate.validate(pod, KUBERNETES, strict=True)
    assert rayjob["spec"]["entrypoint"].startswith("thresher run /etc/thresher/jobs/")


def config_maps() -> dict[str, dict[str, str]]:
    return {
        doc["metadata"]["name"]: doc["data"] for _, doc in resources() if doc["kind"] == "ConfigMap"
    }


def test_the_job_specs_in_the_config_maps_are_valid_specs() -> None:
    specs = config_maps()["thresher-jobs"]
    assert specs
    for name, text in specs.items():
        spec = parse_spec(tomllib.loads(text))
        assert spec.job.name == name.removesuffix(".toml")
    mounted = "/etc/thresher/jobs/"
    runs = [
        args[1].removeprefix(mounted)
        for _, doc in resources()
        for args in _container_args(doc)
        if args[:1] == ["run"]
    ]
    assert runs and set(runs) <= set(specs)  # each Job runs a spec the ConfigMap has


def test_the_server_config_is_a_valid_config() -> None:
    config = ServerConfig.model_validate(
        tomllib.loads(config_maps()["thresher-server"]["server.toml"])
    )
    assert config.models and str(config.data_dir) == "/var/lib/thresher"


def _container_args(doc: dict[str, Any]) -> list[list[str]]:
    spec = doc.get("spec", {})
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
    containers = (template or {}).get("spec", {}).get("containers", [])
    return [list(c.get("args", [])) for c in containers]


def test_the_aws_batch_job_definition_is_what_aws_batch_takes() -> None:
    import botocore.session
    from botocore.validate import ParamValidator

    definition = json.loads((DEPLOY / "aws-batch" / "job-definition.json").read_text())
    model = botocore.session.get_session().get_service_model("batch")
    shape = model.operation_model("RegisterJobDefinition").input_shape
    report = ParamValidator().validate(definition, shape)
    assert not report.has_errors(), report.generate_report()
    broken = {
        **definition,
        "containerProperties": {**definition["containerProperties"], "vcpu": "8"},
    }
    assert ParamValidator().validate(broken, shape).has_errors()  # a string for an int
    assert definition["containerProperties"]["command"][0] == "run"


def test_the_kubeflow_step_compiles_to_a_pipeline(tmp_path: Path) -> None:
    from kfp import compiler, dsl

    from thresher.integrations.kubeflow import thresher_step

    score = thresher_step(image="registry.example/thresher:1.0")

    @dsl.pipeline(name="nightly-scores")
    def nightly(spec: str) -> None:
        score(spec=spec).set_caching_options(False)

    compiler.Compiler().compile(nightly, str(tmp_path / "nightly.yaml"))
    pipeline = yaml.safe_load((tmp_path / "nightly.yaml").read_text())
    (executor,) = pipeline["deploymentSpec"]["executors"].values()
    container = executor["container"]
    assert container["image"] == "registry.example/thresher:1.0"
    assert "thresher run" in container["command"][-1]
    (component,) = pipeline["components"].values()
    assert component["outputDefinitions"]["parameters"]["result"]["parameterType"] == "STRING"
    task = pipeline["root"]["dag"]["tasks"]["thresher-job"]
    assert task["cachingOptions"] == {} or not task["cachingOptions"].get("enableCache")
