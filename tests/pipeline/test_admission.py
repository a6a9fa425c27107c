"""Admission at apply time (issue 13, item 1), on both tiers, with the real kubectl.

kto's webhook serves in the test's event loop and is registered as ``kto up``
registers it (ValidatingWebhookConfiguration + MutatingWebhookConfiguration,
``clientConfig.url`` with the CA), but with a namespace selector matching the
test's namespace only, and removed at the end: the real tier is one cluster per
pytest worker, and other tests create invalid jobs on purpose to see them fail
in the reconciler. On the sim tier sim/apiserver/admitting.py calls it; on the kube tier
kube-apiserver does.
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

from kto import stack
from services.webhook import certifying, registering, serving
from services.webhook.settings import WebhookSettings
from shared.kube import resources
from tests.fixtures import tiers
from tests.fixtures.pipeline import Pipeline
from tests.fixtures.sim import Kubectl, KubectlResult

ROOT = pathlib.Path(__file__).resolve().parents[2]
V1 = "kubeflow.org/v1"
DNS_DETAIL = ("should match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
              "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex "
              "used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


def denied_by(kind: str, message: str) -> str:
    """kube-apiserver's words for a denial of upstream's validator of ``kind``."""
    return f'admission webhook "validator.{kind.lower()}.training-operator.kubeflow.org" denied the request: {message}'


@dataclasses.dataclass
class Admission:
    """The registered webhook, and kubectl in the test's namespace."""

    server: serving.Server
    manifests: list[dict[str, Any]]
    kubectl: Kubectl
    namespace: str

    async def apply(self, document: dict[str, Any] | str) -> KubectlResult:
        text = document if isinstance(document, str) else yaml.safe_dump(document)
        return await self.kubectl("-n", self.namespace, "apply", "-f", "-", input=text, check=False)

    async def stored(self, kind: str, name: str) -> dict[str, Any]:
        out = await self.kubectl("-n", self.namespace, "get", f"{kind.lower()}s.kubeflow.org", name, "-o", "yaml")
        loaded: dict[str, Any] = yaml.safe_load(out.stdout)
        return loaded


def container(name: str, image: str = "busybox") -> dict[str, Any]:
    return {"name": name, "image": image}


