"""The simulated kubelet runs bound pods through their lives, restarts, evictions and node losses."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from sim import errors
from sim import cluster as sim_cluster_module
from sim import settings as sim_settings_module
from sim.apiserver import store as sim_store
from sim.node import kubelet

SETTINGS = sim_settings_module.SimSettings(nodes=2, gpus_per_node=2, pod_duration=0.1, startup_delay=0.01)


class Cluster:
    """A running local cluster, seen through its store and its kubelet."""

    def __init__(self, store: sim_store.Store, kubelet_: kubelet.Kubelet) -> None:
        self.store = store
        self.kubelet = kubelet_

    async def create(
        self,
        name: str,
        *,
        policy: str = "Never",
        annotations: dict[str, str] | None = None,
        gpus: int = 0,
        **spec: Any,
    ) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": "trainer",
            "image": "kto/trainer:1",
            "env": [
                {"name": "RANK", "value": "0"},
                {"name": "WORLD_SIZE", "value": "2"},
                {"name": "MASTER_ADDR", "value": "job-master-0"},
                {"name": "SECRET", "value": "not logged"},
            ],
        }
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        pod = {
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"restartPolicy": policy, "containers": [container], **spec},
        }
        return await self.store.create("pods", pod, "default")

    async def pod(self, name: str) -> dict[str, Any]:
        return await self.store.get("pods", "default", name)

    async def wait(self, name: str, check: Callable[[dict[str, Any]], bool], timeout: float = 5.0) -> dict[str, Any]:
        """The pod once `check` holds for it."""
        async with asyncio.timeout(timeout):
            while True:
                with contextlib.suppress(errors.ApiError):
                    pod = await self.pod(name)
                    if check(pod):
                        return pod
                await asyncio.sleep(0.01)


@pytest.fixture
def sim_settings() -> sim_settings_module.SimSettings:
    """Fast pods for the `sim_cluster` fixture; a test parametrizes `sim_settings` to change them."""
    return SETTINGS


@pytest.fixture
def cluster(sim_cluster: sim_cluster_module.Cluster) -> Cluster:
    """The whole local cluster (API server, scheduler, kubelet) in this process."""
    return Cluster(sim_cluster.store, sim_cluster.kubelet)


def phase(pod: dict[str, Any]) -> str:
    return str(pod["status"].get("phase"))


def container(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["status"]["containerStatuses"][0]  # type: ignore[no-any-return]


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in pod["status"]["conditions"] if c["type"] == kind)


def terminal(pod: dict[str, Any]) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


# -- pure ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("3s", 3.0, id="seconds"),
        pytest.param("500ms", 0.5, id="milliseconds"),
        pytest.param("1.5m", 90.0, id="minutes"),
        pytest.param("1h", 3600.0, id="hours"),
        pytest.param("2", 2.0, id="plain-seconds"),
        pytest.param("0.25", 0.25, id="plain-fraction"),
    ],
)
def test_a_duration_annotation_parses_to_seconds(text: str, seconds: float) -> None:
    assert kubelet.parse_duration(text) == seconds


@pytest.mark.parametrize("text", [pytest.param("soon", id="word"), pytest.param("3d", id="days"), pytest.param("-1s", id="negative")])
def test_a_bad_duration_is_a_value_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text)):
        kubelet.parse_duration(text)


@pytest.mark.parametrize(
    ("policy", "code", "outcome"),
    [
        pytest.param("Never", 0, "Succeeded", id="never-success"),
        pytest.param("Never", 2, "Failed", id="never-failure"),
        pytest.param("OnFailure", 0, "Succeeded", id="onfailure-success"),
        pytest.param("OnFailure", 1, "restart", id="onfailure-failure-restarts"),
        pytest.param("Always", 0, "restart", id="always-restarts-even-after-success"),
        pytest.param("Always", 1, "restart", id="always-restarts-after-failure"),
    ],
)
def test_what_follows_an_exit_depends_on_the_restart_policy(policy: str, code: int, outcome: str) -> None:
    assert kubelet.after_exit(policy, code) == outcome


@pytest.mark.parametrize(
    ("annotations", "failures", "code"),
    [
        pytest.param({}, 0, 0, id="default-exit-code"),
        pytest.param({"sim.kto.dev/exit-code": "7"}, 0, 7, id="exit-code-annotation"),
        pytest.param({"sim.kto.dev/fail-times": "2"}, 0, 1, id="first-failure"),
        pytest.param({"sim.kto.dev/fail-times": "2"}, 1, 1, id="second-failure"),
        pytest.param({"sim.kto.dev/fail-times": "2"}, 2, 0, id="then-success"),
        pytest.param({"sim.kto.dev/fail-times": "1", "sim.kto.dev/exit-code": "42"}, 0, 42, id="failing-with-given-code"),
    ],
)
def test_the_exit_code_follows_the_annotations(annotations: dict[str, str], failures: int, code: int) -> None:
    behaviour = kubelet.Behaviour.of({"metadata": {"annotations": annotations}, "spec": {}}, SETTINGS)
    assert behaviour.exit_code_after(failures) == code


def test_an_always_pod_without_sim_annotations_runs_forever() -> None:
    plain = kubelet.Behaviour.of({"metadata": {}, "spec": {"restartPolicy": "Always"}}, SETTINGS)
    scripted = kubelet.Behaviour.of(
        {"metadata": {"annotations": {"sim.kto.dev/duration": "1s"}}, "spec": {"restartPolicy": "Always"}}, SETTINGS
    )
    assert (plain.runs_forever, scripted.runs_forever, scripted.duration) == (True, False, 1.0)


def test_the_env_summary_names_the_distributed_training_variables_only() -> None:
    pod = {"spec": {"containers": [{"env": [
        {"name": "WORLD_SIZE", "value": "4"},
        {"name": "RANK", "value": "1"},
        {"name": "PET_NNODES", "value": "4"},
        {"name": "MASTER_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PASSWORD", "value": "x"},
    ]}]}}
    assert kubelet.env_summary(pod) == "RANK=1 WORLD_SIZE=4 PET_NNODES=4"


# -- through the store ---------------------------------------------------------


async def test_a_bound_pod_runs_ready_with_addresses(cluster: Cluster) -> None:
    await cluster.create("a", annotations={"sim.kto.dev/duration": "10s"})
    await cluster.create("b", annotations={"sim.kto.dev/duration": "10s"})
    pods = [await cluster.wait(name, lambda p: phase(p) == "Running") for name in ("a", "b")]
    for pod in pods:
        assert container(pod)["ready"] and "running" in container(pod)["state"]
        assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}.items() >= {
            "PodScheduled": "True",
            "Initialized": "True",
            "ContainersReady": "True",
            "Ready": "True",
        }.items()
        assert pod["status"]["startTime"]
        assert pod["status"]["hostIP"] == {"sim-node-0": "10.0.0.1", "sim-node-1": "10.0.1.1"}[pod["spec"]["nodeName"]]
    assert pods[0]["status"]["podIP"] != pods[1]["status"]["podIP"]
    assert all(pod["status"]["podIP"].startswith("10.") for pod in pods)


SLOW = sim_settings_module.SimSettings(nodes=1, startup_delay=1.0)


@pytest.mark.parametrize("sim_settings", [pytest.param(SLOW, id="slow")])
async def test_a_pod_is_pending_creating_before_it_runs(cluster: Cluster) -> None:
    await cluster.create("a")
    pod = await cluster.wait("a", lambda p: "containerStatuses" in p["status"])
    assert phase(pod) == "Pending"
    assert container(pod)["state"] == {"waiting": {"reason": "ContainerCreating"}}


async def test_a_successful_pod_completes(cluster: Cluster) -> None:
    await cluster.create("ok")
    pod = await cluster.wait("ok", terminal)
    terminated = container(pod)["state"]["terminated"]
    assert (phase(pod), terminated["exitCode"], terminated["reason"]) == ("Succeeded", 0, "Completed")
    assert terminated["startedAt"] and terminated["finishedAt"]
    assert condition(pod, "Ready")["reason"] == "PodCompleted"


async def test_an_exit_code_fails_a_never_pod(cluster: Cluster) -> None:
    await cluster.create("bad", annotations={"sim.kto.dev/exit-code": "3"})
    pod = await cluster.wait("bad", terminal)
    terminated = container(pod)["state"]["terminated"]
    assert (phase(pod), pod["status"]["reason"], terminated["exitCode"], terminated["reason"]) == (
        "Failed", "Error", 3, "Error",
    )
    assert "exited with code 3" in pod["status"]["message"]


async def test_fail_times_restarts_an_onfailure_pod_in_place_then_succeeds(cluster: Cluster) -> None:
    created = await cluster.create("flaky", policy="OnFailure", annotations={"sim.kto.dev/fail-times": "2"})
    pod = await cluster.wait("flaky", terminal)
    status = container(pod)
    assert (phase(pod), status["restartCount"]) == ("Succeeded", 2)
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert pod["metadata"]["uid"] == created["metadata"]["uid"]


SLOW_RESTART = sim_settings_module.SimSettings(nodes=1, pod_duration=0.05, startup_delay=0.5)


@pytest.mark.parametrize("sim_settings", [pytest.param(SLOW_RESTART, id="slow-restart")])
async def test_a_restarting_pod_shows_crash_loop_back_off_between_runs(cluster: Cluster) -> None:
    await cluster.create("flaky", policy="OnFailure", annotations={"sim.kto.dev/fail-times": "1"})
    pod = await cluster.wait("flaky", lambda p: container(p).get("restartCount") == 1 if "containerStatuses" in p["status"] else False)
    assert container(pod)["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert (phase(pod), condition(pod, "Ready")["status"]) == ("Running", "False")


async def test_fail_times_counts_across_recreated_never_pods(cluster: Cluster) -> None:
    outcomes = []
    for _ in range(3):
        await cluster.create("worker-0", annotations={"sim.kto.dev/fail-times": "2"})
        pod = await cluster.wait("worker-0", terminal)
        outcomes.append(phase(pod))
        await cluster.store.delete("pods", "default", "worker-0")
    assert outcomes == ["Failed", "Failed", "Succeeded"]


async def test_an_always_pod_with_a_duration_restarts_in_place_even_after_success(cluster: Cluster) -> None:
    await cluster.create("server", policy="Always", annotations={"sim.kto.dev/duration": "50ms"})
    pod = await cluster.wait("server", lambda p: "containerStatuses" in p["status"] and container(p)["restartCount"] >= 2)
    assert phase(pod) == "Running"
    assert container(pod)["lastState"]["terminated"]["reason"] == "Completed"


async def test_an_always_pod_without_annotations_keeps_running(cluster: Cluster) -> None:
    await cluster.create("server", policy="Always")
    await cluster.wait("server", lambda p: phase(p) == "Running")
    await asyncio.sleep(SETTINGS.pod_duration * 3)
    pod = await cluster.pod("server")
    assert (phase(pod), container(pod)["restartCount"]) == ("Running", 0)


async def test_init_containers_complete_before_the_containers_run(cluster: Cluster) -> None:
    await cluster.create("init", annotations={"sim.kto.dev/duration": "10s"}, initContainers=[{"name": "fetch", "image": "busybox"}])
    pod = await cluster.wait("init", lambda p: phase(p) == "Running")
    init = pod["status"]["initContainerStatuses"][0]
    assert (init["name"], init["state"]["terminated"]["reason"]) == ("fetch", "Completed")
    assert condition(pod, "Initialized")["status"] == "True"


async def test_an_evicted_pod_fails_with_reason_evicted(cluster: Cluster) -> None:
    await cluster.create("victim", annotations={"sim.kto.dev/duration": "10s"})
    await cluster.wait("victim", lambda p: phase(p) == "Running")
    await cluster.kubelet.evict("default", "victim")
    pod = await cluster.wait("victim", terminal)
    assert (phase(pod), pod["status"]["reason"]) == ("Failed", "Evicted")
    assert pod["status"]["message"].startswith("The node was low on resource: memory.")
    assert condition(pod, "DisruptionTarget")["reason"] == "TerminationByKubelet"
    assert container(pod)["state"]["terminated"]["exitCode"] == 137


async def test_evicting_an_unknown_pod_is_not_found(cluster: Cluster) -> None:
    with pytest.raises(errors.ApiError) as raised:
        await cluster.kubelet.evict("default", "ghost")
    assert raised.value.code == 404


async def test_an_unscheduled_pod_can_be_evicted_too(cluster: Cluster) -> None:
    await cluster.create("stuck", nodeSelector={"nowhere": "true"})
    await cluster.kubelet.evict("default", "stuck")
    pod = await cluster.wait("stuck", terminal)
    assert (phase(pod), pod["status"]["reason"]) == ("Failed", "Evicted")


async def test_a_failed_node_loses_its_pods_and_gets_no_new_ones(cluster: Cluster) -> None:
    await cluster.create("a", annotations={"sim.kto.dev/duration": "10s"})
    running_pod = await cluster.wait("a", lambda p: phase(p) == "Running")
    lost_node = running_pod["spec"]["nodeName"]
    await cluster.kubelet.fail_node(lost_node)
    pod = await cluster.wait("a", terminal)
    assert (phase(pod), pod["status"]["reason"]) == ("Failed", "NodeLost")
    assert pod["status"]["message"] == f"Node {lost_node} which was running pod a is unresponsive"
    node = await cluster.store.get("nodes", None, lost_node)
    assert next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"] == "Unknown"
    assert {t["effect"] for t in node["spec"]["taints"]} == {"NoSchedule", "NoExecute"}
    for name in ("b", "c", "d"):
        await cluster.create(name, annotations={"sim.kto.dev/duration": "10s"})
    for name in ("b", "c", "d"):
        pod = await cluster.wait(name, lambda p: phase(p) == "Running")
        assert pod["spec"]["nodeName"] != lost_node


ONE = sim_settings_module.SimSettings(nodes=1, pod_duration=0.1, startup_delay=0.01)


@pytest.mark.parametrize("sim_settings", [pytest.param(ONE, id="one")])
async def test_a_recovered_node_takes_pods_again(cluster: Cluster) -> None:
    await cluster.kubelet.fail_node("sim-node-0")
    await cluster.create("a")
    pod = await cluster.wait("a", lambda p: condition(p, "PodScheduled")["status"] == "False" if p["status"].get("conditions") else False)
    assert "untolerated taint {node.kubernetes.io/unreachable: }" in condition(pod, "PodScheduled")["message"]
    await cluster.kubelet.recover_node("sim-node-0")
    assert phase(await cluster.wait("a", terminal)) == "Succeeded"


async def test_a_deleted_pod_with_a_finalizer_is_stopped_then_removed(cluster: Cluster) -> None:
    await cluster.create("held", annotations={"sim.kto.dev/duration": "10s"})
    await cluster.wait("held", lambda p: phase(p) == "Running")
    pod = await cluster.pod("held")
    pod["metadata"]["finalizers"] = ["kto.dev/test"]
    await cluster.store.update("pods", pod)
    await cluster.store.delete("pods", "default", "held")
    pod = await cluster.wait("held", terminal)
    assert container(pod)["state"]["terminated"]["exitCode"] == 143
    pod["metadata"]["finalizers"] = []
    await cluster.store.update("pods", pod)
    with pytest.raises(errors.ApiError):
        await cluster.pod("held")


async def test_the_logs_tell_the_story_of_a_pod(cluster: Cluster) -> None:
    await cluster.create("flaky", policy="OnFailure", annotations={"sim.kto.dev/fail-times": "1"})
    node = (await cluster.wait("flaky", terminal))["spec"]["nodeName"]
    assert cluster.kubelet.logs("default", "flaky") == (
        f"sim: pod default/flaky scheduled to {node}\n"
        "sim: started container(s) trainer (run 1)\n"
        "sim: env RANK=0 WORLD_SIZE=2 MASTER_ADDR=job-master-0\n"
        "sim: container(s) exited with code 1\n"
        "sim: started container(s) trainer (run 2)\n"
        "sim: env RANK=0 WORLD_SIZE=2 MASTER_ADDR=job-master-0\n"
        "sim: container(s) exited with code 0\n"
    )
    assert cluster.kubelet.logs("default", "ghost") == ""


# -- the scheduler loop, through the same cluster ---------------------------------------------------


async def test_an_unschedulable_pod_is_told_why_once_and_runs_when_room_appears(cluster: Cluster) -> None:
    await cluster.create("hog", gpus=2, annotations={"sim.kto.dev/duration": "300ms"}, nodeSelector={"kubernetes.io/hostname": "sim-node-0"})
    await cluster.wait("hog", lambda p: phase(p) == "Running")
    await cluster.create("waiter", gpus=2, nodeSelector={"kubernetes.io/hostname": "sim-node-0"})
    pod = await cluster.wait("waiter", lambda p: bool(p["status"].get("conditions")))
    scheduled = condition(pod, "PodScheduled")
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
        "False",
        "Unschedulable",
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector.",
    )
    version = pod["metadata"]["resourceVersion"]
    await asyncio.sleep(0.1)
    assert (await cluster.pod("waiter"))["metadata"]["resourceVersion"] == version
    pod = await cluster.wait("waiter", terminal)
    assert (phase(pod), pod["spec"]["nodeName"]) == ("Succeeded", "sim-node-0")


async def test_a_volcano_gang_is_bound_only_when_all_its_members_fit(cluster: Cluster) -> None:
    await cluster.store.create(
        "podgroups.scheduling.volcano.sh",
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "job"}, "spec": {"minMember": 3}},
        "default",
    )
    group = "podgroups.scheduling.volcano.sh"
    async with asyncio.timeout(5):
        while ((await cluster.store.get(group, "default", "job")).get("status") or {}).get("phase") != "Inqueue":
            await asyncio.sleep(0.01)
    gang = {"scheduling.k8s.io/group-name": "job", "sim.kto.dev/duration": "10s"}
    for name in ("w0", "w1"):
        await cluster.create(name, gpus=2, annotations=gang)
    pod = await cluster.wait("w0", lambda p: bool(p["status"].get("conditions")))
    assert "is not ready: 2 member(s) of minMember 3" in condition(pod, "PodScheduled")["message"]
    await cluster.create("w2", gpus=2, annotations=gang)
    pod = await cluster.wait("w2", lambda p: bool(p["status"].get("conditions")))
    assert "cannot be placed" in condition(pod, "PodScheduled")["message"]
    assert not any([(await cluster.pod(n))["spec"].get("nodeName") for n in ("w0", "w1", "w2")])
    await cluster.store.patch(group, "default", "job", {"spec": {"minMember": 2}}, "merge")
    await cluster.store.delete("pods", "default", "w2")
    for name in ("w0", "w1"):
        await cluster.wait(name, lambda p: phase(p) == "Running")
    async with asyncio.timeout(5):
        while ((await cluster.store.get(group, "default", "job")).get("status") or {}).get("phase") != "Running":
            await asyncio.sleep(0.01)


async def test_a_coscheduling_gang_is_bound_together(cluster: Cluster) -> None:
    await cluster.store.create(
        "podgroups.scheduling.x-k8s.io",
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "job"}, "spec": {"minMember": 2}},
        "default",
    )
    for name in ("w0", "w1"):
        await cluster.store.create(
            "pods",
            {
                "metadata": {"name": name, "labels": {"scheduling.x-k8s.io/pod-group": "job"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
            },
            "default",
        )
    for name in ("w0", "w1"):
        assert phase(await cluster.wait(name, terminal)) == "Succeeded"
    async with asyncio.timeout(5):
        while True:
            status = (await cluster.store.get("podgroups.scheduling.x-k8s.io", "default", "job")).get("status") or {}
            if status.get("phase") == "Finished":
                break
            await asyncio.sleep(0.01)
    assert (status["succeeded"], status["failed"]) == (2, 0)


async def test_a_gated_pod_waits_until_its_gates_are_removed(cluster: Cluster) -> None:
    await cluster.create("gated", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    pod = await cluster.wait("gated", lambda p: bool(p["status"].get("conditions")))
    scheduled = condition(pod, "PodScheduled")
    assert (scheduled["reason"], scheduled["message"]) == (
        "SchedulingGated",
        "Scheduling is blocked due to non-empty scheduling gates",
    )
    await asyncio.sleep(0.1)
    assert not (await cluster.pod("gated"))["spec"].get("nodeName")
    await cluster.store.patch("pods", "default", "gated", {"spec": {"schedulingGates": None}}, "merge")
    assert phase(await cluster.wait("gated", terminal)) == "Succeeded"


async def test_a_pod_with_a_bad_sim_annotation_fails_to_start(cluster: Cluster) -> None:
    await cluster.create("typo", annotations={"sim.kto.dev/duration": "soon"})
    pod = await cluster.wait("typo", terminal)
    assert (phase(pod), pod["status"]["reason"]) == ("Failed", "StartError")
    assert "invalid duration 'soon'" in pod["status"]["message"]
