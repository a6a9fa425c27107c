"""Validation (spec §3, acceptance cases 8–19)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import jobs
from shared.core import reports, validating


def container(name: str = "", image: str = "busybox", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


def replica(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": list(containers)}}, **extra}


def document(kind: str, replicas: dict[str, Any] | None, name: str = "test-job", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = dict(spec)
    if replicas is not None:
        body[jobs.KINDS[kind].REPLICA_FIELD_ALIAS] = replicas
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name}, "spec": body}


def errors(doc: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    report = validating.validate(jobs.load(doc), jobs.load(old) if old else None)
    return [str(error) for error in report.errors]


def pytorch(master: dict[str, Any] | None = None, worker: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    replicas = {}
    if master is not None:
        replicas["Master"] = master
    if worker is not None:
        replicas["Worker"] = worker
    return document("PyTorchJob", replicas, **spec)


VALID: dict[str, dict[str, Any]] = {
    "PyTorchJob": pytorch(replica(container("pytorch"), replicas=1), replica(container("pytorch"), replicas=2)),
    "TFJob": document("TFJob", {"Chief": replica(container("tensorflow")), "Worker": replica(container("tensorflow"))}),
    "XGBoostJob": document("XGBoostJob", {"Master": replica(container("xgboost"), replicas=1)}),
    "MPIJob": document("MPIJob", {"Launcher": replica(container("l")), "Worker": replica(container("w"), replicas=2)}),
    "PaddleJob": document("PaddleJob", {"Worker": replica(container("paddle"), replicas=2)}),
    "JAXJob": document("JAXJob", {"Worker": replica(container("jax"), replicas=2)}),
}


@pytest.mark.parametrize("kind", [pytest.param(kind, id=kind) for kind in VALID])
def test_a_valid_job_of_every_kind_passes(kind: str) -> None:
    report = validating.validate(jobs.load(VALID[kind]))
    assert report.ok
    assert report.errors == [] and report.warnings == []


MPI_WORKER = {"Worker": replica(container("w"))}


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        pytest.param(None, ["spec.mpiReplicaSpecs: Required value: MPIReplicaSpecs is not valid"], id="nil-map"),
        pytest.param(
            {"Launcher": replica()},
            ["spec.mpiReplicaSpecs[Launcher].template.spec.containers: Required value: "
             "MPIReplicaSpecs is not valid: containers definition expected in Launcher"],
            id="launcher-without-containers",
        ),
        pytest.param(
            {"Launcher": replica(container("l", image=""))},
            ["spec.mpiReplicaSpecs[Launcher].template.spec.containers[0].image: Required value: "
             "MPIReplicaSpec is not valid: Image is undefined in the container of Launcher"],
            id="container-without-image",
        ),
        pytest.param(
            {"Launcher": replica(container(""))},
            ["spec.mpiReplicaSpecs[Launcher].template.spec.containers[0].name: Required value: "
             "MPIReplicaSpec is not valid: ImageName is undefined in the container of Launcher"],
            id="container-without-name",
        ),
        pytest.param(
            {"Launcher": replica(container("l"), replicas=2)},
            ["spec.mpiReplicaSpecs[Launcher].replicas: Forbidden: "
             "MPIReplicaSpec is not valid: There must be only 1 launcher replica"],
            id="two-launchers",
        ),
        pytest.param(
            MPI_WORKER,
            ["spec.mpiReplicaSpecs[Launcher]: Required value: MPIReplicaSpec is not valid: Master ReplicaSpec must be present"],
            id="no-launcher",
        ),
        pytest.param(
            {"Launcher": replica(container("l")), "Server": replica(container("s"))},
            ['spec.mpiReplicaSpecs[Server]: Unsupported value: "Server": MPIReplicaType is Server but must be one of [Launcher Worker]'],
            id="unknown-replica-type",
        ),
        pytest.param(
            {"Launcher": None},
            ["spec.mpiReplicaSpecs[Launcher]: Required value: MPIReplicaSpecs is not valid: containers definition expected in Launcher"],
            id="null-launcher",
        ),
    ],
)
def test_mpi_spec_rules_each_reject_with_a_field_path(replicas: dict[str, Any] | None, expected: list[str]) -> None:
    assert errors(document("MPIJob", replicas)) == expected


def test_mpi_reports_every_error_at_once() -> None:
    doc = document(
        "MPIJob",
        {"Worker": replica(container("", image="")), "Server": replica()},
    )
    assert errors(doc) == [
        "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].image: Required value: "
        "MPIReplicaSpec is not valid: Image is undefined in the container of Worker",
        "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].name: Required value: "
        "MPIReplicaSpec is not valid: ImageName is undefined in the container of Worker",
        'spec.mpiReplicaSpecs[Server]: Unsupported value: "Server": MPIReplicaType is Server but must be one of [Launcher Worker]',
        "spec.mpiReplicaSpecs[Server].template.spec.containers: Required value: "
        "MPIReplicaSpecs is not valid: containers definition expected in Server",
        "spec.mpiReplicaSpecs[Launcher]: Required value: MPIReplicaSpec is not valid: Master ReplicaSpec must be present",
    ]


def test_mpi_has_no_name_or_managed_by_checks() -> None:
    doc = document("MPIJob", {"Launcher": replica(container("l"))}, name="0-Bad", runPolicy={"managedBy": "other"})
    assert errors(doc) == []


DNS_DETAIL = (
    "should match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character "
    "(e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("0-test", [f'metadata.name: Invalid value: "0-test": {DNS_DETAIL}'], id="starts-with-digit"),
        pytest.param("Test", [f'metadata.name: Invalid value: "Test": {DNS_DETAIL}'], id="upper-case"),
        pytest.param(
            "a" * 64,
            [f'metadata.name: Invalid value: "{"a" * 64}": should match: must be no more than 63 characters'],
            id="too-long",
        ),
        pytest.param("a" * 63, [], id="63-characters-is-fine"),
        pytest.param("test-job-1", [], id="valid"),
    ],
)
def test_job_name_must_be_a_dns1035_label(name: str, expected: list[str]) -> None:
    doc = pytorch(replica(container("pytorch"), replicas=1), name=name)
    assert errors(doc) == expected


def test_worker_without_containers_gives_exactly_two_required_errors() -> None:
    doc = pytorch(worker=replica())
    assert errors(doc) == [
        "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must be specified",
        "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: "
        "must have at least one container with name pytorch",
    ]


@pytest.mark.parametrize(
    ("worker", "expected"),
    [
        pytest.param(
            replica(container("pytorch", image="")),
            ["spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: Required value: must be required"],
            id="empty-image",
        ),
        pytest.param(
            replica(container("")),
            ["spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: "
             "must have at least one container with name pytorch"],
            id="empty-container-name",
        ),
    ],
)
def test_pytorch_container_rules(worker: dict[str, Any], expected: list[str]) -> None:
    assert errors(pytorch(worker=worker)) == expected


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            pytorch(replica(container("pytorch"), replicas=2)),
            ["spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"],
            id="master-two-replicas",
        ),
        pytest.param(
            pytorch(replica(container("pytorch"))),
            ["spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"],
            id="master-replicas-unset-because-no-defaulting-ran",
        ),
        pytest.param(
            pytorch(replica(container("pytorch"), replicas=1), elasticPolicy={}),
            ["spec.pytorchReplicaSpecs[Worker]: Required value: must be configured if elastic policy is used"],
            id="elastic-without-worker",
        ),
        pytest.param(
            pytorch(worker=replica(container("pytorch"), replicas=0), elasticPolicy={}),
            ["spec.pytorchReplicaSpecs[Worker].replicas: Forbidden: must be at least 1"],
            id="elastic-worker-zero-replicas",
        ),
        pytest.param(
            document("PyTorchJob", {"Chief": replica(container("pytorch"))}),
            ['spec.pytorchReplicaSpecs[Chief]: Unsupported value: "Chief": supported values: "Master", "Worker"'],
            id="unknown-replica-type",
        ),
        pytest.param(
            document("PyTorchJob", None),
            ["spec.pytorchReplicaSpecs: Required value: must be required"],
            id="nil-map",
        ),
        pytest.param(
            pytorch(worker=None, master=None) | {"spec": {"pytorchReplicaSpecs": {"Worker": None}}},
            ["spec.pytorchReplicaSpecs[Worker]: Required value: must be specified"],
            id="null-replica-spec",
        ),
    ],
)
def test_pytorch_replica_rules(doc: dict[str, Any], expected: list[str]) -> None:
    assert errors(doc) == expected


MISSING_MAP = {
    "PyTorchJob": "spec.pytorchReplicaSpecs: Required value: must be required",
    "TFJob": "spec.tfReplicaSpecs: Required value: must be required",
    "XGBoostJob": "spec.xgbReplicaSpecs: Required value: must be required",
    "MPIJob": "spec.mpiReplicaSpecs: Required value: MPIReplicaSpecs is not valid",  # the controller's words
    "PaddleJob": "spec.paddleReplicaSpecs: Required value: must be required",
    "JAXJob": "spec.jaxReplicaSpecs: Required value: must be required",
}
"""Upstream's error for a nil replica map (spec §3.2 C2, §3.4), per kind."""