def replica(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": list(containers)}}, **extra}


def job(kind: str, name: str, replicas: dict[str, Any] | None, api_version: str = V1, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = dict(spec)
    if replicas is not None:
        field = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "XGBoostJob": "xgbReplicaSpecs",
                 "PaddleJob": "paddleReplicaSpecs", "JAXJob": "jaxReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}[kind]
        body[field] = replicas
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": body}


def pytorch(name: str, master: int | None = 1, workers: int | None = 1, **spec: Any) -> dict[str, Any]:
    replicas: dict[str, Any] = {"Master": replica(container("pytorch"))}
    if master is not None:
        replicas["Master"]["replicas"] = master
    if workers is not None:
        replicas["Worker"] = replica(container("pytorch"), replicas=workers)
    return job("PyTorchJob", name, replicas, **spec)


@pytest.fixture
async def admission(pipeline: Pipeline, tmp_path: pathlib.Path) -> AsyncIterator[Admission]:
    files = certifying.ensure(tmp_path / "webhook")
    server = serving.Server(WebhookSettings(files.cert, files.key, host="127.0.0.1", port=0))
    await server.start()
    manifests = registering.configurations(server.url, files.ca.read_bytes(), name=f"kto-{pipeline.namespace}",
                                           namespace_selector=registering.only_namespace(pipeline.namespace))
    kubectl = Kubectl(pipeline.kubeconfig, tmp_path / "kube-cache")
    try:
        await registering.register(pipeline.client, manifests)
        await _until_registered(kubectl, pipeline.namespace)
        yield Admission(server, manifests, kubectl, pipeline.namespace)
    finally:
        await registering.unregister(pipeline.client, manifests)
        await server.stop()


async def _until_registered(kubectl: Kubectl, namespace: str) -> None:
    """kube-apiserver takes up a new webhook configuration within a second or so (an informer)."""
    probe = yaml.safe_dump(pytorch("probe", master=2))
    for _ in range(100):
        out = await kubectl("-n", namespace, "create", "--dry-run=server", "-f", "-", input=probe, check=False)
        if "denied the request" in out.stderr:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the webhook never answered: {out.stderr}{out.stdout}")


def _with(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    document = copy.deepcopy(document)
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return document


# The invalid cases of spec §13 that apply at admission: (document, what kubectl must print).
CASES = [
    ("9 name", pytorch("0-test"), denied_by("PyTorchJob", f'metadata.name: Invalid value: "0-test": {DNS_DETAIL}')),
    ("10 no containers", _with(pytorch("c10"), "spec.pytorchReplicaSpecs.Worker.template.spec.containers", []),
     denied_by("PyTorchJob", "[spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must be "
                             "specified, spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: "
                             "must have at least one container with name pytorch]")),
    ("11 empty image", _with(pytorch("c11a"), "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
                             [container("pytorch", "")]),
     denied_by("PyTorchJob", "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image: Required value: "
                             "must be required")),
    ("11 unnamed container", _with(pytorch("c11b"), "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
                                   [container("")]),
     denied_by("PyTorchJob", "spec.pytorchReplicaSpecs[Worker].template.spec.containers: Required value: must have "
                             "at least one container with name pytorch")),
    ("12 two masters", pytorch("c12", master=2),
     denied_by("PyTorchJob", "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1")),
    ("13 both nproc fields", pytorch("c13", elasticPolicy={"nProcPerNode": 1}, nprocPerNode="1"),
     denied_by("PyTorchJob", "spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode")),
    ("14 elastic without worker", pytorch("c14a", workers=None, elasticPolicy={}),
     denied_by("PyTorchJob", "spec.pytorchReplicaSpecs[Worker]: Required value: must be configured if elastic "
                             "policy is used")),
    ("14 zero workers", pytorch("c14b", workers=0, elasticPolicy={}),
     denied_by("PyTorchJob", "spec.pytorchReplicaSpecs[Worker].replicas: Forbidden: must be at least 1")),
    *((f"15 managedBy {kind}", _with(document, "spec.runPolicy", {"managedBy": "other-job-controller"}),
       denied_by(kind, 'spec.runPolicy.managedBy: Unsupported value: "other-job-controller": supported values: '
                       '"kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"'))
      for kind, document in (
          ("PyTorchJob", pytorch("c15a")),
          ("TFJob", job("TFJob", "c15b", {"Worker": replica(container("tensorflow"))})),
          ("XGBoostJob", job("XGBoostJob", "c15c", {"Master": replica(container("xgboost"), replicas=1)})),
          ("PaddleJob", job("PaddleJob", "c15d", {"Worker": replica(container("paddle"))})),
      )),
    ("16 chief and master", job("TFJob", "c16a", {"Chief": replica(container("tensorflow")),
                                                  "Master": replica(container("tensorflow"))}),
     denied_by("TFJob", "spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role")),
    ("16 no tensorflow container", job("TFJob", "c16b", {"Worker": replica(container("tf"))}),
     denied_by("TFJob", "spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: must have at least "
                        "one container with name tensorflow")),
    ("17 no master", job("XGBoostJob", "c17a", {"Worker": replica(container("xgboost"))}),
     denied_by("XGBoostJob", "spec.xgbReplicaSpecs[Master]: Required value: must be present")),
    ("17 two masters", job("XGBoostJob", "c17b", {"Master": replica(container("xgboost"), replicas=2)}),
     denied_by("XGBoostJob", "spec.xgbReplicaSpecs[Master].replicas: Forbidden: must be 1")),
    # The replica map is required by the CRD's schema too, which the API server checks before the
    # validating webhooks: its own words, the same field path.
    ("18 paddle no map", job("PaddleJob", "c18a", None),
     'The PaddleJob "c18a" is invalid: \n* spec.paddleReplicaSpecs: Required value'),
    ("18 jax no map", job("JAXJob", "c18b", None), 'The JAXJob "c18b" is invalid: \n* spec.jaxReplicaSpecs: Required value'),
    # An empty map is the nil map's mistake (upstream lets it through, and the job waits for ever).
    *((f"empty map {kind}", job(kind, f"empty-{kind.lower()}", {}),
       denied_by(kind, f"spec.{field}: Required value: must be required"))
      for kind, field in (("PyTorchJob", "pytorchReplicaSpecs"), ("TFJob", "tfReplicaSpecs"),
                          ("XGBoostJob", "xgbReplicaSpecs"), ("PaddleJob", "paddleReplicaSpecs"),
                          ("JAXJob", "jaxReplicaSpecs"))),
    ("18 no paddle container", job("PaddleJob", "c18c", {"Worker": replica(container("pd"))}),
     denied_by("PaddleJob", 'spec.paddleReplicaSpecs[Worker].template.spec.containers: Required value: must have at '
                            'least one container with name "paddle"')),
    ("18 no jax container", job("JAXJob", "c18d", {"Worker": replica(container("j"))}),
     denied_by("JAXJob", "spec.jaxReplicaSpecs[Worker].template.spec.containers: Required value: must have at least "
                         "one container with name jax")),
    ("20 unknown managedBy", pytorch("c20", runPolicy={"managedBy": "kueue.x-k8s.io/other-controller"}),
     denied_by("PyTorchJob", 'spec.runPolicy.managedBy: Unsupported value: "kueue.x-k8s.io/other-controller": '
                             'supported values: "kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"')),
    ("mpi-operator's rules", job("MPIJob", "v2", {"Launcher": replica(container("l")), "Worker": replica(container("w"))},
                                 api_version="kubeflow.org/v2beta1"),
     'admission webhook "validator.mpijob-v2beta1.kto.dev" denied the request: spec.mpiReplicaSpecs[Worker].replicas: '
     "Invalid value: 0: must be greater than or equal to 1"),
    ("kto's TrainingJob rules",
     _with(yaml.safe_load((ROOT / "examples" / "et-operator" / "training_job.yaml").read_text()),
           "spec.etReplicaSpecs.worker.minReplicas", 10),
     'admission webhook "validator.trainingjob.kto.dev" denied the request: spec.etReplicaSpecs.worker.minReplicas: '
     "Invalid value: 10: must not be greater than maxReplicas"),
    ("kto's scaler rules", {"apiVersion": "kai.alibabacloud.com/v1alpha1", "kind": "ScaleIn",
                            "metadata": {"name": "nameless"}, "spec": {"toDelete": {"count": 1}}},
     'admission webhook "validator.scalein.kto.dev" denied the request: spec.selector.name: Required value: '
     "the TrainingJob to scale"),
]


async def test_every_invalid_case_is_refused_at_apply_time_with_its_field_path(
    pipeline: Pipeline, admission: Admission,
) -> None:
    wrong = []
    for case, document, expected in CASES:
        out = await admission.apply(document)
        if out.returncode == 0 or expected not in out.stderr:
            wrong.append(f"{case}: exit {out.returncode}\n  expected: {expected}\n  got: {out.stderr}{out.stdout}")
    assert not wrong, "\n".join(wrong)
    for kind in ("pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs", "mpijobs"):
        left, _ = await pipeline.client.list(resources.ResourceType("kubeflow.org", "v1", kind, ""), pipeline.namespace)
        assert left == [], f"{kind} stored although refused: {[j['metadata']['name'] for j in left]}"


async def test_the_deprecated_nproc_field_is_applied_with_upstreams_warning(admission: Admission) -> None:
    out = await admission.apply(pytorch("c13", elasticPolicy={"nProcPerNode": 1}))
    assert out.returncode == 0, out.stderr
    assert "Warning: spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead" in out.stderr


async def test_immutable_fields_cannot_be_changed_by_apply(admission: Admission) -> None:
    """Cases 15 (managedBy, by the webhook) and 19 (the queue: the CRD's CEL rule on the real API server,
    the webhook on the sim, which has no CEL)."""
    managed = pytorch("managed", runPolicy={"managedBy": "kubeflow.org/training-operator"})
    queued = pytorch("queued", runPolicy={"schedulingPolicy": {"queue": "initial-queue"}})
    for document in (managed, queued):
        created = await admission.apply(document)
        assert created.returncode == 0, created.stderr
    out = await admission.apply(_with(managed, "spec.runPolicy", {"managedBy": "kueue.x-k8s.io/multikueue"}))
    assert out.returncode != 0
    assert denied_by("PyTorchJob", 'spec.runPolicy.managedBy: Invalid value: "kueue.x-k8s.io/multikueue": field is '
                                   "immutable") in out.stderr
    out = await admission.apply(_with(queued, "spec.runPolicy", {"schedulingPolicy": {"queue": "test"}}))
    assert out.returncode != 0
    assert "spec.runPolicy.schedulingPolicy.queue: Invalid value: " in out.stderr
    assert "spec.runPolicy.schedulingPolicy.queue is immutable" in out.stderr
    stored = await admission.stored("PyTorchJob", "queued")
    assert stored["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "initial-queue"


async def test_only_known_managers_are_accepted_and_multikueue_is_left_alone(
    pipeline: Pipeline, admission: Admission,
) -> None:
    """Case 20."""
    for name, manager in (("ours", "kubeflow.org/training-operator"), ("kueue", "kueue.x-k8s.io/multikueue")):
        out = await admission.apply(pytorch(name, runPolicy={"managedBy": manager}))
        assert out.returncode == 0, out.stderr
    refused = await admission.apply(pytorch("other", runPolicy={"managedBy": "kueue.x-k8s.io/other-controller"}))
    assert refused.returncode != 0
    listed = await admission.kubectl("-n", admission.namespace, "get", "pytorchjobs", "-o", "name")
    assert sorted(listed.stdout.split()) == ["pytorchjob.kubeflow.org/kueue", "pytorchjob.kubeflow.org/ours"]
    await pipeline.wait_for("PyTorchJob", "ours", "Created")
    assert not ((await pipeline.job("PyTorchJob", "kueue")).get("status") or {}).get("conditions")


async def test_a_valid_upstream_example_is_accepted_and_stored_with_its_defaults(
    pipeline: Pipeline, admission: Admission,
) -> None:
    example = yaml.safe_load((ROOT / "examples" / "kubeflow" / "pytorch" / "simple.yaml").read_text())
    example["metadata"].pop("namespace")
    del example["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"]
    out = await admission.apply(example)
    assert (out.returncode, out.stdout.strip()) == (0, "pytorchjob.kubeflow.org/pytorch-simple created"), out.stderr
    stored = await admission.stored("PyTorchJob", "pytorch-simple")
    spec = stored["spec"]
    assert spec["runPolicy"]["cleanPodPolicy"] == "None"
    assert spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure"
    # Left to reconcile time: the port (inside a list) and nprocPerNode (derived).
    assert "ports" not in spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert "nprocPerNode" not in spec
    await pipeline.wait_for("PyTorchJob", "pytorch-simple", "Succeeded", timeout=60)
    # Applied again unchanged: nothing to do.
    again = await admission.apply(example)
    assert again.stdout.strip() == "pytorchjob.kubeflow.org/pytorch-simple unchanged", again.stderr


@pytest.mark.parametrize(("replicas", "message"), [
    pytest.param({"Launcher": replica(container("l"), replicas=2)},
                 "spec.mpiReplicaSpecs[Launcher].replicas: Forbidden: MPIReplicaSpec is not valid: There must be only "
                 "1 launcher replica", id="two-launchers"),
    pytest.param({}, "spec.mpiReplicaSpecs: Required value: MPIReplicaSpecs is not valid", id="empty-map"),
])
async def test_an_mpijob_v1_has_no_webhook_and_fails_in_the_controller_as_upstream(
    pipeline: Pipeline, admission: Admission, replicas: dict[str, Any], message: str,
) -> None:
    out = await admission.apply(job("MPIJob", "legacy", replicas))
    assert out.returncode == 0, out.stderr
    failed = await pipeline.wait_for("MPIJob", "legacy", "Failed")
    condition = failed["status"]["conditions"][-1]
    assert condition["reason"] == "MPIJobFailedValidation" and message in condition["message"], condition


async def test_a_webhook_that_is_down_refuses_ktos_kinds_only(admission: Admission) -> None:
    await admission.server.stop()
    for document in (pytorch("while-down"), pytorch("invalid-while-down", master=2)):
        out = await admission.apply(document)
        assert out.returncode != 0
        assert ('Error from server (InternalError): error when creating "STDIN": Internal error occurred: failed '
                'calling webhook "defaulter.pytorchjob.kto.dev": failed to call webhook: Post '
                f'"{admission.server.url}/mutate-kubeflow-org-v1-pytorchjob?timeout=10s": ') in out.stderr, out.stderr
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "still-fine"}, "data": {"a": "b"}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "still-fine"},
           "spec": {"containers": [container("main")]}}
    for document, created in ((configmap, "configmap/still-fine created"), (pod, "pod/still-fine created")):
        out = await admission.apply(document)
        assert (out.returncode, out.stdout.strip()) == (0, created), out.stderr


@pytest.mark.parametrize("control_plane", [pytest.param("sim", id="sim-tansu"), pytest.param("kube", id="kube-tansu")])
async def test_kto_up_registers_its_webhooks_on_every_cluster(control_plane: str, tmp_path: pathlib.Path) -> None:
    """The stack of `kto up` (two webhook processes sharing one port) on each control plane: an invalid
    job is refused at apply time in any namespace but kube-system, and one webhook process killed
    leaves the other serving."""
    if control_plane == "kube":
        tiers.require_real_tier()
    settings = stack.StackSettings(state_dir=tmp_path / "state", clusters=1, partitions=2, webhooks=2,
                                   control_plane=control_plane)
    async with stack.Stack(settings) as running:
        kubectl = Kubectl(running.kubeconfig, tmp_path / "kube-cache")
        invalid = yaml.safe_dump(pytorch("two-masters", master=2))
        refused = await kubectl("apply", "-f", "-", input=invalid, check=False)
        assert denied_by("PyTorchJob", "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1") in \
            refused.stderr, refused.stderr
        # The TrainJob webhook reads the runtime from the cluster that called it (/clusters/<context>/...).
        no_runtime = yaml.safe_dump({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                     "metadata": {"name": "no-runtime"}, "spec": {"runtimeRef": {"name": "nope"}}})
        refused = await kubectl("apply", "-f", "-", input=no_runtime, check=False)
        assert 'clustertrainingruntimes.trainer.kubeflow.org "nope" not found: specified clusterTrainingRuntime must ' \
               "be created before the TrainJob is created" in refused.stderr, refused.stderr
        listed = await kubectl("get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name")
        assert listed.stdout.split() == [
            "validatingwebhookconfiguration.admissionregistration.k8s.io/kto-validating-webhook-configuration",
            "mutatingwebhookconfiguration.admissionregistration.k8s.io/kto-mutating-webhook-configuration"]
        exempt = await kubectl("-n", "kube-system", "apply", "-f", "-", input=invalid, check=False)
        assert exempt.returncode == 0, exempt.stderr
        running.kill("webhook-1")
        for _ in range(10):  # a connection the API server kept to the killed process may fail once
            again = await kubectl("apply", "-f", "-", input=invalid, check=False)
            if "denied the request" in again.stderr:
                break
            await asyncio.sleep(0.5)
        assert "denied the request" in again.stderr, again.stderr
