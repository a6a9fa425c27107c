"""Loading, defaulting and validating et-operator's kinds (spec B.2–B.4; kto's rules)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.api import elastic, limits
from shared.core.elastic import defaulting, validating
from tests.core.elastic.world import training_job

JOB = training_job().dump()


def changed(path: str, value: Any, document: dict[str, Any] | None = None) -> dict[str, Any]:
    result = copy.deepcopy(document or JOB)
    node = result
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[keys[-1]] = value
    return result


def test_a_training_job_loads_losslessly_with_fields_kto_does_not_know() -> None:
    document = changed("spec.etReplicaSpecs.worker.template.spec.futureField", {"x": [1, 2]})
    document["spec"]["somethingNew"] = True
    assert elastic.load_training_job(document).dump() == document


@pytest.mark.parametrize(
    ("document", "path"),
    [
        pytest.param(changed("spec.etReplicaSpecs.worker.replicas", "two"), "spec.etReplicaSpecs.worker.replicas",
                     id="a-word-for-a-number"),
        pytest.param(changed("spec.etReplicaSpecs.launcher.template", []), "spec.etReplicaSpecs.launcher.template",
                     id="a-list-for-a-template"),
        pytest.param(changed("status.currentWorkers", "w-0"), "status.currentWorkers", id="a-string-for-a-list"),
        pytest.param(changed("apiVersion", "kubeflow.org/v1"), "apiVersion", id="another-group"),
        pytest.param(changed("kind", "MPIJob"), "kind", id="another-kind"),
        pytest.param({k: v for k, v in JOB.items() if k != "spec"}, "spec", id="no-spec"),
    ],
)
def test_a_bad_training_job_is_refused_naming_the_field(document: dict[str, Any], path: str) -> None:
    with pytest.raises(elastic.LoadError) as caught:
        elastic.load_training_job(document)
    assert path in [where for where, _ in caught.value.errors]


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        pytest.param({"env": [{"name": 1}]}, "spec.env[0].name", id="an-env-name-not-a-string"),
        pytest.param({"toDelete": {"podNames": "w-1"}}, "spec.toDelete.podNames", id="pod-names-not-a-list"),
        pytest.param({"toAdd": {"count": "many"}}, "spec.toAdd.count", id="a-count-not-a-number"),
    ],
)
def test_a_bad_scaler_is_refused_naming_the_field(spec: dict[str, Any], path: str) -> None:
    kind = "ScaleOut" if "toAdd" in spec else "ScaleIn"
    with pytest.raises(elastic.LoadError) as caught:
        elastic.load_scaler({"apiVersion": elastic.API_VERSION, "kind": kind, "metadata": {"name": "s"}, "spec": spec})
    assert [where for where, _ in caught.value.errors] == [path]


def test_a_document_nested_beyond_kto_limit_is_refused_before_it_is_walked() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(limits.MAX_OBJECT_DEPTH + 5):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(elastic.LoadError) as caught:
        elastic.load_training_job(changed("spec.etReplicaSpecs.worker.template.spec.deep", deep))
    [(path, message)] = caught.value.errors
    assert path.startswith("spec.etReplicaSpecs.worker.template.spec.deep") and "kto's limit" in message


def test_a_document_too_big_is_refused_naming_where_the_bulk_is() -> None:
    big = changed("spec.etReplicaSpecs.launcher.template.metadata", {"annotations": {"x": "y" * limits.MAX_OBJECT_BYTES}})
    with pytest.raises(elastic.LoadError) as caught:
        elastic.load_training_job(big)
    assert caught.value.errors[0][0] == "spec.etReplicaSpecs.launcher.template.metadata.annotations.x"


@pytest.mark.parametrize(
    ("kind", "loader"),
    [pytest.param("ScaleIn", elastic.load_training_job, id="a-ScaleIn-is-not-a-TrainingJob"),
     pytest.param("TrainingJob", elastic.load_scale_out, id="a-TrainingJob-is-not-a-ScaleOut")],
)
def test_the_typed_loaders_refuse_another_kind(kind: str, loader: Any) -> None:
    with pytest.raises(elastic.LoadError) as caught:
        loader(changed("kind", kind))
    assert caught.value.errors[0][0] == "kind"


def test_the_scalers_full_names_and_timeouts_are_upstreams() -> None:
    scale_in = elastic.load_scale_in({"apiVersion": elastic.API_VERSION, "kind": "ScaleIn",
                                      "metadata": {"name": "s", "namespace": "ns"}, "spec": {}})
    assert (scale_in.full_name, scale_in.SCALE_TYPE, scale_in.timeout) == ("ScaleIn:ns/s", "ScalingIn", 60)


# ---------------------------------------------------------------------------
# Defaulting
# ---------------------------------------------------------------------------


def test_defaults_are_applied_to_a_copy() -> None:
    document = changed("spec.etReplicaSpecs.worker", {"template": JOB["spec"]["etReplicaSpecs"]["worker"]["template"]})
    job = elastic.load_training_job(document)
    defaulted = defaulting.set_defaults(job)
    assert (defaulted.spec.restart_policy, defaulted.spec.backoff_limit, defaulted.spec.launcher_attach_mode) == (
        "Never", 6, "ssh")
    assert (defaulted.worker.replicas, defaulted.worker.restart_policy) == (1, "Never")
    assert defaulted.launcher.restart_policy is None, "an unset launcher policy means: do nothing when it is gone"
    assert job.spec.restart_policy is None and job.dump() == document


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def errors_of(document: dict[str, Any]) -> list[str]:
    return [str(e) for e in validating.validate(defaulting.set_defaults(elastic.load_training_job(document))).errors]


def test_the_upstream_example_is_valid() -> None:
    assert errors_of(JOB) == []


@pytest.mark.parametrize(
    ("document", "error"),
    [
        pytest.param(changed("spec.etReplicaSpecs.worker.replicas", 10),
                     "spec.etReplicaSpecs.worker.replicas: Invalid value: 10: must not be greater than maxReplicas 9",
                     id="more-workers-than-maxReplicas"),
        pytest.param(changed("spec.etReplicaSpecs.worker.minReplicas", 3),
                     "spec.etReplicaSpecs.worker.replicas: Invalid value: 2: must not be less than minReplicas 3",
                     id="fewer-workers-than-minReplicas"),
        pytest.param(changed("spec.etReplicaSpecs.worker.minReplicas", 10),
                     "spec.etReplicaSpecs.worker.minReplicas: Invalid value: 10: must not be greater than maxReplicas 9",
                     id="bounds-upside-down"),
        pytest.param(changed("spec.etReplicaSpecs.worker.template.spec.containers", []),
                     "spec.etReplicaSpecs.worker.template.spec.containers: Required value: at least one container is needed",
                     id="a-worker-without-containers"),
        pytest.param(changed("spec.etReplicaSpecs.launcher", None),
                     "spec.etReplicaSpecs.launcher: Required value", id="no-launcher"),
        pytest.param(changed("spec.etReplicaSpecs.launcher.replicas", 2),
                     "spec.etReplicaSpecs.launcher.replicas: Invalid value: 2: must be 1", id="two-launchers"),
        pytest.param(changed("spec.cleanPodPolicy", "Sometimes"),
                     'spec.cleanPodPolicy: Unsupported value: "Sometimes": supported values: "All", "Running", "None"',
                     id="an-unknown-clean-pod-policy"),
        pytest.param(changed("spec.launcherAttachMode", "telnet"),
                     'spec.launcherAttachMode: Unsupported value: "telnet": supported values: "ssh", "kubexec"',
                     id="an-unknown-attach-mode"),
        pytest.param(changed("spec.slotsPerWorker", 0),
                     "spec.slotsPerWorker: Invalid value: 0: must be greater than or equal to 1", id="no-slots"),
    ],
)
def test_a_job_kto_cannot_run_is_refused_naming_the_field(document: dict[str, Any], error: str) -> None:
    assert error in errors_of(document)


def test_a_name_too_long_for_its_worker_services_is_refused() -> None:
    errors = errors_of(changed("metadata.name", "a" * 55))
    assert len(errors) == 1 and errors[0].startswith("metadata.name: Invalid value: ")
    assert "a-worker-8' would not be a DNS-1035 label" in errors[0]


def test_a_job_that_fails_validation_is_failed_and_says_why() -> None:
    from shared.core.elastic import deciding
    from tests.core.elastic.world import KEYS, T0

    job = elastic.load_training_job(changed("spec.etReplicaSpecs.launcher.replicas", 2))
    decision = deciding.decide(job, [], [], T0, key_pair=lambda: KEYS)
    assert decision.status is not None and decision.status.phase == "Failed"
    assert decision.status.conditions and decision.status.conditions[-1].reason == "TrainingJobFailedValidation"
    assert "spec.etReplicaSpecs.launcher.replicas: Invalid value: 2: must be 1" in (decision.status.conditions[-1].message or "")
    assert decision.creates == []