@pytest.mark.parametrize(
    ("kind", "replicas", "spec"),
    [
        *(pytest.param(kind, replicas, {}, id=f"{kind}-{name}")
          for kind in MISSING_MAP for name, replicas in (("nil", None), ("empty", {}))),
        # Nothing else is said of a map with no replica type: no elastic Worker, no XGBoost Master, no Launcher.
        pytest.param("PyTorchJob", {}, {"elasticPolicy": {"maxReplicas": 4}}, id="PyTorchJob-empty-elastic"),
    ],
)
def test_an_empty_replica_map_is_refused_as_a_missing_one_with_upstreams_words(
    kind: str, replicas: dict[str, Any] | None, spec: dict[str, Any],
) -> None:
    assert errors(document(kind, replicas, **spec)) == [MISSING_MAP[kind]]


@pytest.mark.parametrize(
    ("spec", "expected_errors"),
    [
        pytest.param({"elasticPolicy": {"nProcPerNode": 1}}, [], id="deprecated-field-alone-warns"),
        pytest.param(
            {"elasticPolicy": {"nProcPerNode": 1}, "nprocPerNode": "1"},
            ["spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode"],
            id="both-fields-forbidden",
        ),
    ],
)
def test_pytorch_deprecated_nproc_per_node_warns(spec: dict[str, Any], expected_errors: list[str]) -> None:
    doc = pytorch(worker=replica(container("pytorch"), replicas=1), **spec)
    report = validating.validate(jobs.load(doc))
    assert [str(e) for e in report.errors] == expected_errors
    assert report.warnings == ["spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"]


