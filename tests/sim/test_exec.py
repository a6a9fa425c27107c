"""``kubectl exec``, ``kubectl logs`` and ``KubeClient.exec`` on both tiers: sim/ and the real kube-apiserver
(whose exec and log requests go to the node agent's kubelet API, sim/node/kubeletserving.py).

Each test runs on both tiers and asserts the same outcome, so the sim's answers are held against what
kube-apiserver v1.37 relays from a kubelet.
"""

from __future__ import annotations

import asyncio
import pathlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.reconciler import applying
from shared.core import effects
from shared.kube import clients, resources
from sim import cluster as sim_cluster_module
from sim import settings as sim_settings_module
from tests.fixtures import sim as sim_fixtures
from tests.fixtures import tiers

HOSTFILE = "w-0:1\nw-1:1\n"
NODES = resources.ResourceType("", "v1", "nodes", "Node", namespaced=False)


class Tier:
    def __init__(self, name: str, kubeconfig: pathlib.Path, kubectl: sim_fixtures.Kubectl,
                 client: clients.KubeClient, namespace: str) -> None:
        self.name, self.kubeconfig, self.kubectl, self.client, self.namespace = name, kubeconfig, kubectl, client, namespace

    async def run(self, *args: str, check: bool = True) -> sim_fixtures.KubectlResult:
        return await self.kubectl("-n", self.namespace, *args, check=check)

    async def create(self, rt: resources.ResourceType, body: dict[str, Any]) -> None:
        await self.client.create(rt, self.namespace, body)

    async def wait_phase(self, pod: str, phases: tuple[str, ...], timeout: float = 30.0) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            obj = await self.client.get(resources.PODS, self.namespace, pod)
            if (obj.get("status") or {}).get("phase") in phases:
                return obj
            assert loop.time() < deadline, f"{self.name}: pod {pod} is {obj.get('status')}"
            await asyncio.sleep(0.1)


@pytest.fixture
async def tier(real_or_sim: tiers.RealCluster | None, tmp_path: pathlib.Path) -> AsyncIterator[Tier]:
    namespace = f"exec-{uuid.uuid4().hex[:6]}"
    real = real_or_sim
    if real is not None:
        async with await clients.KubeClient.connect(real.kubeconfig, tiers.CONTEXT) as client:
            await client.create(resources.NAMESPACES, None, {"metadata": {"name": namespace}})
            yield Tier("real", real.kubeconfig, sim_fixtures.Kubectl(real.kubeconfig, tmp_path / "cache"), client,
                       namespace)
            await client.delete(resources.NAMESPACES, None, namespace)
        return
    settings = sim_settings_module.SimSettings(kubeconfig=tmp_path / "kubeconfig")
    async with sim_cluster_module.Cluster(settings) as sim:
        assert sim.kubeconfig is not None
        async with await clients.KubeClient.connect(sim.kubeconfig) as client:
            await client.create(resources.NAMESPACES, None, {"metadata": {"name": namespace}})
            yield Tier("sim", sim.kubeconfig, sim_fixtures.Kubectl(sim.kubeconfig, tmp_path / "cache"), client,
                       namespace)


