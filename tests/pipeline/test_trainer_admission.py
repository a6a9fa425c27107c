"""Trainer v2 at apply time on both tiers, with the real kubectl: upstream's runtime files apply unchanged, the
issue's bad inputs are refused with upstream's message and field path, and ``kubectl explain`` prints upstream's
descriptions (deploy/crds/trainer.*, shared/core/trainer/validating.py through kto's webhook).

kto's webhook serves in the test's event loop, reads runtimes from the test's cluster (its kubeconfig), and is
registered for the test's namespace (a ClusterTrainingRuntime, cluster-scoped, is sent to it whatever the
selector), then removed. On the sim tier sim/apiserver/admitting.py calls it; on the kube tier kube-apiserver
does, after its own CEL rules, which sim/ does not run: there the same words come from kto's webhook.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from realparts import trainer as upstream
from services.webhook import certifying, registering, serving
from services.webhook.settings import WebhookSettings
from shared.api import trainer
from tests.fixtures.pipeline import Pipeline
from tests.fixtures.sim import Kubectl, KubectlResult

RUNTIME_FILES = upstream.runtime_files()
RUNTIMES = {document["metadata"]["name"]: document for path in RUNTIME_FILES for document in upstream.documents(path)}


@dataclasses.dataclass
class Admission:
    kubectl: Kubectl
    namespace: str

    async def apply(self, document: dict[str, Any]) -> KubectlResult:
        return await self.kubectl("-n", self.namespace, "apply", "-f", "-", input=yaml.safe_dump(document),
                                  check=False)


@pytest.fixture
async def admission(pipeline: Pipeline, tmp_path: pathlib.Path) -> AsyncIterator[Admission]:
    files = certifying.ensure(tmp_path / "webhook")
    server = serving.Server(WebhookSettings(files.cert, files.key, host="127.0.0.1", port=0,
                                            kubeconfig=pipeline.kubeconfig))
    await server.start()
    manifests = registering.configurations(server.url, files.ca.read_bytes(), name=f"kto-trainer-{pipeline.namespace}",
                                           namespace_selector=registering.only_namespace(pipeline.namespace))
    kubectl = Kubectl(pipeline.kubeconfig, tmp_path / "kube-cache")
    applied = False
    try:
        await registering.register(pipeline.client, manifests)
        await _until_registered(kubectl, pipeline.namespace)
        for path in RUNTIME_FILES:  # unchanged, as a user installs them
            await kubectl("apply", "-f", str(path))
        applied = True
        yield Admission(kubectl, pipeline.namespace)
    finally:
        if applied:
            for path in RUNTIME_FILES:
                await kubectl("delete", "--ignore-not-found", "-f", str(path), check=False)
        await registering.unregister(pipeline.client, manifests)
        await server.stop()


async def _until_registered(kubectl: Kubectl, namespace: str) -> None:
    probe = yaml.safe_dump(trainjob("probe", "no-such-runtime"))
    for _ in range(100):
        out = await kubectl("-n", namespace, "create", "--dry-run=server", "-f", "-", input=probe, check=False)
        if "denied the request" in out.stderr:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the webhook never answered: {out.stderr}{out.stdout}")


def trainjob(name: str, runtime_name: str = "torch-distributed", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": trainer.API_VERSION, "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime_name}, **spec}}


def bad_runtime() -> dict[str, Any]:
    document = copy.deepcopy(RUNTIMES["torch-distributed"])
    document["kind"] = "TrainingRuntime"
    document["metadata"]["name"] = "two-policies"
    document["spec"]["mlPolicy"]["mpi"] = {}
    return document


def runtime_with_replicas(replicas: int) -> dict[str, Any]:
    document = copy.deepcopy(RUNTIMES["torch-distributed"])
    document["kind"] = "TrainingRuntime"
    document["metadata"]["name"] = "two-trainers"
    document["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = replicas
    return document


TRAINJOB_HOOK = 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
PATCH = {"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
    {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "sidecar"}]}}}}}]}}}}

BAD_INPUT = [
    pytest.param(trainjob("missing-runtime", "no-such-runtime"),
                 [TRAINJOB_HOOK + 'spec.RuntimeRef: Invalid value: {"name":"no-such-runtime","apiGroup":'
                  '"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}: clustertrainingruntimes.trainer.kubeflow.org '
                  '"no-such-runtime" not found: specified clusterTrainingRuntime must be created before the TrainJob '
                  "is created"], id="runtime-does-not-exist"),
    pytest.param(bad_runtime(), ['spec.mlPolicy: Invalid value: Only one of the policy can be configured'],
                 id="runtime-with-two-ml-policies"),
    pytest.param(trainjob("patch-missing-container", runtimePatches=[PATCH]),
                 [TRAINJOB_HOOK + "spec.runtimePatches: Invalid value: ",
                  "must not have container that doesn't exist in the runtime job node"],
                 id="patch-targets-a-container-the-runtime-lacks"),
    pytest.param(trainjob("too-many-nodes", "torchtune-llama3.2-1b", trainer={"command": ["tune", "run"],
                                                                              "numNodes": 2}),
                 [TRAINJOB_HOOK + "spec.trainer.numNodes: Invalid value: 2: must be 1 for llama3_2/1B model"],
                 id="numNodes-beyond-the-runtime"),
    pytest.param(trainjob("bad-managed-by", managedBy="someone.io/controller"),
                 ['spec.managedBy: Invalid value: "someone.io/controller": ManagedBy must be trainer.kubeflow.org/trainjob-controller '
                  "or kueue.x-k8s.io/multikueue if set"], id="managedBy-value"),
    pytest.param(trainjob("bad-uri", initializer={"model": {"storageUri": "no scheme"}}),
                 ['spec.initializer.model.storageUri: Invalid value: "no scheme": storageUri may be empty, or it must be '
                  "a valid URI (scheme://...)"], id="storageUri"),
    pytest.param(trainjob("dotted.name"), ["<nil>: Invalid value: metadata.name must match RFC 1035 DNS label format"],
                 id="name-not-dns-1035"),
    pytest.param(runtime_with_replicas(2), ['admission webhook "validator.trainingruntime.trainer.kubeflow.org" denied '
                                            "the request: spec.template.spec.replicatedJobs[0].replicas: Invalid value: "
                                            "2: always must be 1"], id="runtime-trainer-step-replicas"),
]


@pytest.mark.parametrize("document, said", BAD_INPUT)
async def test_bad_input_is_refused_with_upstreams_message_and_field_path(
        admission: Admission, document: dict[str, Any], said: list[str]) -> None:
    result = await admission.apply(document)
    assert result.returncode != 0, result.stdout
    for text in said:
        assert text in result.stderr, result.stderr


async def test_every_upstream_runtime_applied_unchanged_serves_a_trainjob(admission: Admission) -> None:
    listed = await admission.kubectl("get", "clustertrainingruntimes", "-o", "name")
    assert {f"clustertrainingruntime.trainer.kubeflow.org/{name}" for name in RUNTIMES} <= set(
        listed.stdout.split())
    for name in RUNTIMES:  # suspended: what the job would run is not this test's business
        job = trainjob(f"job-{len(name)}", name, suspend=True)
        result = await admission.kubectl("-n", admission.namespace, "create", "-o", "yaml", "-f", "-",
                                         input=yaml.safe_dump(job), check=False)
        assert result.returncode == 0, (name, result.stderr)
        await admission.kubectl("-n", admission.namespace, "delete", "trainjob", job["metadata"]["name"], "--wait=false")
        stored = yaml.safe_load(result.stdout)
        assert stored["spec"]["runtimeRef"] == {"name": name, "apiGroup": trainer.GROUP,
                                                "kind": trainer.CLUSTER_TRAINING_RUNTIME_KIND}
        assert stored["spec"]["managedBy"] == trainer.MANAGED_BY_TRAINER


async def test_kubectl_explain_prints_upstreams_description(admission: Admission) -> None:
    output = (await admission.kubectl("explain", "trainjob.spec.trainer")).stdout
    described = trainer.TrainJobSpec.model_fields["trainer"].description
    assert described is not None
    assert " ".join(described.split()) in " ".join(output.split()), output
    assert "numProcPerNode" in output and "resourcesPerNode" in output
