"""The real kubectl against kto's kinds on both tiers (issue 13, item 3).

`kubectl explain` prints every kind's fields with the descriptions written in shared/api's
models (the sim builds its OpenAPI documents from the CRDs as kube-apiserver does, and they are
held against kube-apiserver's own); `kubectl get` shows upstream's printer columns; the kinds
resolve by plural and singular only, as upstream defines no short names or categories; and
`kubectl wait`, `logs` and `scale` work on a running job.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pydantic
import pytest
import yaml

from shared.api import common, elastic, jobs, mpijobs
from sim import cluster as sim_cluster_module
from sim import settings as sim_settings_module
from tests.fixtures import tiers
from tests.fixtures.pipeline import Pipeline
from tests.fixtures.sim import Kubectl
from tests.pipeline.test_pipeline import job
from tests.pipeline.test_run_policy import annotate

CRDS = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "crds"
CUSTOM_GROUP_VERSIONS = ["apis/kubeflow.org/v1", "apis/kubeflow.org/v2beta1", "apis/kai.alibabacloud.com/v1alpha1",
                         "apis/trainer.kubeflow.org/v1alpha1"]


def flat(text: str) -> str:
    """Text with every run of white space one space: explain wraps and indents descriptions."""
    return " ".join(text.split())


def doc(model: type[pydantic.BaseModel], field: str | None = None) -> str:
    """A field's description (or the class docstring) as the CRDs carry it."""
    text = model.__dict__["__doc__"] if field is None else model.model_fields[field].description
    assert text
    return flat(text)


@contextlib.asynccontextmanager
async def sim_with_crds(directory: pathlib.Path) -> AsyncIterator[Kubectl]:
    settings = sim_settings_module.SimSettings(kubeconfig=directory / "kubeconfig", bookmark_interval=0.2)
    async with sim_cluster_module.Cluster(settings) as cluster:
        assert cluster.kubeconfig is not None
        kubectl = Kubectl(cluster.kubeconfig, directory / "kube-cache")
        await kubectl("apply", "-f", str(CRDS))
        await kubectl("wait", "--for", "condition=established", "--timeout=20s", "crd", "--all")
        yield kubectl


@pytest.fixture
async def tier_kubectl(real_or_sim: tiers.RealCluster | None, tmp_path: pathlib.Path) -> AsyncIterator[Kubectl]:
    """kubectl against the session's real cluster (started with deploy/crds), or against a fresh sim
    with deploy/crds applied."""
    if real_or_sim is not None:
        yield Kubectl(real_or_sim.kubeconfig, tmp_path / "kube-cache")
        return
    async with sim_with_crds(tmp_path) as kubectl:
        yield kubectl


@pytest.fixture
async def namespace(tier_kubectl: Kubectl) -> AsyncIterator[str]:
    """A namespace of the test's own (the real cluster is shared by the session), deleted after it."""
    name = f"kp-{uuid.uuid4().hex[:10]}"
    await tier_kubectl("create", "namespace", name)
    yield name
    await tier_kubectl("delete", "namespace", name, "--wait=false")


# ---------------------------------------------------------------------------
# kubectl explain
# ---------------------------------------------------------------------------