def launcher_pod(name: str = "launcher", node: str | None = None) -> dict[str, Any]:
    """et-operator's launcher in small: a ConfigMap's hostfile copied by an init container into an emptyDir."""
    mounts = [{"name": "config", "mountPath": "/etc/mpi"}, {"name": "edl", "mountPath": "/etc/edl"}]
    spec: dict[str, Any] = {
        "initContainers": [{
            "name": "init-hostfile", "image": "busybox", "volumeMounts": mounts,
            "command": ["sh", "-c", "cp /etc/mpi/hostfile /etc/edl/hostfile && chmod 600 /etc/edl/hostfile"],
        }],
        "containers": [{"name": "launcher", "image": "horovod", "command": ["sleep", "365d"], "volumeMounts": mounts}],
        "volumes": [{"name": "config", "configMap": {"name": "job-config", "items": [
            {"key": "hostfile", "path": "hostfile", "mode": 0o444}]}}, {"name": "edl", "emptyDir": {}}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec, "metadata": {
        "name": name, "annotations": {"sim.kto.dev/ssh-hosts-file": "/etc/edl/hostfile"}}}


async def start_launcher(tier: Tier, name: str = "launcher", node: str | None = None) -> None:
    await tier.create(resources.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": "job-config"}, "data": {"hostfile": HOSTFILE}})
    await tier.create(resources.PODS, launcher_pod(name, node))
    await tier.wait_phase(name, ("Running",))


async def test_kubectl_exec_reads_the_init_containers_copy_of_a_configmap(tier: Tier) -> None:
    await start_launcher(tier)
    assert (await tier.run("exec", "launcher", "--", "cat", "/etc/edl/hostfile")).stdout == HOSTFILE
    assert (await tier.run("exec", "launcher", "-c", "launcher", "--", "cat", "/etc/mpi/hostfile")).stdout == HOSTFILE
    written = await tier.run("exec", "launcher", "--", "sh", "-c", "echo hi > /tmp/x && cat /tmp/x")
    assert written.stdout == "hi\n"
    failed = await tier.run("exec", "launcher", "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert (failed.returncode, failed.stdout) == (3, "out\n")
    assert "err\ncommand terminated with exit code 3\n" in failed.stderr


async def test_kubeclient_exec_rewrites_the_hostfile_and_probes_the_launchers_processes(tier: Tier) -> None:
    await start_launcher(tier)
    ns = tier.namespace
    probe = ["sh", "-c", "ps -ef | grep 'ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no'"]
    before = await tier.client.exec(ns, "launcher", "launcher", probe)
    assert "StrictHostKeyChecking=no w-0" in before.stdout and "StrictHostKeyChecking=no w-1" in before.stdout
    rewrite = await tier.client.exec(ns, "launcher", "launcher", ["sh", "-c", "echo 'w-0:1\n' > /etc/edl/hostfile"])
    assert rewrite == clients.ExecResult("", "", 0)
    after = await tier.client.exec(ns, "launcher", "launcher", probe)
    assert "StrictHostKeyChecking=no w-0" in after.stdout and "StrictHostKeyChecking=no w-1" not in after.stdout
    read = await tier.client.exec(ns, "launcher", "launcher", ["cat", "/etc/edl/hostfile"])
    assert read == clients.ExecResult("w-0:1\n\n", "", 0)
    failed = await tier.client.exec(ns, "launcher", "launcher", ["sh", "-c", "echo out; echo err >&2; exit 4"])
    assert failed == clients.ExecResult("out\n", "err\n", 4)
    missing = await tier.client.exec(ns, "launcher", "launcher", ["nosuch"])
    assert (missing.exit_code, missing.stderr) == (127, "sh: nosuch: not found\n")


async def test_exec_over_spdy(tier: Tier, monkeypatch: pytest.MonkeyPatch) -> None:
    """kubectl without WebSockets: SPDY/3.1 through kube-apiserver to the kubelet (or straight to the sim)."""
    await start_launcher(tier)
    monkeypatch.setenv("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
    assert (await tier.run("exec", "launcher", "--", "cat", "/etc/edl/hostfile")).stdout == HOSTFILE
    failed = await tier.run("exec", "launcher", "--", "sh", "-c", "echo e >&2; exit 5", check=False)
    assert (failed.returncode, failed.stdout) == (5, "")
    assert "e\ncommand terminated with exit code 5" in failed.stderr
    piped = await tier.kubectl("-n", tier.namespace, "exec", "-i", "launcher", "--", "grep", "b", input="a\nb\nab\n")
    assert piped.stdout == "b\nab\n"


async def test_kubectl_logs(tier: Tier) -> None:
    await start_launcher(tier)
    logs = (await tier.run("logs", "launcher")).stdout
    assert "sim: init container init-hostfile completed\n" in logs
    assert "sim: started container(s) launcher (run 1)\n" in logs
    assert (await tier.run("logs", "launcher", "--tail=1")).stdout == "sim: started container(s) launcher (run 1)\n"


async def _refused(tier: Tier, pod: str, container: str) -> tuple[int, str]:
    with pytest.raises(clients.ApiError) as caught:
        await tier.client.exec(tier.namespace, pod, container, ["true"])
    return caught.value.code, caught.value.message


async def test_exec_errors_are_the_api_servers_and_the_kubelets(tier: Tier) -> None:
    await start_launcher(tier)
    await tier.create(resources.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "done", "annotations": {"sim.kto.dev/duration": "100ms"}}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}})
    await tier.create(resources.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unscheduled"}, "spec": {
        "nodeSelector": {"no-such-label": "x"}, "containers": [{"name": "main", "image": "busybox"}]}})
    await tier.wait_phase("done", ("Succeeded",))
    assert await _refused(tier, "nope", "main") == (404, 'pods "nope" not found')
    assert await _refused(tier, "launcher", "nope") == (400, "container nope is not valid for pod launcher")
    assert await _refused(tier, "unscheduled", "main") == (400, "pod unscheduled does not have a host assigned")
    assert await _refused(tier, "done", "main") == (500, 'container not found ("main")')
    assert await _refused(tier, "launcher", "init-hostfile") == (500, 'container not found ("init-hostfile")')
    missing = await tier.run("exec", "nope", "--", "true", check=False)
    assert (missing.returncode, missing.stderr) == (1, 'Error from server (NotFound): pods "nope" not found\n')