MANAGED_BY_SUPPORTED = 'supported values: "kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"'


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        *[
            pytest.param(kind, "other-job-controller",
                         [f'spec.runPolicy.managedBy: Unsupported value: "other-job-controller": {MANAGED_BY_SUPPORTED}'],
                         id=f"{kind}-unknown-controller")
            for kind in ("PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob")
        ],
        pytest.param("TFJob", "", [f'spec.runPolicy.managedBy: Unsupported value: "": {MANAGED_BY_SUPPORTED}'], id="empty-string"),
        pytest.param("PyTorchJob", "kueue.x-k8s.io/multikueue", [], id="multikueue"),
        pytest.param("PyTorchJob", "kubeflow.org/training-operator", [], id="kubeflow"),
        pytest.param("JAXJob", "other-job-controller", [], id="jax-not-checked-as-upstream"),
    ],
)
def test_managed_by_must_be_a_known_controller(kind: str, value: str, expected: list[str]) -> None:
    doc = VALID[kind] | {"spec": VALID[kind]["spec"] | {"runPolicy": {"managedBy": value}}}
    assert errors(doc) == expected


def with_run_policy(doc: dict[str, Any], run_policy: dict[str, Any]) -> dict[str, Any]:
    return doc | {"spec": doc["spec"] | {"runPolicy": run_policy}}


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        *[
            pytest.param(kind, ['spec.runPolicy.managedBy: Invalid value: "kueue.x-k8s.io/multikueue": field is immutable'],
                         id=f"{kind}-enforced")
            for kind in ("PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob")
        ],
        pytest.param("JAXJob", [], id="JAXJob-not-checked-as-upstream"),
        pytest.param("MPIJob", [], id="MPIJob-has-no-webhook"),
    ],
)
def test_managed_by_is_immutable_on_update(kind: str, expected: list[str]) -> None:
    old = with_run_policy(VALID[kind], {"managedBy": "kubeflow.org/training-operator"})
    new = with_run_policy(VALID[kind], {"managedBy": "kueue.x-k8s.io/multikueue"})
    assert errors(new, old) == expected


def test_setting_managed_by_on_update_is_a_change_too() -> None:
    old = VALID["TFJob"]
    new = with_run_policy(old, {"managedBy": "kubeflow.org/training-operator"})
    assert errors(new, old) == ['spec.runPolicy.managedBy: Invalid value: "kubeflow.org/training-operator": field is immutable']