EXPLAIN = [
    pytest.param(["pytorchjob"], "PyTorchJob v1", {"apiVersion", "kind", "metadata", "spec", "status"},
                 [doc(jobs.PyTorchJob), doc(jobs.Job, "status")], id="pytorchjob"),
    pytest.param(["pytorchjob.spec"], "PyTorchJob v1",
                 {"elasticPolicy", "nprocPerNode", "pytorchReplicaSpecs", "runPolicy"},
                 [doc(jobs.PyTorchJob, "spec"), doc(jobs.PyTorchJobSpec, "nproc_per_node"),
                  "pytorchReplicaSpecs <map[string]Object> -required-"], id="pytorchjob.spec"),
    pytest.param(["pytorchjob.spec.pytorchReplicaSpecs"], "PyTorchJob v1", {"replicas", "restartPolicy", "template"},
                 [doc(jobs.PyTorchJobSpec, "pytorch_replica_specs"), doc(common.ReplicaSpec),
                  doc(common.ReplicaSpec, "restart_policy"), "enum: Always, OnFailure, Never, ExitCode"],
                 id="pytorchjob.spec.pytorchReplicaSpecs"),
    pytest.param(["pytorchjob.spec.elasticPolicy"], "PyTorchJob v1",
                 {"minReplicas", "maxReplicas", "rdzvBackend", "rdzvConf", "metrics", "nProcPerNode"},
                 [doc(jobs.ElasticPolicy, "n_proc_per_node")], id="pytorchjob.spec.elasticPolicy"),
    pytest.param(["pytorchjob.spec.runPolicy.schedulingPolicy"], "PyTorchJob v1",
                 {"minAvailable", "queue", "minResources", "priorityClass", "scheduleTimeoutSeconds"},
                 [doc(common.SchedulingPolicy, "queue")], id="pytorchjob.spec.runPolicy.schedulingPolicy"),
    pytest.param(["pytorchjob.status.conditions"], "PyTorchJob v1",
                 {"type", "status", "reason", "message", "lastUpdateTime", "lastTransitionTime"},
                 [doc(common.JobStatus, "conditions"), doc(common.JobCondition, "type")],
                 id="pytorchjob.status.conditions"),
    pytest.param(["pytorchjob.metadata"], "PyTorchJob v1", {"name", "namespace", "labels", "ownerReferences"},
                 ["Standard object's metadata.", "ObjectMeta is metadata that all persisted resources must have"],
                 id="pytorchjob.metadata-is-kubernetes-ObjectMeta"),
    pytest.param(["tfjob.spec"], "TFJob v1", {"tfReplicaSpecs", "successPolicy", "enableDynamicWorker", "runPolicy"},
                 [doc(jobs.TFJobSpec, "success_policy")], id="tfjob.spec"),
    pytest.param(["xgboostjob.spec"], "XGBoostJob v1", {"xgbReplicaSpecs", "runPolicy"},
                 [doc(jobs.XGBoostJobSpec, "xgb_replica_specs")], id="xgboostjob.spec"),
    pytest.param(["paddlejob.spec.elasticPolicy"], "PaddleJob v1",
                 {"minReplicas", "maxReplicas", "maxRestarts", "metrics"},
                 [doc(jobs.PaddleJobSpec, "elastic_policy")], id="paddlejob.spec.elasticPolicy"),
    pytest.param(["jaxjob.spec"], "JAXJob v1", {"jaxReplicaSpecs", "runPolicy"},
                 [doc(jobs.JAXJobSpec, "jax_replica_specs")], id="jaxjob.spec"),
    pytest.param(["mpijob.spec"], "MPIJob v1", {"mpiReplicaSpecs", "slotsPerWorker", "cleanPodPolicy", "mainContainer"},
                 [doc(jobs.MPIJobSpec, "main_container")], id="mpijob.spec-in-v1"),
    pytest.param(["mpijob.spec", "--api-version=kubeflow.org/v2beta1"], "MPIJob v2beta1",
                 {"mpiImplementation", "launcherCreationPolicy", "sshAuthMountPath", "runLauncherAsWorker"},
                 [doc(mpijobs.MPIJobSpec, "mpi_implementation"), "enum: OpenMPI, Intel, MPICH"],
                 id="mpijob.spec-in-v2beta1"),
    pytest.param(["mpijob.spec.runPolicy", "--api-version=kubeflow.org/v2beta1"], "MPIJob v2beta1",
                 {"backoffLimit", "suspend", "managedBy"},
                 [doc(mpijobs.RunPolicy, "backoff_limit"), doc(common.RunPolicy, "suspend")],
                 id="mpijob.spec.runPolicy-in-v2beta1"),
    pytest.param(["trainingjob.spec"], "TrainingJob v1alpha1",
                 {"etReplicaSpecs", "launcherAttachMode", "slotsPerWorker", "restartPolicy", "backoffLimit"},
                 [doc(elastic.TrainingJobSpec, "launcher_attach_mode"), "enum: Never, OnFailure"],
                 id="trainingjob.spec"),
    pytest.param(["trainingjob.spec.etReplicaSpecs.worker"], "TrainingJob v1alpha1",
                 {"replicas", "minReplicas", "maxReplicas", "template", "restartPolicy"},
                 [doc(elastic.ETReplicaSpecs, "worker"), doc(elastic.ETWorkerSpec, "min_replicas")],
                 id="trainingjob.spec.etReplicaSpecs.worker"),
    pytest.param(["scalein.spec"], "ScaleIn v1alpha1", {"selector", "toDelete", "script", "timeout", "env"},
                 [doc(elastic.ScaleInSpec, "to_delete")], id="scalein.spec"),
    pytest.param(["scaleout.spec.toAdd"], "ScaleOut v1alpha1", {"count"},
                 [doc(elastic.ToAddSpec, "count")], id="scaleout.spec.toAdd"),
]


