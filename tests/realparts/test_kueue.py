"""The real Kueue v0.17.0 as a part (realparts/kueue.py): built once per machine, registered as
upstream's installation registers it (its CRDs, its webhooks with kto's certificates, the
integrations kto serves), its mutating webhook suspends a queued PyTorchJob and its controller
makes the job's Workload; a stopped Kueue leaves no webhook and no lease behind, so the next one
starts at once; and a MultiKueue kubeconfig is inlined without its contents reaching an error.

The Kueue tests run the real binary against the session's real control plane (CI=true, or
KTO_SKIP_REAL unset); the configuration and kubeconfig tests need nothing but the machine.
"""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import time
from typing import Any

import pytest
import yaml

from realparts import caching, controllerruntime, kueue
from supervising import processes
from tests.fixtures import sim as sim_fixtures
from tests.fixtures import tiers
from tests.realparts import test_control_plane

WORKLOAD_LINE = ('{"level":"info","ts":"2026-11-27T17:08:34.814271703Z","logger":"workload-reconciler",'
                 '"caller":"controller/controller.go:306","msg":"Starting workers","replica-role":"leader",'
                 '"worker count":1}')
FLAVOR_LINE = WORKLOAD_LINE.replace("workload-reconciler", "resourceflavor-reconciler").replace("leader", "follower")

QUEUED_PYTORCHJOB = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: queued
  labels: {kueue.x-k8s.io/queue-name: team}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: busybox, resources: {requests: {cpu: 100m}}}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: pytorch, image: busybox, resources: {requests: {cpu: 100m}}}]