@pytest.mark.parametrize(
    ("old_queue", "new_queue", "expected"),
    [
        pytest.param("initial-queue", "test",
                     ['spec.runPolicy.schedulingPolicy.queue: Invalid value: "test": spec.runPolicy.schedulingPolicy.queue is immutable'],
                     id="changed-rejected"),
        pytest.param("initial-queue", "initial-queue", [], id="unchanged-accepted"),
        pytest.param(None, "test", [], id="set-where-there-was-none-accepted"),
        pytest.param("initial-queue", None, [], id="removed-accepted"),
    ],
)
def test_queue_is_immutable_on_update(old_queue: str | None, new_queue: str | None, expected: list[str]) -> None:
    def job(queue: str | None) -> dict[str, Any]:
        return with_run_policy(VALID["PyTorchJob"], {"schedulingPolicy": {"queue": queue}} if queue else {})

    assert errors(job(new_queue), job(old_queue)) == expected


@pytest.mark.parametrize("kind", [pytest.param(k, id=k) for k in ("MPIJob", "JAXJob", "TFJob")])
def test_queue_immutability_applies_to_every_kind(kind: str) -> None:
    old = with_run_policy(VALID[kind], {"schedulingPolicy": {"queue": "a"}})
    new = with_run_policy(VALID[kind], {"schedulingPolicy": {"queue": "b"}})
    assert errors(new, old) == [
        'spec.runPolicy.schedulingPolicy.queue: Invalid value: "b": spec.runPolicy.schedulingPolicy.queue is immutable'
    ]


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        pytest.param(
            {"Chief": replica(container("tensorflow")), "Master": replica(container("tensorflow"))},
            ["spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role"],
            id="chief-and-master",
        ),
        pytest.param({"Chief": replica(container("tensorflow"), replicas=2)}, [], id="two-chief-replicas-pass"),
        pytest.param({"Foo": replica(container("tensorflow"))}, [], id="any-replica-type-accepted"),
        pytest.param(
            {"Worker": replica(container("tf"))},
            ["spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: "
             "must have at least one container with name tensorflow"],
            id="container-not-named-tensorflow",
        ),
        pytest.param(
            {"Worker": replica(container("tensorflow")), "worker": replica(container("tensorflow"))},
            ['spec.tfReplicaSpecs[worker]: Duplicate value: "worker": replica type "Worker" is already present '
             "(keys are compared case-insensitively)"],
            id="case-insensitive-duplicate",
        ),
    ],
)
def test_tfjob_rules(replicas: dict[str, Any], expected: list[str]) -> None:
    assert errors(document("TFJob", replicas)) == expected


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        pytest.param({"Worker": replica(container("xgboost"))},
                     ["spec.xgbReplicaSpecs[Master]: Required value: must be present"], id="no-master"),
        pytest.param({"Master": replica(container("xgboost"), replicas=2)},
                     ["spec.xgbReplicaSpecs[Master].replicas: Forbidden: must be 1"], id="two-masters"),
        pytest.param({"Master": replica(container("xgboost"))},
                     ["spec.xgbReplicaSpecs[Master].replicas: Forbidden: must be 1"], id="master-replicas-unset"),
    ],
)
def test_xgboost_master_rules(replicas: dict[str, Any], expected: list[str]) -> None:
    assert errors(document("XGBoostJob", replicas)) == expected