def fields_of(output: str) -> set[str]:
    """The field names explain lists under FIELDS (two spaces in, then a tab and the type)."""
    section = output.split("FIELDS:", 1)[1] if "FIELDS:" in output else ""
    return {line.split("\t")[0].strip() for line in section.splitlines() if line.startswith("  ") and "\t" in line}


@pytest.mark.parametrize(("args", "kind_version", "fields", "texts"), EXPLAIN)
async def test_kubectl_explain_shows_the_fields_and_their_descriptions(
    tier_kubectl: Kubectl, args: list[str], kind_version: str, fields: set[str], texts: list[str],
) -> None:
    output = (await tier_kubectl("explain", *args)).stdout
    kind, version = kind_version.split()
    assert f"KIND:       {kind}" in output and f"VERSION:    {version}" in output, output
    assert fields <= fields_of(output), output
    assert "<no description>" not in output, output
    for text in texts:
        assert flat(text) in flat(output), (text, output)


async def test_recursive_explain_reaches_every_level(tier_kubectl: Kubectl) -> None:
    output = (await tier_kubectl("explain", "trainingjob", "--recursive")).stdout
    for field in ("etReplicaSpecs", "launcher", "minReplicas", "currentWorkers", "restartCount", "lastTransitionTime"):
        assert f"{field}\t" in output, field


async def test_an_unknown_field_is_refused_by_name(tier_kubectl: Kubectl) -> None:
    result = await tier_kubectl("explain", "pytorchjob.spec.noSuchField", check=False)
    assert result.returncode != 0
    assert 'field "noSuchField" does not exist' in result.stderr


# ---------------------------------------------------------------------------
# kubectl get: printer columns, names
# ---------------------------------------------------------------------------

