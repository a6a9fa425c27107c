"""Trainer v2's admission rules give upstream's messages at upstream's field paths
(shared/core/trainer/validating.py; upstream v2.3.0's webhooks, runtime plugins and CEL rules)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from realparts import trainer as upstream
from shared.api import trainer
from shared.core import admitting, families, reports
from shared.core.trainer import validating

RUNTIMES = {document["metadata"]["name"]: document for path in upstream.runtime_files()
            for document in upstream.documents(path)}


def runtime(name: str = "torch-distributed", **changes: Any) -> trainer.ClusterTrainingRuntime:
    document = copy.deepcopy(RUNTIMES[name])
    for path, value in changes.items():
        node = document
        *parents, last = path.split(".")
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        node[last] = value
    loaded = trainer.load_runtime(document)
    assert isinstance(loaded, trainer.ClusterTrainingRuntime)
    return loaded


def trainjob(runtime_name: str = "torch-distributed", **spec: Any) -> trainer.TrainJob:
    return trainer.load_trainjob({"apiVersion": trainer.API_VERSION, "kind": "TrainJob",
                                  "metadata": {"name": "job", "namespace": "team"},
                                  "spec": {"runtimeRef": {"name": runtime_name}, **spec}})


def message(report: reports.Report) -> str:
    return reports.aggregate(report.errors)


NOT_FOUND = validating.not_found("ClusterTrainingRuntime", "nope")
REF = '{"name":"nope","apiGroup":"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}'
TORCH_REF = '{"name":"torch-distributed","apiGroup":"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}'
PATCH = {"manager": "example.com/team", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
    {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "sidecar"}]}}}}}]}}}}


@pytest.mark.parametrize("job, found, expected", [
    pytest.param(trainjob("nope"), NOT_FOUND,
                 f'spec.RuntimeRef: Invalid value: {REF}: clustertrainingruntimes.trainer.kubeflow.org "nope" not '
                 f"found: specified clusterTrainingRuntime must be created before the TrainJob is created",
                 id="cluster-runtime-missing"),
    pytest.param(trainjob("nope", runtimeRef={"name": "nope", "kind": "TrainingRuntime"}),
                 validating.not_found("TrainingRuntime", "nope"),
                 'spec.runtimeRef: Invalid value: {"name":"nope","apiGroup":"trainer.kubeflow.org","kind":'
                 '"TrainingRuntime"}: trainingruntimes.trainer.kubeflow.org "nope" not found: specified '
                 "trainingRuntime must be created before the TrainJob is created", id="namespaced-runtime-missing"),
    pytest.param(trainjob(runtimeRef={"name": "x", "kind": "Runtime"}), NOT_FOUND,
                 "unsupported runtime: Runtime.trainer.kubeflow.org", id="unknown-runtime-kind"),
    pytest.param(trainjob(runtimePatches=[PATCH]), runtime(),
                 "spec.runtimePatches: Invalid value: " + validating.go_json([PATCH]) + ": must not have container "
                 "that doesn't exist in the runtime job node", id="patch-targets-a-missing-container"),
    pytest.param(trainjob(runtimePatches=[{**PATCH, "trainingRuntimeSpec": {"template": {"spec": {
                     "replicatedJobs": [{"name": "launcher"}]}}}}]), runtime(),
                 "must not have replicated job that doesn't exist in the runtime job template",
                 id="patch-targets-a-missing-job"),
    pytest.param(trainjob(runtimePatches=[{"manager": "nodomain"}]), runtime(),
                 'spec.runtimePatches.manager: Invalid value: "nodomain": must be a domain-prefixed path (such as '
                 '"acme.io/foo")', id="patch-manager-not-domain-prefixed"),
    pytest.param(trainjob(runtimePatches=[{"manager": "example.com/a b"}]), runtime(),
                 'spec.runtimePatches.manager: Invalid value: "a b": Invalid path (regex used for validation is '
                 "'[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')", id="patch-manager-path"),
    pytest.param(trainjob(trainer={"env": [{"name": "PET_NNODES", "value": "3"}]}), runtime(),
                 'spec.trainer.env: Invalid value: [{"name":"PET_NNODES","value":"3"}]: must not have reserved '
                 "envs, invalid envs configured: [PET_NNODES]", id="torch-reserved-env"),
    pytest.param(trainjob("deepspeed-distributed", trainer={"numNodes": 2}),
                 runtime("deepspeed-distributed", **{"spec.mlPolicy.mpi.runLauncherAsNode": True,
                                                     "spec.template.spec.replicatedJobs": [
                                                         RUNTIMES["deepspeed-distributed"]["spec"]["template"]["spec"]
                                                         ["replicatedJobs"][0]]}),
                 "spec.trainer.numNodes: Invalid value: 2: must have 1 when MPI trainingRuntime with enabled "
                 "runLauncherAsNode does not have either launcher and node", id="mpi-numNodes-beyond-the-runtime"),
    pytest.param(trainjob("torchtune-llama3.2-1b", trainer={"command": ["tune", "run"], "numNodes": 2}),
                 runtime("torchtune-llama3.2-1b"),
                 "spec.trainer.numNodes: Invalid value: 2: must be 1 for llama3_2/1B model",
                 id="torchtune-numNodes-beyond-the-model"),
    pytest.param(trainjob("torchtune-llama3.2-1b", trainer={"command": ["tune", "run"],
                                                          "args": ["output_dir=/tmp/out", "epochs=1"]}),
                 runtime("torchtune-llama3.2-1b"),
                 'spec.trainer.args[0]: Invalid value: "output_dir=/tmp/out": must not set immutable config '
                 '"output_dir" in trainer args; it is managed by the runtime', id="torchtune-immutable-config"),
    pytest.param(trainjob("torch-distributed", trainer={"numProcPerNode": 0}),
                 runtime(**{"spec.mlPolicy": {"numNodes": 1, "flux": {"numProcPerNode": 1}}}),
                 "spec.trainer.numProcPerNode: Invalid value: 0: must be greater than or equal to 1 for Flux TrainJob",
                 id="flux-procs"),
    pytest.param(trainjob("xgboost-distributed", trainer={"env": [{"name": "A"}, {"name": "DMLC_TASK_ID"}]}),
                 runtime("xgboost-distributed"),
                 "spec.trainer.env[1]: Forbidden: DMLC_TASK_ID is reserved for the XGBoost runtime",
                 id="xgboost-reserved-env"),
    pytest.param(trainjob(initializer={"dataset": {"storageUri": "hf://x"}}), runtime(),
                 f"spec.runtimeRef: Invalid value: {TORCH_REF}: must have dataset-initializer job when trainJob is "
                 "configured with input datasetConfig", id="dataset-initializer-missing"),
    pytest.param(trainjob(initializer={"model": {"storageUri": "hf://x"}}), runtime(),
                 f"spec.runtimeRef: Invalid value: {TORCH_REF}: must have model-initializer job when trainJob is "
                 "configured with input modelConfig", id="model-initializer-missing"),
])
def test_a_trainjob_is_refused_against_its_runtime_with_upstreams_words(
        job: trainer.TrainJob, found: Any, expected: str) -> None:
    assert expected in message(validating.check_against_runtime(job, found))


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_every_upstream_runtime_is_accepted_and_accepts_a_plain_trainjob(name: str) -> None:
    built_in = runtime(name)
    assert validating.check_runtime(built_in).errors == []
    job = trainjob(name)
    assert validating.check_schema_rules(job).errors == []
    assert validating.check_against_runtime(job, built_in).errors == []


ROLE = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


@pytest.mark.parametrize("changes, expected", [
    pytest.param({"spec.mlPolicy.mpi": {}}, 'spec.mlPolicy: Invalid value: Only one of the policy can be '
                 "configured", id="two-ml-policies"),
    pytest.param({"spec.template.spec.replicatedJobs.0.replicas": 2},
                 "spec.template.spec.replicatedJobs[0].replicas: Invalid value: 2: always must be 1",
                 id="trainer-step-replicas"),
    pytest.param({"spec.template.spec.replicatedJobs.0.template.spec.template.spec.containers": [{"name": "main"}]},
                 'spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers: Invalid value: '
                 '[{"name":"main"}]: must contain the required container for the ancestor: trainer',
                 id="trainer-step-without-node-container"),
    pytest.param({"spec.mlPolicy.torch": {"envInjection": {"targets": [{"jobName": "node",
                                                                        "containerNames": ["node"]}]}}},
                 'spec.mlPolicy.torch.envInjection.targets[0].containerNames: Invalid value: containerNames '
                 "must not include the main node container because PET_* envs are always injected into it",
                 id="env-injection-of-node"),
    pytest.param({"spec.template.spec.startupPolicy": {"startupPolicyOrder": "InOrder"},
                  "spec.template.spec.replicatedJobs.0.dependsOn": [{"name": "x", "status": "Complete"}]},
                 'spec.template.spec: Invalid value: StartupPolicy and DependsOn APIs are mutually exclusive',
                 id="startup-policy-and-depends-on"),
])
def test_a_bad_runtime_is_refused_with_upstreams_words(changes: dict[str, Any], expected: str) -> None:
    assert message(validating.check_runtime(runtime(**changes))) == expected


@pytest.mark.parametrize("job, old, expected", [
    pytest.param(trainjob(managedBy="someone/else"), None,
                 'spec.managedBy: Invalid value: "someone/else": ManagedBy must be trainer.kubeflow.org/trainjob-controller '
                 "or kueue.x-k8s.io/multikueue if set", id="managedBy-value"),
    pytest.param(trainjob(managedBy=trainer.MANAGED_BY_MULTIKUEUE), trainjob(managedBy=trainer.MANAGED_BY_TRAINER),
                 'spec.managedBy: Invalid value: "kueue.x-k8s.io/multikueue": field is immutable', id="managedBy-immutable"),
    pytest.param(trainjob("other"), trainjob(),
                 'spec.runtimeRef: Invalid value: field is immutable', id="runtimeRef-immutable"),
    pytest.param(trainjob(initializer={"dataset": {"storageUri": "not a uri"}}), None,
                 'spec.initializer.dataset.storageUri: Invalid value: "not a uri": storageUri may be empty, or it must be '
                 "a valid URI (scheme://...)", id="storageUri"),
])
def test_a_trainjob_breaking_a_cel_rule_is_refused_as_kube_apiserver_words_it(
        job: trainer.TrainJob, old: trainer.TrainJob | None, expected: str) -> None:
    assert message(validating.check_schema_rules(job, old)) == expected


def test_runtime_patches_change_only_while_suspended() -> None:
    old, new = trainjob(), trainjob(runtimePatches=[{"manager": "example.com/x"}])
    assert "RuntimePatches can only be modified when the TrainJob is suspended before or after the update" in message(
        validating.check_against_runtime(new, runtime(), old))
    suspended = trainjob(runtimePatches=[{"manager": "example.com/x"}], suspend=True)
    assert validating.check_against_runtime(suspended, runtime(), old).errors == []


def test_a_deprecated_runtime_is_accepted_with_upstreams_warning() -> None:
    deprecated = runtime(**{"metadata.labels": {"trainer.kubeflow.org/support": "deprecated"}})
    report = validating.check_against_runtime(trainjob(), deprecated)
    assert report.errors == []
    assert report.warnings == [
        'Referenced ClusterTrainingRuntime "torch-distributed" is deprecated and will be removed in a future release '
        f"of Kubeflow Trainer. See runtime deprecation policy: {validating.DEPRECATION_POLICY_URL}"]


def test_the_webhook_serves_the_three_kinds_under_upstreams_names_and_paths() -> None:
    hooks = {hook.name: hook.path for hook in families.REGISTRY.hooks if hook.target.group == trainer.GROUP}
    assert hooks == {
        "validator.trainjob.trainer.kubeflow.org": "/validate-trainer-kubeflow-org-v1alpha1-trainjob",
        "validator.trainingruntime.trainer.kubeflow.org": "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime",
        "validator.clustertrainingruntime.trainer.kubeflow.org":
            "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime",
    }


def test_the_trainjob_hook_reads_the_runtime_and_refuses_a_missing_one() -> None:
    hook = next(h for h in families.REGISTRY.hooks if h.name == "validator.trainjob.trainer.kubeflow.org")
    asked: list[admitting.Read] = []

    def fetch(read: admitting.Read) -> admitting.Unread:
        asked.append(read)
        return validating.not_found(read.kind, read.name)

    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "operation": "CREATE", "object": trainjob("nope").dump(),
        "kind": {"group": trainer.GROUP, "version": trainer.VERSION, "kind": "TrainJob"}}}
    answer = admitting.review(hook, body, fetch)
    assert asked == [admitting.Read(trainer.API_VERSION, "ClusterTrainingRuntime", None, "nope")]
    assert not answer.allowed and "specified clusterTrainingRuntime must be created" in answer.message
    assert admitting.review(hook, body).allowed  # no API access: left to the reconciler