@pytest.mark.parametrize(
    ("kind", "replicas", "expected"),
    [
        pytest.param("PaddleJob", None, ["spec.paddleReplicaSpecs: Required value: must be required"], id="paddle-nil-map"),
        pytest.param("JAXJob", None, ["spec.jaxReplicaSpecs: Required value: must be required"], id="jax-nil-map"),
        pytest.param(
            "PaddleJob", {"Worker": replica(container("pd"))},
            ['spec.paddleReplicaSpecs[Worker].template.spec.containers: Required value: '
             'must have at least one container with name "paddle"'],
            id="paddle-container-name-quoted",
        ),
        pytest.param(
            "JAXJob", {"Worker": replica(container("jx"))},
            ["spec.jaxReplicaSpecs[Worker].template.spec.containers: Required value: "
             "must have at least one container with name jax"],
            id="jax-container-name",
        ),
        pytest.param(
            "JAXJob", {"Master": replica(container("jax"))},
            ['spec.jaxReplicaSpecs[Master]: Unsupported value: "Master": supported values: "Worker"'],
            id="jax-worker-only",
        ),
        pytest.param("PaddleJob", {"Master": replica(container("paddle"), replicas=3)}, [], id="paddle-no-count-rules"),
    ],
)
def test_paddle_and_jax_rules(kind: str, replicas: dict[str, Any] | None, expected: list[str]) -> None:
    assert errors(document(kind, replicas)) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        pytest.param({"spec": "nope"}, ["spec.pytorchReplicaSpecs[Worker].template.spec: Invalid value: must be an object"], id="spec-not-object"),
        pytest.param({"spec": {"containers": {"name": "pytorch"}}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.containers: Invalid value: must be a list"], id="containers-not-list"),
        pytest.param({"spec": {"containers": ["pytorch"]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.containers[0]: Invalid value: must be an object"], id="container-not-object"),
        pytest.param({"spec": {"containers": [{"name": "pytorch", "image": 3}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: Invalid value: must be a string"], id="image-not-string"),
        pytest.param({"spec": {"containers": [{"name": "pytorch", "image": "x", "ports": 80}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].ports: Invalid value: must be a list of objects"], id="ports-not-list"),
        pytest.param({"metadata": 5, "spec": {"containers": [{"name": "pytorch", "image": "x"}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.metadata: Invalid value: must be an object"], id="metadata-not-object"),
        pytest.param({"metadata": {"labels": {"a": 1}}, "spec": {"containers": [{"name": "pytorch", "image": "x"}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.metadata.labels: Invalid value: must be a map of strings"], id="label-not-string"),
        pytest.param({"spec": {"containers": [{"name": "pytorch", "image": "x", "ports": [{"containerPort": "80"}]}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].ports[0].containerPort: Invalid value: must be an integer"],
                     id="container-port-not-integer"),
        pytest.param({"spec": {"containers": [{"name": "pytorch", "image": "x", "resources": 7}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources: Invalid value: must be an object"],
                     id="resources-not-object"),
        pytest.param({"spec": {"containers": [{"name": "pytorch", "image": "x", "resources": {"limits": {"cpu": [1]}}}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].resources.limits: Invalid value: "
                      "must be a map of quantities (strings or numbers)"],
                     id="limit-not-quantity"),
        pytest.param({"spec": {"containers": [{"name": "pytorch", "image": "x", "env": [{"name": "A", "value": 1}]}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].env[0].value: Invalid value: must be a string"],
                     id="env-value-not-string"),
        pytest.param({"spec": {"containers": [{"name": "pytorch", "image": "x", "command": "python"}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].command: Invalid value: must be a list of strings"],
                     id="command-not-list"),
        pytest.param({"spec": {"volumes": {}, "containers": [{"name": "pytorch", "image": "x"}]}},
                     ["spec.pytorchReplicaSpecs[Worker].template.spec.volumes: Invalid value: must be a list of objects"],
                     id="volumes-not-list"),
    ],
)
def test_malformed_pod_templates_are_reported_not_crashed_on(template: dict[str, Any], expected: list[str]) -> None:
    assert errors(pytorch(worker={"template": template})) == expected


def test_all_errors_of_a_document_are_reported_and_described_as_an_aggregate() -> None:
    doc = pytorch(replica(container("x", image=""), replicas=3), name="Bad", runPolicy={"managedBy": "x"})
    report = validating.validate(jobs.load(doc))
    assert not report.ok
    assert [e.path for e in report.errors] == [
        "metadata.name",
        "spec.runPolicy.managedBy",
        "spec.pytorchReplicaSpecs[Master].template.spec.containers[0].image",
        "spec.pytorchReplicaSpecs[Master].template.spec.containers",
        "spec.pytorchReplicaSpecs[Master].replicas",
    ]
    assert reports.describe(report) == ", ".join(str(e) for e in report.errors)


def test_validation_does_not_change_the_job() -> None:
    job = jobs.load(document("MPIJob", {"Launcher": replica(container("l"))}))
    before = job.dump()
    validating.validate(job, job)
    assert job.dump() == before


def test_field_error_renders_in_kubernetes_form() -> None:
    error = reports.FieldError("spec.pytorchReplicaSpecs[Master].replicas", "Forbidden", "must be 1")
    assert str(error) == "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"
    assert error.message == "Forbidden: must be 1"