def minimal(kind: str, api_version: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump({"apiVersion": api_version, "kind": kind, "metadata": {"name": "columns"}, "spec": spec})


TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
PYTORCHJOB = minimal("PyTorchJob", "kubeflow.org/v1", {"pytorchReplicaSpecs": {"Worker": {"replicas": 1,
                                                                                        "template": TEMPLATE}}})
COLUMNS = [
    pytest.param("pytorchjobs", PYTORCHJOB, ["NAME", "STATE", "AGE"], id="pytorchjobs"),
    pytest.param("tfjobs", minimal("TFJob", "kubeflow.org/v1", {"tfReplicaSpecs": {
        "Worker": {"replicas": 1, "template": TEMPLATE}}}), ["NAME", "STATE", "AGE"], id="tfjobs"),
    pytest.param("mpijobs", minimal("MPIJob", "kubeflow.org/v1", {"mpiReplicaSpecs": {
        "Launcher": {"replicas": 1, "template": TEMPLATE}}}), ["NAME", "AGE", "STATE"], id="mpijobs-age-first"),
    pytest.param("mpijobs.v2beta1.kubeflow.org", minimal("MPIJob", "kubeflow.org/v2beta1", {"mpiReplicaSpecs": {
        "Launcher": {"replicas": 1, "template": TEMPLATE}}}), ["NAME", "AGE"], id="mpijobs-v2beta1-has-no-columns"),
    pytest.param("trainingjobs", minimal("TrainingJob", "kai.alibabacloud.com/v1alpha1", {"etReplicaSpecs": {
        "launcher": {"replicas": 1, "template": TEMPLATE}, "worker": {"replicas": 1, "template": TEMPLATE}}}),
        ["NAME", "PHASE", "AGE"], id="trainingjobs"),
    pytest.param("scaleouts", minimal("ScaleOut", "kai.alibabacloud.com/v1alpha1", {"toAdd": {"count": 1}}),
                 ["NAME", "PHASE", "AGE"], id="scaleouts"),
]


@pytest.mark.parametrize(("resource", "manifest", "header"), COLUMNS)
async def test_kubectl_get_shows_upstreams_printer_columns(
    tier_kubectl: Kubectl, namespace: str, resource: str, manifest: str, header: list[str],
) -> None:
    await tier_kubectl("-n", namespace, "apply", "-f", "-", input=manifest)
    lines = (await tier_kubectl("-n", namespace, "get", resource)).stdout.splitlines()
    assert lines[0].split() == header
    assert lines[1].split()[0] == "columns"


@pytest.mark.parametrize(
    ("group", "plurals"),
    [
        pytest.param(jobs.GROUP, {cls.PLURAL: cls.KIND for cls in jobs.KINDS.values()}, id="kubeflow.org"),
        pytest.param(elastic.GROUP, {cls.PLURAL: cls.KIND for cls in elastic.KINDS.values()}, id="kai.alibabacloud.com"),
    ],
)
async def test_the_kinds_have_no_short_names_or_categories_as_upstream(
    tier_kubectl: Kubectl, group: str, plurals: dict[str, str],
) -> None:
    rows = (await tier_kubectl("api-resources", f"--api-group={group}", "-o", "wide", "--no-headers")).stdout
    found = {}
    for line in rows.splitlines():
        name, api_version, namespaced, kind, verbs = line.split(None, 4)  # a short name would make six columns
        found[name] = kind
        assert (api_version.split("/")[0], namespaced) == (group, "true")
        assert verbs.strip() == "delete,deletecollection,get,list,patch,create,update,watch", line
    assert found == plurals


async def test_the_singular_and_the_plural_resolve(tier_kubectl: Kubectl, namespace: str) -> None:
    await tier_kubectl("-n", namespace, "apply", "-f", "-", input=PYTORCHJOB)
    for name in ("pytorchjob/columns", "pytorchjobs/columns", "pytorchjobs.kubeflow.org/columns",
                 "pytorchjob.v1.kubeflow.org/columns"):
        assert (await tier_kubectl("-n", namespace, "get", name, "-o", "name")).stdout.strip() == (
            "pytorchjob.kubeflow.org/columns")
    unknown = await tier_kubectl("-n", namespace, "get", "ptj", check=False)
    assert "the server doesn't have a resource type \"ptj\"" in unknown.stderr


# ---------------------------------------------------------------------------
# kubectl wait, logs, scale on a running job (the whole pipeline)
# ---------------------------------------------------------------------------

async def test_wait_scale_and_logs_on_a_pytorchjob(pipeline: Pipeline, tmp_path: pathlib.Path) -> None:
    kubectl = Kubectl(pipeline.kubeconfig, tmp_path / "kube-cache")
    ns = ("-n", pipeline.namespace)
    manifest = job("PyTorchJob", "kp", {"Master": (1, "OnFailure"), "Worker": (1, "OnFailure")}, "pytorch")
    manifest["metadata"]["namespace"] = pipeline.namespace
    annotate(manifest, "Master", duration="8s")
    await kubectl(*ns, "apply", "-f", "-", input=yaml.safe_dump(manifest))

    await kubectl(*ns, "wait", "--for=condition=Running", "--timeout=60s", "pytorchjob/kp", timeout=90)
    scaled = await kubectl(*ns, "scale", "pytorchjob/kp", "--replicas=3")
    assert scaled.stdout.strip() == "pytorchjob.kubeflow.org/kp scaled"
    scale = json.loads((await kubectl(*ns, "get", "pytorchjob", "kp", "--subresource=scale", "-o", "json")).stdout)
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 3)
    await kubectl(*ns, "wait", "--for=create", "--timeout=60s", "pod/kp-worker-2", timeout=90)

    waited = await kubectl(*ns, "wait", "--for=condition=Succeeded", "--timeout=90s", "pytorchjob/kp", timeout=120)
    assert waited.stdout.strip() == "pytorchjob.kubeflow.org/kp condition met"
    row = (await kubectl(*ns, "get", "pytorchjob", "kp", "--no-headers")).stdout.split()
    assert row[:2] == ["kp", "Succeeded"]

    for pod in ("kp-master-0", "kp-worker-2"):
        await kubectl(*ns, "wait", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s", f"pod/{pod}",
                      timeout=90)
        logs = (await kubectl(*ns, "logs", pod)).stdout
        raw = (await kubectl("get", "--raw", f"/api/v1/namespaces/{pipeline.namespace}/pods/{pod}/log")).stdout
        assert logs and logs == raw, (pod, logs, raw)
        assert (await kubectl(*ns, "logs", pod, "-c", "pytorch")).stdout == logs