async def test_exec_output_past_64_kib_is_dropped_with_a_marker_saying_how_much(tier: Tier) -> None:
    await start_launcher(tier)
    double = "; ".join(f"cat /tmp/o{i} /tmp/o{i} > /tmp/o{i + 1}" for i in range(7))
    script = f"printf %s {'0' * 1000} > /tmp/o0; {double}; cat /tmp/o7; cat /tmp/o6 >&2"
    answer = await tier.client.exec(tier.namespace, "launcher", "launcher", ["sh", "-c", script])
    limit = clients.EXEC_OUTPUT_LIMIT
    assert answer.stdout == "0" * limit + clients.dropped_marker(128_000 - limit)
    assert answer.stdout.endswith(f"[kto: {128_000 - limit} more bytes dropped, exec output is capped at 65536 bytes]\n")
    assert (answer.stderr, answer.exit_code) == ("0" * 64_000, 0), "under the cap: all of it, no marker"


async def test_a_launcher_command_past_the_exec_time_limit_counts_as_failed(tier: Tier) -> None:
    await start_launcher(tier)
    slow = effects.Exec(tier.namespace, "launcher", "launcher", ("sh", "-c", "sleep 3"), "script")
    started = asyncio.get_running_loop().time()
    result = await applying.run_in_launcher(tier.client, slow, timeout=0.5)
    assert asyncio.get_running_loop().time() - started < 2.5, "not waited out"
    assert result == effects.ExecResult(
        slow, False, "the script command did not end within the exec time limit of 0.5 s and counts as failed")
    quick = effects.Exec(tier.namespace, "launcher", "launcher", ("sh", "-c", "echo done"), "probe")
    assert await applying.run_in_launcher(tier.client, quick, timeout=5) == effects.ExecResult(
        quick, True, "done\n")


async def test_a_failing_init_command_fails_a_never_pod(tier: Tier) -> None:
    await tier.create(resources.PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad-init"}, "spec": {
        "restartPolicy": "Never",
        "initContainers": [{"name": "init", "image": "busybox", "command": ["sh", "-c", "cat /etc/missing"]}],
        "containers": [{"name": "main", "image": "busybox"}]}})
    pod = await tier.wait_phase("bad-init", ("Failed",))
    init = pod["status"]["initContainerStatuses"][0]["state"]["terminated"]
    assert (init["exitCode"], init["reason"]) == (1, "Error")
    assert pod["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    listed = await tier.run("get", "pod", "bad-init", "--no-headers")
    assert listed.stdout.split()[2] == "Init:Error"
    assert "init: cat: /etc/missing: No such file or directory" in (await tier.run("logs", "bad-init")).stdout


async def test_the_api_server_translates_websockets_to_spdy_for_a_node_without_the_feature(
    real_cluster: tiers.RealCluster, tmp_path: pathlib.Path,
) -> None:
    """A node that does not declare ExtendWebSocketsToKubelet gets SPDY from kube-apiserver's StreamTranslator."""
    namespace = f"exec-{uuid.uuid4().hex[:6]}"
    async with await clients.KubeClient.connect(real_cluster.kubeconfig, tiers.CONTEXT) as client:
        await client.create(resources.NAMESPACES, None, {"metadata": {"name": namespace}})
        tier = Tier("real", real_cluster.kubeconfig, sim_fixtures.Kubectl(real_cluster.kubeconfig, tmp_path / "c"),
                    client, namespace)
        node = "sim-node-3"
        features = (await client.get(NODES, None, node))["status"]["declaredFeatures"]
        await client.patch(NODES, None, node, [{"op": "remove", "path": "/status/declaredFeatures"}], "json",
                           subresource="status")
        try:
            await start_launcher(tier, node=node)
            result = await client.exec(namespace, "launcher", "launcher", ["sh", "-c", "cat /etc/edl/hostfile; exit 2"])
            assert result == clients.ExecResult(HOSTFILE, "", 2)
            assert (await tier.run("exec", "launcher", "--", "cat", "/etc/mpi/hostfile")).stdout == HOSTFILE
        finally:
            await client.patch(NODES, None, node, {"status": {"declaredFeatures": features}}, subresource="status")
            await client.delete(resources.NAMESPACES, None, namespace)
