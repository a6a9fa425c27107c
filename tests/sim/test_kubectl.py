"""The real kubectl works against the local cluster: CRDs, apply, get, describe, wait, logs, delete."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest

from sim import cluster as sim_cluster
from tests.fixtures import sim as sim_fixtures

DATA = pathlib.Path(__file__).parent / "data"
CRDS = pathlib.Path(__file__).parents[2] / "deploy" / "crds"


async def install_crds(kubectl: sim_fixtures.Kubectl) -> None:
    await kubectl("apply", "-f", str(CRDS))
    await kubectl("wait", "--for", "condition=established", "--timeout=10s", "crd", "--all")


async def test_kubectl_sees_nodes_and_namespaces(kubectl: sim_fixtures.Kubectl) -> None:
    nodes = (await kubectl("get", "nodes")).stdout.splitlines()
    assert nodes[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [line.split()[0] for line in nodes[1:]] == [f"sim-node-{i}" for i in range(4)]
    namespaces = (await kubectl("get", "namespaces", "-o", "name")).stdout.split()
    assert {"namespace/default", "namespace/kube-system"} <= set(namespaces)


async def test_discovery_lists_builtin_and_registered_kinds(kubectl: sim_fixtures.Kubectl) -> None:
    before = (await kubectl("api-resources", "-o", "name")).stdout.split()
    for name in ("pods", "leases.coordination.k8s.io", "podgroups.scheduling.volcano.sh",
                 "podgroups.scheduling.x-k8s.io", "jobs.batch", "horizontalpodautoscalers.autoscaling",
                 "customresourcedefinitions.apiextensions.k8s.io", "roles.rbac.authorization.k8s.io"):
        assert name in before
    await install_crds(kubectl)
    after = (await kubectl("api-resources", "--api-group=kubeflow.org", "-o", "name")).stdout.split()
    assert sorted(after) == sorted(p.name.split("_")[1].removesuffix(".yaml") + ".kubeflow.org"
                                   for p in CRDS.glob("kubeflow.org_*.yaml"))
    versions = (await kubectl("api-versions")).stdout.split()
    assert "kubeflow.org/v1" in versions and "v1" in versions


@pytest.mark.parametrize(
    ("file", "kind", "name"),
    [
        pytest.param("pytorchjob.yaml", "pytorchjobs", "pytorch-simple", id="PyTorchJob"),
        pytest.param("tfjob.yaml", "tfjobs", "tfjob-simple", id="TFJob"),
    ],
)
async def test_apply_get_describe_delete_a_training_job(
    kubectl: sim_fixtures.Kubectl, sim_cluster: sim_cluster.Cluster, file: str, kind: str, name: str
) -> None:
    await install_crds(kubectl)
    created = await kubectl("apply", "-f", str(DATA / file))
    assert f"{name} created" in created.stdout
    unchanged = await kubectl("apply", "-f", str(DATA / file))
    assert f"{name} unchanged" in unchanged.stdout
    table = (await kubectl("get", kind)).stdout.splitlines()
    assert table[0].split() == ["NAME", "STATE", "AGE"] and table[1].split()[0] == name
    await sim_cluster.store.patch(f"{kind}.kubeflow.org", "default", name, {"status": {"conditions": [
        {"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}}, "merge", "status")
    assert (await kubectl("get", kind, name)).stdout.splitlines()[1].split()[:2] == [name, "Running"]
    described = (await kubectl("describe", kind, name)).stdout
    assert f"Name:         {name}" in described and "Running" in described
    text = (DATA / file).read_text().replace("replicas: 1", "replicas: 3").replace("replicas: 2", "replicas: 3")
    configured = await kubectl("apply", "-f", "-", input=text)
    assert f"{name} configured" in configured.stdout
    obj = json.loads((await kubectl("get", kind, name, "-o", "json")).stdout)
    assert obj["metadata"]["generation"] == 2
    assert "kubectl.kubernetes.io/last-applied-configuration" in obj["metadata"]["annotations"]
    assert obj["status"]["conditions"][-1]["type"] == "Running", "apply leaves the status alone"
    deleted = await kubectl("delete", "-f", str(DATA / file))
    assert f'"{name}" deleted' in deleted.stdout
    assert (await kubectl("get", kind)).stderr.startswith("No resources found")


async def test_wait_for_a_condition_of_a_custom_resource(kubectl: sim_fixtures.Kubectl,
                                                         sim_cluster: sim_cluster.Cluster) -> None:
    await install_crds(kubectl)
    await kubectl("apply", "-f", str(DATA / "pytorchjob.yaml"))
    waiting = asyncio.create_task(kubectl("wait", "--for=condition=Succeeded", "--timeout=20s",
                                          "pytorchjob/pytorch-simple"))
    await asyncio.sleep(0.5)
    await sim_cluster.store.patch("pytorchjobs.kubeflow.org", "default", "pytorch-simple", {"status": {
        "conditions": [{"type": "Succeeded", "status": "True"}]}}, "merge", "status")
    assert "condition met" in (await waiting).stdout
    await kubectl("wait", "--for=delete", "--timeout=1s", "pytorchjob/nothing-here", check=False)


async def test_pods_print_ready_status_restarts_age(kubectl: sim_fixtures.Kubectl) -> None:
    pod = """
apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {sim.kto.dev/duration: "30"}}
spec: {containers: [{name: main, image: busybox}]}
"""
    await kubectl("apply", "-f", "-", input=pod)
    lines = (await kubectl("get", "pods")).stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert lines[1].split()[0] == "p"
    wide = (await kubectl("get", "pods", "-o", "wide")).stdout.splitlines()[0].split()
    assert wide[5:7] == ["IP", "NODE"]


async def test_kubectl_logs_come_from_the_kubelet(kubectl: sim_fixtures.Kubectl,
                                                 sim_cluster: sim_cluster.Cluster) -> None:
    pod = """
apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {sim.kto.dev/duration: "0.2"}}
spec: {restartPolicy: Never, containers: [{name: main, image: busybox}]}
"""
    await kubectl("apply", "-f", "-", input=pod)
    await kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=20s", "pod/p")
    logs = (await kubectl("logs", "p")).stdout
    assert logs == sim_cluster.kubelet.logs("default", "p") and logs


async def test_server_side_apply_creates_and_updates_with_kubectl(kubectl: sim_fixtures.Kubectl) -> None:
    await kubectl("apply", "--server-side", "-f", "-", input="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}\n")
    await kubectl("apply", "--server-side", "-f", "-", input="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {b: '2'}\n")
    data = (await kubectl("get", "configmap", "c", "-o", "jsonpath={.data}")).stdout
    assert data == '{"b":"2"}', "a field the manager stopped applying is removed"


async def test_patch_label_and_delete_with_kubectl(kubectl: sim_fixtures.Kubectl) -> None:
    await kubectl("create", "configmap", "c", "--from-literal=a=1")
    await kubectl("label", "configmap", "c", "team=ml")
    await kubectl("patch", "configmap", "c", "--type=json", "-p", '[{"op":"add","path":"/data/b","value":"2"}]')
    await kubectl("patch", "configmap", "c", "-p", '{"data":{"c":"3"}}')
    obj = json.loads((await kubectl("get", "configmap", "-l", "team in (ml)", "-o", "json")).stdout)["items"][0]
    assert obj["data"] == {"a": "1", "b": "2", "c": "3"}
    await kubectl("delete", "configmap", "c")
    assert "NotFound" in (await kubectl("get", "configmap", "c", check=False)).stderr


async def test_kubectl_get_watch_streams_changes(kubectl: sim_fixtures.Kubectl,
                                                 sim_cluster: sim_cluster.Cluster) -> None:
    await kubectl("create", "configmap", "c")
    watching = asyncio.create_task(kubectl("get", "configmaps", "--watch", "--request-timeout=3s",
                                           "--output-watch-events", check=False))
    await asyncio.sleep(1.0)
    await sim_cluster.store.create("configmaps", {"metadata": {"name": "d"}}, "default")
    out = (await watching).stdout
    assert "ADDED" in out and " d " in out + " "