# ---------------------------------------------------------------------------
# The sim's OpenAPI documents
# ---------------------------------------------------------------------------

async def test_the_sims_openapi_documents_are_kube_apiservers(
    real_cluster: tiers.RealCluster, tmp_path: pathlib.Path,
) -> None:
    """Built from the same CRDs, the sim serves the very documents kube-apiserver serves (paths,
    operations, the kinds' schemas and the meta/v1 types of sim/openapi_meta.json), so explain
    prints the same on both."""
    real = Kubectl(real_cluster.kubeconfig, tmp_path / "real-cache")
    (tmp_path / "sim").mkdir()
    async with sim_with_crds(tmp_path / "sim") as sim:
        for path in CUSTOM_GROUP_VERSIONS:
            sim_doc, real_doc = [json.loads((await k("get", "--raw", f"/openapi/v3/{path}")).stdout) for k in (sim, real)]
            assert sim_doc == real_doc, path
        for args in (["pytorchjob.spec.runPolicy"], ["mpijob", "--api-version=kubeflow.org/v2beta1", "--recursive"],
                     ["scaleout.status"]):
            assert (await sim("explain", *args)).stdout == (await real("explain", *args)).stdout, args


async def get(session: aiohttp.ClientSession, url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    async with session.get(url, headers=headers, allow_redirects=False) as response:
        return response.status, dict(response.headers), await response.read()


async def test_documents_are_addressed_by_their_hash_and_cached_as_kube_apiserver_does(
    sim_cluster: sim_cluster_module.Cluster, kubectl: Kubectl,
) -> None:
    await kubectl("apply", "-f", str(CRDS))
    async with aiohttp.ClientSession() as session:
        code, headers, body = await get(session, f"{sim_cluster.url}/openapi/v3")
        assert (code, headers["Content-Type"], headers["Cache-Control"]) == (
            200, "text/plain; charset=utf-8", "no-cache, private")
        url = json.loads(body)["paths"]["apis/kubeflow.org/v1"]["serverRelativeURL"]
        etag = url.split("hash=")[1]

        code, headers, body = await get(session, sim_cluster.url + url, Accept="application/json")
        assert code == 200 and hashlib.sha512(body).hexdigest().upper() == etag
        assert (headers["Content-Type"], headers["Etag"], headers["Cache-Control"], headers["Vary"]) == (
            "application/json", f'"{etag}"', "public, immutable", "Accept")
        assert "Expires" in headers and "Last-Modified" in headers

        code, headers, _ = await get(session, f"{sim_cluster.url}/openapi/v3/apis/kubeflow.org/v1?hash=00")
        assert (code, headers["Location"]) == (301, url)
        code, _, _ = await get(session, sim_cluster.url + url, **{"If-None-Match": f'"{etag}"'})
        assert code == 304
        code, _, _ = await get(session, sim_cluster.url + url,
                               Accept="application/com.github.proto-openapi.spec.v3@v1.0+protobuf")
        assert code == 406
        code, _, _ = await get(session, f"{sim_cluster.url}/openapi/v3/apis/nothing.example.com/v1")
        assert code == 404


async def test_explain_follows_a_changed_crd_despite_kubectls_cache(sim_cluster: sim_cluster_module.Cluster,
                                                                    kubectl: Kubectl) -> None:
    await kubectl("apply", "-f", str(CRDS))
    await kubectl("wait", "--for", "condition=established", "--timeout=20s", "crd", "--all")
    assert flat(doc(jobs.JAXJob, "spec")) in flat((await kubectl("explain", "jaxjob.spec")).stdout)
    patch = [{"op": "replace", "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/description",
              "value": "Changed while kubectl had the old document cached."}]
    await kubectl("patch", "crd", "jaxjobs.kubeflow.org", "--type=json", "-p", json.dumps(patch))
    for _ in range(50):
        if "Changed while kubectl" in (await kubectl("explain", "jaxjob.spec")).stdout:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("kubectl explain kept the old description")