"""


@pytest.mark.parametrize(("log", "started"), [
    pytest.param('{"level":"info","msg":"Initializing"}', False, id="initializing"),
    pytest.param(FLAVOR_LINE, False, id="a-follower-runs-the-resourceflavor-controller"),
    pytest.param(f"{FLAVOR_LINE}\n{WORKLOAD_LINE}\n", True, id="the-leader-runs-the-workload-controller"),
])
def test_kueue_counts_as_started_once_its_workload_controller_runs(log: str, started: bool) -> None:
    assert controllerruntime.workers_started(log, kueue.CONTROLLER) is started


def test_its_configuration_is_upstreams_with_kto_certificates_on_loopback(tmp_path: pathlib.Path) -> None:
    config = kueue.configuration(tmp_path, 9443, 8081, kueue.KueueSettings())
    assert config["namespace"] == kueue.NAMESPACE
    assert config["leaderElection"] == {"leaderElect": True, "resourceName": kueue.LEASE,
                                        "resourceNamespace": kueue.NAMESPACE}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert config["metrics"] == {"bindAddress": "0"}
    assert config["integrations"]["frameworks"] == list(kueue.FRAMEWORKS)
    assert "multiKueue" not in config
    assert "fairSharing" not in config, "Fair Sharing is off, as upstream's default"


def test_fair_sharing_is_configured_with_its_preemption_strategies(tmp_path: pathlib.Path) -> None:
    settings = kueue.KueueSettings(fair_sharing=kueue.FAIR_SHARING)
    assert kueue.configuration(tmp_path, 1, 2, settings)["fairSharing"] == {
        "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}


def test_a_manager_is_configured_for_multikueue(tmp_path: pathlib.Path) -> None:
    settings = kueue.KueueSettings(multikueue=True, worker_lost_timeout=30, gc_interval=5)
    assert kueue.configuration(tmp_path, 1, 2, settings)["multiKueue"] == {"gcInterval": "5s",
                                                                          "workerLostTimeout": "30s"}


@pytest.mark.parametrize(("gates", "flag"), [
    pytest.param({}, "VisibilityOnDemand=false", id="the-visibility-server-off"),
    pytest.param({"MultiKueueDispatcherModeIncremental": True},
                 "VisibilityOnDemand=false,MultiKueueDispatcherModeIncremental=true", id="settings-added"),
    pytest.param({"VisibilityOnDemand": True}, "VisibilityOnDemand=true", id="settings-win"),
])
def test_its_feature_gates_are_ktos_then_the_settings(gates: dict[str, bool], flag: str) -> None:
    assert kueue.feature_gates(kueue.KueueSettings(feature_gates=gates)) == flag


@pytest.mark.parametrize(("group", "resource", "framework"), [
    pytest.param("kubeflow.org", "pytorchjobs", "kubeflow.org/pytorchjob", id="a-kubeflow-job"),
    pytest.param("batch", "jobs", "batch/job", id="a-batch-job"),
    pytest.param("trainer.kubeflow.org", "trainjobs", "trainer.kubeflow.org/trainjob", id="a-trainjob"),
    pytest.param("", "pods", "pod", id="pods"),
    pytest.param("apps", "statefulsets", "statefulset", id="statefulsets"),
])
def test_a_webhook_rule_names_its_integration_as_kueue_does(group: str, resource: str, framework: str) -> None:
    assert kueue.framework_of({"apiGroups": [group], "resources": [resource]}) == framework


def write_kubeconfig(directory: pathlib.Path) -> pathlib.Path:
    (directory / "ca.crt").write_text("CA-PEM")
    (directory / "token").write_text("secret-token\n")
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kto-2",
        "clusters": [{"name": "kto-2", "cluster": {"server": "https://127.0.0.1:6443",
                                                   "certificate-authority": "ca.crt"}}],
        "users": [{"name": "kto-2", "user": {"tokenFile": str(directory / "token")}}],
        "contexts": [{"name": "kto-2", "context": {"cluster": "kto-2", "user": "kto-2"}},
                     {"name": "broken", "context": {"cluster": "elsewhere", "user": "kto-2"}}],
    }))
    return path


def test_a_worker_kubeconfig_is_inlined_for_multikueue(tmp_path: pathlib.Path) -> None:
    inlined = yaml.safe_load(kueue.inline_kubeconfig(write_kubeconfig(tmp_path), "kto-2"))
    assert inlined["clusters"] == [{"name": "kto-2", "cluster": {
        "server": "https://127.0.0.1:6443", "certificate-authority-data": base64.b64encode(b"CA-PEM").decode()}}]
    assert inlined["users"] == [{"name": "kto-2", "user": {"token": "secret-token"}}]
    assert inlined["current-context"] == "kto-2"


@pytest.mark.parametrize(("context", "words"), [
    pytest.param("kto-9", "has no context 'kto-9'", id="a-missing-context"),
    pytest.param("broken", "names a cluster or user it does not have", id="a-context-without-its-cluster"),
])
def test_a_bad_worker_kubeconfig_is_named_without_its_contents(tmp_path: pathlib.Path, context: str,
                                                                words: str) -> None:
    with pytest.raises(ValueError, match=words) as raised:
        kueue.inline_kubeconfig(write_kubeconfig(tmp_path), context)
    assert "secret-token" not in str(raised.value)


async def test_a_worker_name_that_is_not_a_dns_label_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="'Kto_2' is not a DNS label"):
        await kueue.connect_workers(tmp_path / "unused", "kto-1", {"Kto_2": (write_kubeconfig(tmp_path), "kto-2")})


def test_without_go_the_build_says_so_in_one_line(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("KTO_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(caching.PartError, match="^go is not installed") as raised:
        kueue.ensure_build(quiet=True)
    assert "\n" not in str(raised.value)


def test_a_failed_build_says_so_in_one_line_and_keeps_gos_output(tmp_path: pathlib.Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KTO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modules"))
    monkeypatch.setenv("GOPROXY", "off")  # the module cannot be had: go get fails as with a registry down
    kept = tmp_path / "cache" / f"kueue-{kueue.VERSION}-r{kueue.BUILD_REVISION}.failed.log"
    with pytest.raises(caching.PartError) as raised:
        kueue.ensure_build(quiet=True)
    assert str(raised.value) == f"go get of Kueue {kueue.VERSION} failed (exit 1); its output is in {kept}"
    assert "GOPROXY=off" in kept.read_text()
    assert not list((tmp_path / "cache").glob("*.tmp-*")), "nothing that looks like a build is left"


@pytest.fixture
def build() -> pathlib.Path:
    tiers.require_real_tier()
    return kueue.ensure_build(quiet=True)


def test_the_build_is_cached(build: pathlib.Path) -> None:
    began = time.monotonic()
    assert kueue.ensure_build(quiet=True) == build
    assert time.monotonic() - began < 1
    assert (build / kueue.BINARY).is_file() and (build / caching.COMPLETE).is_file()
    assert {crd["spec"]["names"]["kind"] for crd in controllerruntime.manifests(build / kueue.CRD_DIR)} >= {
        "Workload", "ClusterQueue", "LocalQueue", "ResourceFlavor", "MultiKueueCluster", "AdmissionCheck"}


def test_its_webhooks_are_upstreams_for_the_enabled_integrations_pointed_at_the_local_process(
        build: pathlib.Path) -> None:
    made = {m["metadata"]["name"]: m for m in kueue.webhook_configurations(build, "https://127.0.0.1:1", b"CA",
                                                                              kueue.FRAMEWORKS)}
    assert sorted(made) == [kueue.MUTATING, kueue.VALIDATING]
    hooks = {w["name"]: w for m in made.values() for w in m["webhooks"]}
    assert hooks["mpytorchjob.kb.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:1/mutate-kubeflow-org-v1-pytorchjob", "caBundle": "Q0E="}
    assert {"mjob.kb.io", "mmpijob.kb.io", "mtrainjob.kb.io", "mjobset.kb.io", "vworkload.kb.io",
            "vclusterqueue.kb.io"} <= set(hooks)
    # The integrations that are off answer as no-ops: their webhooks are left out, so no pod,
    # Deployment or StatefulSet is ever refused because Kueue is stopped.
    assert not {"mpod.kb.io", "vpod.kb.io", "mdeployment.kb.io", "mstatefulset.kb.io", "mrayjob.kb.io"} & set(hooks)
    assert all(hook["failurePolicy"] == "Fail" for hook in hooks.values())


async def test_a_stopped_kueue_leaves_no_webhook_or_lease_and_the_next_starts_at_once(
    real_cluster: tiers.RealCluster, tmp_path: pathlib.Path,
) -> None:
    """First of the module's Kueue tests: before the module's Kueue (the fixture) starts."""
    await tiers.check_restarts_at_once(
        real_cluster, lambda directory: kueue.KueueController(real_cluster.kubeconfig, tiers.CONTEXT, directory),
        tmp_path)


def test_kto_control_plane_with_kueue_is_ready_with_kueue_and_stops_it_on_sigterm(tmp_path: pathlib.Path) -> None:
    tiers.require_real_tier()
    plane = test_control_plane.Running(tmp_path / "plane", "--with", "kueue")
    try:
        parts = {pid: test_control_plane.command_line(pid) for pid in processes.descendants(plane.process.pid)}
        kueues = {pid for pid, line in parts.items() if line.startswith(str(kueue.ensure_build() / kueue.BINARY))}
        assert len(kueues) == 1, parts
        # Ready means Kueue answers: a queued job is suspended by its webhook at once.
        hooks = plane.kubectl("get", "mutatingwebhookconfigurations", "-o", "name")
        assert f"mutatingwebhookconfiguration.admissionregistration.k8s.io/{kueue.MUTATING}" in hooks.split()
        plane.kubectl("create", "namespace", "queued")
        dry = json.loads(plane.kubectl("create", "-n", "queued", "--dry-run=server", "-o", "json", "-f", "-",
                                       input=QUEUED_PYTORCHJOB))
        assert dry["spec"]["runPolicy"]["suspend"] is True
    finally:
        code = plane.stop()
    output = plane.log.read_text(errors="replace")
    assert code == 0, output[-2000:]
    assert "Traceback" not in output
    assert not processes.alive(kueues), "Kueue is stopped with the control plane"
    assert (tmp_path / "plane" / "kueue" / "kueue.log").is_file()


@pytest.fixture
async def kubectl(real_kueue: kueue.KueueController, real_cluster: tiers.RealCluster,
                  tmp_path: pathlib.Path) -> sim_fixtures.Kubectl:
    return sim_fixtures.Kubectl(real_cluster.kubeconfig, tmp_path / "kube-cache")


def queues(namespace: str) -> str:
    """A ResourceFlavor, a ClusterQueue of 1 CPU for ``namespace`` and its LocalQueue ``team``."""
    return yaml.safe_dump_all([
        {"apiVersion": kueue.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {"apiVersion": kueue.API_VERSION, "kind": "ClusterQueue", "metadata": {"name": namespace},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                  "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                      {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "1"}]}]}]}},
        {"apiVersion": kueue.API_VERSION, "kind": "LocalQueue", "metadata": {"name": "team", "namespace": namespace},
         "spec": {"clusterQueue": namespace}},
    ])


@pytest.fixture
async def namespace(kubectl: sim_fixtures.Kubectl) -> Any:
    name = "kueue-queued"
    await kubectl("create", "namespace", name)
    await kubectl("apply", "-f", "-", input=queues(name))
    yield name
    # Deleted while Kueue runs: it removes its finalizers from the Workload and the ClusterQueue.
    await kubectl("delete", "namespace", name, "--timeout=60s", timeout=70)
    await kubectl("delete", "clusterqueue", name, "--timeout=60s", timeout=70)


async def test_a_queued_pytorchjob_is_created_suspended_and_gets_a_workload(
    kubectl: sim_fixtures.Kubectl, namespace: str,
) -> None:
    dry = json.loads((await kubectl("create", "-n", namespace, "--dry-run=server", "-o", "json", "-f", "-",
                                    input=QUEUED_PYTORCHJOB)).stdout)
    assert dry["spec"]["runPolicy"]["suspend"] is True, "Kueue's mutating webhook suspends a queued job"
    await kubectl("create", "-n", namespace, "-f", "-", input=QUEUED_PYTORCHJOB)
    workloads: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while not workloads and time.monotonic() < deadline:
        workloads = json.loads((await kubectl("get", "workloads.kueue.x-k8s.io", "-n", namespace,
                                              "-o", "json")).stdout)["items"]
        await asyncio.sleep(0.2)
    assert len(workloads) == 1, "Kueue's PyTorchJob controller makes one Workload for the job"
    workload = workloads[0]
    assert workload["spec"]["queueName"] == "team"
    assert [owner["kind"] for owner in workload["metadata"]["ownerReferences"]] == ["PyTorchJob"]
    assert {p["name"]: p["count"] for p in workload["spec"]["podSets"]} == {"master": 1, "worker": 2}
