"""Every RunPolicy field end to end (spec §6.6–§6.12, §3.2 C7, §3.5), on both tiers, and the
ones that act on children also across a reconciler SIGKILLed between deciding and acting.

Each table row is one spec row; docs/pipeline.md ("RunPolicy, field by field") lists
what kto does for each and where it departs from upstream on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from shared.bus import reading, records
from shared.bus.settings import client_options
from shared.core.settings import OperatorSettings
from shared.kube import clients, resources
from realparts import ports
from tests.fixtures.pipeline import Pipeline, Tier
from tests.pipeline.test_crashes import killed_and_replaced, start_reconciler_process
from tests.pipeline.test_pipeline import job

PODGROUP_CRDS = pathlib.Path(__file__).parent / "data" / "podgroup-crds.yaml"
JOB_LABEL = "training.kubeflow.org/job-name"


def annotate(manifest: dict[str, Any], replica_type: str, **annotations: str) -> dict[str, Any]:
    """Set ``sim.kto.dev/<name>`` annotations (``exit_code`` → ``exit-code``) on a replica's template."""
    field = next(k for k in manifest["spec"] if k.endswith("ReplicaSpecs"))
    template = manifest["spec"][field][replica_type]["template"]
    template["metadata"]["annotations"].update(
        {f"sim.kto.dev/{name.replace('_', '-')}": value for name, value in annotations.items()}
    )
    return manifest


async def names(pipeline: Pipeline, rt: resources.ResourceType, job_name: str) -> set[str]:
    """Live (not terminating) children of ``rt`` of a job, by name."""
    items, _ = await pipeline.client.list(rt, pipeline.namespace, f"{JOB_LABEL}={job_name}")
    return {i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp")}


async def children_are(pipeline: Pipeline, job_name: str, expected: set[str], timeout: float = 20.0) -> None:
    """Eventually the job's live pods and Services are exactly ``expected`` (by name)."""
    seen: dict[str, set[str]] = {}

    async def check() -> bool:
        seen["pods"] = await names(pipeline, resources.PODS, job_name)
        seen["services"] = await names(pipeline, resources.SERVICES, job_name)
        return seen["pods"] == expected and seen["services"] == expected

    try:
        await pipeline.eventually(check, timeout=timeout)
    except AssertionError:
        raise AssertionError(f"children of {job_name}: {seen}, expected {expected}") from None


async def gone(pipeline: Pipeline, kind: str, name: str) -> bool:
    try:
        await pipeline.job(kind, name)
    except clients.ApiError as exc:
        if exc.not_found:
            return True
        raise
    return False


async def patch_run_policy(pipeline: Pipeline, kind: str, name: str, run_policy: dict[str, Any]) -> dict[str, Any]:
    return await pipeline.client.patch(
        resources.JOB_TYPES[kind], pipeline.namespace, name, {"spec": {"runPolicy": run_policy}},
    )


def condition(job_object: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (job_object.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


# ---------------------------------------------------------------------------
# §6.6 cleanPodPolicy
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "left"), [
    pytest.param("None", {"chief-0", "ps-0"}, id="none-keeps-every-pod"),
    pytest.param("Running", {"chief-0"}, id="running-deletes-running-pods-only"),
    pytest.param("All", set(), id="all-deletes-every-pod"),
])
async def test_clean_pod_policy_after_the_job_succeeded(pipeline: Pipeline, policy: str, left: set[str]) -> None:
    """A TFJob succeeds when its chief does, with its PS still running (§6.6 finished row)."""
    name = f"cpp-{policy.lower()}"
    manifest = job("TFJob", name, {"Chief": (1, "Never"), "PS": (1, "Never")}, "tensorflow",
                   runPolicy={"cleanPodPolicy": policy})
    annotate(manifest, "Chief", duration="1s")
    annotate(manifest, "PS", duration="60s")
    await pipeline.submit(manifest)
    await pipeline.wait_for("TFJob", name, "Succeeded", timeout=30)
    await asyncio.sleep(1.0)  # what is not deleted by now stays
    await children_are(pipeline, name, {f"{name}-{n}" for n in left})


# ---------------------------------------------------------------------------
# §6.12 ttlSecondsAfterFinished
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("exit_code", "outcome"), [
    pytest.param("0", "Succeeded", id="succeeded"),
    pytest.param("1", "Failed", id="failed"),
])
async def test_ttl_after_finished_deletes_the_job(pipeline: Pipeline, exit_code: str, outcome: str) -> None:
    name = f"ttl-{outcome.lower()}"
    manifest = job("JAXJob", name, {"Worker": (1, "Never")}, "jax", runPolicy={"ttlSecondsAfterFinished": 1})
    annotate(manifest, "Worker", duration="0.5s", exit_code=exit_code)
    await pipeline.submit(manifest)
    finished = await pipeline.wait_for("JAXJob", name, outcome, timeout=30)
    assert finished["status"]["completionTime"]
    await pipeline.eventually(lambda: gone(pipeline, "JAXJob", name), timeout=15, what="the job deleted by its TTL")
    history = await reading.read_history(pipeline.kafka, pipeline.key("JAXJob", name))
    assert [r.message for r in history if isinstance(r, records.Decision) and r.action == "job_deleted_ttl"][:1] == [
        f"Deleted job: {name}"]


# ---------------------------------------------------------------------------
# §6.8 activeDeadlineSeconds
# ---------------------------------------------------------------------------


async def test_active_deadline_fails_the_job_with_the_upstream_reason_and_deletes_its_pods(pipeline: Pipeline) -> None:
    manifest = job("JAXJob", "ads", {"Worker": (2, "Never")}, "jax", runPolicy={"activeDeadlineSeconds": 2})
    annotate(manifest, "Worker", duration="60s")
    await pipeline.submit(manifest)
    failed = await pipeline.wait_for("JAXJob", "ads", "Failed", timeout=30)
    last = condition(failed, "Failed")
    assert last is not None
    assert (last["reason"], last["message"]) == (
        "JAXJobFailed", "Job ads has failed because it was active longer than specified deadline")
    assert condition(failed, "Running") is None or condition(failed, "Running")["status"] == "False"  # type: ignore[index]
    await children_are(pipeline, "ads", set())


# ---------------------------------------------------------------------------
# §6.7 backoffLimit
# ---------------------------------------------------------------------------

BACKOFF_MESSAGE = "Job {} has failed because it has reached the specified backoff limit"


@pytest.mark.parametrize(("policy", "annotations"), [
    pytest.param("ExitCode", {"exit_code": "137", "duration": "0.3s"}, id="restarts-by-kto-retryable-exit-code"),
    pytest.param("OnFailure", {"fail_times": "9", "duration": "0.3s"}, id="in-place-container-restarts"),
])
async def test_backoff_limit_fails_the_job_after_that_many_restarts(
    pipeline: Pipeline, policy: str, annotations: dict[str, str],
) -> None:
    name = f"bo-{policy.lower()}"
    manifest = job("JAXJob", name, {"Worker": (1, policy)}, "jax", runPolicy={"backoffLimit": 2})
    annotate(manifest, "Worker", **annotations)
    await pipeline.submit(manifest)
    failed = await pipeline.wait_for("JAXJob", name, "Failed", timeout=45)
    last = condition(failed, "Failed")
    assert last is not None and (last["reason"], last["message"]) == ("JAXJobFailed", BACKOFF_MESSAGE.format(name))
    if policy == "ExitCode":
        assert failed["metadata"]["annotations"]["kto.dev/replica-restarts"] == "2"
    await children_are(pipeline, name, set())


@contextlib.asynccontextmanager
async def pod_deletes_refused(pipeline: Pipeline, label: str) -> AsyncIterator[None]:
    """While inside, the API server refuses every DELETE of this test's pods labelled
    ``kto.dev/test-hold=<label>``: a validating webhook for them that is down, with
    failurePolicy Fail (a 500 "failed calling webhook", as a real outage of one would give).
    Both tiers call it as kube-apiserver does."""
    rt = resources.VALIDATING_WEBHOOK_CONFIGURATIONS
    name = f"hold-pod-deletes-{pipeline.namespace}-{label}"
    await pipeline.client.create(rt, None, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "hold.pod-deletes.kto.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 1,
            "clientConfig": {"url": f"https://127.0.0.1:{ports.free()}/refuse"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": pipeline.namespace}},
            "objectSelector": {"matchLabels": {"kto.dev/test-hold": label}},
        }],
    })
    try:
        yield
    finally:
        await pipeline.client.delete(rt, None, name)


async def test_a_restart_counted_by_a_reconciler_killed_before_its_delete_is_not_counted_again(
    pipeline: Pipeline,
) -> None:
    """ExitCode, the Master exits 130 (retryable) twice and then 0, backoffLimit 2: the job
    succeeds with two restarts counted, though the reconciler that counted the first one is
    SIGKILLed while its delete is refused, and its successor makes the pass again (found by
    a chaos run with kills and API faults, where a count made twice failed such jobs)."""
    await pipeline.stop("reconciler")
    first = await start_reconciler_process(pipeline)
    name = "bo-counted-once"
    manifest = job("PyTorchJob", name, {"Master": (1, "ExitCode"), "Worker": (1, "ExitCode")}, "pytorch",
                   runPolicy={"backoffLimit": 2})
    annotate(manifest, "Master", exit_code="130", fail_times="2", duration="0.3s")
    annotate(manifest, "Worker", duration="60s")
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["labels"] = {"kto.dev/test-hold": name}

    def counted(job_object: dict[str, Any]) -> str | None:
        return (job_object["metadata"].get("annotations") or {}).get("kto.dev/replica-restarts")

    def deletes_tried() -> int:
        return len([r for r in pipeline.requests() if r["verb"] == "delete" and r["name"] == f"{name}-master-0"])

    try:
        async with pod_deletes_refused(pipeline, name):
            await pipeline.submit(manifest)

            async def first_counted_and_tried() -> bool:
                return counted(await pipeline.job("PyTorchJob", name)) is not None and deletes_tried() > 0

            await pipeline.eventually(first_counted_and_tried, timeout=30, what="the first restart counted")
            async with killed_and_replaced(first, lambda: start_reconciler_process(pipeline)):
                refused = deletes_tried()

                async def successor_tried() -> bool:  # the successor's pass, made on the job as it is now
                    return deletes_tried() > refused

                await pipeline.eventually(successor_tried, timeout=30, what="the successor's delete")
                held = await pipeline.job("PyTorchJob", name)
                assert counted(held) == "1" and condition(held, "Failed") is None, held["metadata"]["annotations"]
            pipeline.start_reconciler()
        succeeded = await pipeline.wait_for("PyTorchJob", name, "Succeeded", timeout=60)
        assert counted(succeeded) == "2"
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)


# ---------------------------------------------------------------------------
# §6.11 suspend / resume
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("created_suspended", [
    pytest.param(False, id="running-then-suspended-then-resumed"),
    pytest.param(True, id="created-suspended-then-resumed"),
])
async def test_suspend_deletes_pods_and_services_and_resume_recreates_them(
    pipeline: Pipeline, created_suspended: bool,
) -> None:
    name = "sus-new" if created_suspended else "sus"
    manifest = job("PyTorchJob", name, {"Master": (1, "OnFailure"), "Worker": (1, "OnFailure")}, "pytorch",
                   runPolicy={"suspend": created_suspended})
    annotate(manifest, "Master", duration="60s")
    annotate(manifest, "Worker", duration="60s")
    children = {f"{name}-master-0", f"{name}-worker-0"}
    await pipeline.submit(manifest)
    suspended_message = f"PyTorchJob {name} is suspended."
    if created_suspended:
        suspended = await pipeline.wait_for("PyTorchJob", name, "Suspended")
        assert [(c["type"], c["status"]) for c in suspended["status"]["conditions"]] == [
            ("Created", "True"), ("Suspended", "True")]
        assert not suspended["status"].get("startTime")
        await asyncio.sleep(1.0)
        await children_are(pipeline, name, set())
        started = None
    else:
        running = await pipeline.wait_for("PyTorchJob", name, "Running")
        started = running["status"]["startTime"]
        await children_are(pipeline, name, children)
        await asyncio.sleep(1.0)  # so that a new startTime differs (seconds)
        await patch_run_policy(pipeline, "PyTorchJob", name, {"suspend": True})
        suspended = await pipeline.wait_for("PyTorchJob", name, "Suspended")
        await children_are(pipeline, name, set())
        suspended = await pipeline.job("PyTorchJob", name)
        assert [(c["type"], c["status"], c["reason"], c["message"]) for c in suspended["status"]["conditions"]] == [
            ("Created", "True", "PyTorchJobCreated", f"PyTorchJob {name} is created."),
            ("Running", "False", "PyTorchJobSuspended", suspended_message),
            ("Suspended", "True", "PyTorchJobSuspended", suspended_message),
        ]
        assert suspended["status"]["startTime"] == started, "suspend keeps startTime"
        assert all(r.get("active", 0) == 0 for r in suspended["status"]["replicaStatuses"].values())
    await patch_run_policy(pipeline, "PyTorchJob", name, {"suspend": False})
    resumed = await pipeline.wait_for("PyTorchJob", name, "Running", timeout=30)
    await children_are(pipeline, name, children)
    resumed_condition = condition(resumed, "Suspended")
    assert resumed_condition is not None
    assert (resumed_condition["status"], resumed_condition["reason"], resumed_condition["message"]) == (
        "False", "PyTorchJobResumed", f"PyTorchJob {name} is resumed.")
    assert resumed["status"]["startTime"] and resumed["status"]["startTime"] != started, "resume resets startTime"


# ---------------------------------------------------------------------------
# §6.10 managedBy
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("managed_by", "reconciled"), [
    pytest.param("kueue.x-k8s.io/multikueue", False, id="multikueue-left-alone"),
    pytest.param("", False, id="empty-string-left-alone"),
    pytest.param("kubeflow.org/training-operator", True, id="training-operator-reconciled"),
])
async def test_a_job_managed_by_another_controller_is_left_alone(
    pipeline: Pipeline, managed_by: str, reconciled: bool,
) -> None:
    manifest = job("PyTorchJob", "mb", {"Master": (1, "Never"), "Worker": (1, "Never")}, "pytorch",
                   runPolicy={"managedBy": managed_by})
    await pipeline.submit(manifest)
    control = job("PyTorchJob", "control", {"Master": (1, "Never")}, "pytorch")
    await pipeline.submit(control)
    await pipeline.wait_for("PyTorchJob", "control", "Succeeded", timeout=30)
    if reconciled:
        await pipeline.wait_for("PyTorchJob", "mb", "Succeeded", timeout=30)
        return
    left = await pipeline.job("PyTorchJob", "mb")
    assert not (left.get("status") or {}).get("conditions"), "no status, not even Created"
    assert await pipeline.pods("mb") == []
    history = await reading.read_history(pipeline.kafka, pipeline.key("PyTorchJob", "mb"))
    assert not [r for r in history if isinstance(r, records.Decision)], "no decision at all"


# ---------------------------------------------------------------------------
# §3.2 C7, §3.5: UPDATE validation against the old object
# ---------------------------------------------------------------------------


async def test_changing_managed_by_on_a_running_job_fails_its_validation(pipeline: Pipeline) -> None:
    """Upstream's webhook rejects the update (C7); kto has no webhook, sees the stored
    update with the old object and fails the job, naming the field; its pods go."""
    manifest = job("TFJob", "handover", {"Worker": (2, "Never")}, "tensorflow")
    annotate(manifest, "Worker", duration="60s")
    await pipeline.submit(manifest)
    await pipeline.wait_for("TFJob", "handover", "Running")
    await patch_run_policy(pipeline, "TFJob", "handover", {"managedBy": "kueue.x-k8s.io/multikueue"})
    failed = await pipeline.wait_for("TFJob", "handover", "Failed")
    last = condition(failed, "Failed")
    assert last is not None and last["reason"] == "TFJobFailedValidation"
    assert "spec.runPolicy.managedBy: Invalid value: \"kueue.x-k8s.io/multikueue\"" in last["message"]
    assert "field is immutable" in last["message"]
    await children_are(pipeline, "handover", set())


async def test_changing_the_queue_is_rejected(pipeline: Pipeline) -> None:
    """§3.5 / acceptance case 19: kube-apiserver rejects the update by the CRD's CEL rule;
    the sim does not run CEL rules (docs/sim.md), so there kto sees the stored update and
    fails the job with the same message."""
    manifest = job("PyTorchJob", "queue", {"Master": (1, "Never")}, "pytorch",
                   runPolicy={"schedulingPolicy": {"queue": "initial-queue"}})
    annotate(manifest, "Master", duration="60s")
    await pipeline.submit(manifest)
    await pipeline.wait_for("PyTorchJob", "queue", "Running")
    change = {"schedulingPolicy": {"queue": "test"}}
    if pipeline.tier == "kube":
        with pytest.raises(clients.ApiError) as rejected:
            await patch_run_policy(pipeline, "PyTorchJob", "queue", change)
        assert "spec.runPolicy.schedulingPolicy.queue is immutable" in rejected.value.message
        stored = await pipeline.job("PyTorchJob", "queue")
        assert stored["spec"]["runPolicy"]["schedulingPolicy"]["queue"] == "initial-queue"
        return
    await patch_run_policy(pipeline, "PyTorchJob", "queue", change)
    failed = await pipeline.wait_for("PyTorchJob", "queue", "Failed")
    last = condition(failed, "Failed")
    assert last is not None and last["reason"] == "PyTorchJobFailedValidation"
    assert "spec.runPolicy.schedulingPolicy.queue is immutable" in last["message"]


# ---------------------------------------------------------------------------
# §6.9 gang scheduling
# ---------------------------------------------------------------------------

_crds_installed: set[str] = set()


@pytest.fixture
async def podgroup_crds(tier: Tier) -> None:
    """The PodGroup CRDs on the real cluster (once per session), as Volcano or
    scheduler-plugins install them; the sim serves both kinds built in."""
    if tier.name != "kube" or "done" in _crds_installed:
        return
    async with await clients.KubeClient.connect(tier.cluster.kubeconfig, "kto-1") as client:
        for crd in yaml.safe_load_all(PODGROUP_CRDS.read_text()):
            try:
                await client.create(resources.CRDS, None, crd)
            except clients.ApiError as exc:
                if not exc.already_exists:
                    raise
        for rt in (resources.VOLCANO_PODGROUPS, resources.PLUGINS_PODGROUPS):
            for _ in range(100):  # served once the CRD is established
                try:
                    await client.list(rt, "default")
                    break
                except clients.ApiError as exc:
                    if not exc.not_found:
                        raise
                    await asyncio.sleep(0.1)
    _crds_installed.add("done")


async def bind_pending_pods(pipeline: Pipeline, job_name: str) -> None:
    """Play the gang scheduler where none runs (Volcano on the real tier): bind the job's pods."""
    for index, pod in enumerate(await pipeline.pods(job_name)):
        if pod["spec"].get("nodeName"):
            continue
        name = pod["metadata"]["name"]
        await pipeline.client.request(
            "POST", resources.PODS.path(pipeline.namespace, name, "binding"),
            body={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                  "target": {"apiVersion": "v1", "kind": "Node", "name": f"sim-node-{index % 4}"}},
        )


@pytest.mark.parametrize(("scheduler", "podgroups"), [
    pytest.param("volcano", resources.VOLCANO_PODGROUPS, id="volcano"),
    pytest.param("default-scheduler", resources.PLUGINS_PODGROUPS, id="scheduler-plugins"),
])
async def test_gang_scheduling_podgroup_before_pods_watched_recreated_and_deleted_when_done(
    podgroup_crds: None, pipeline: Pipeline, scheduler: str, podgroups: resources.ResourceType,
) -> None:
    await pipeline.stop("reconciler")
    pipeline.start_reconciler(operator=OperatorSettings(gang_scheduler_name=scheduler))
    manifest = job("PyTorchJob", "gang", {"Master": (1, "Never"), "Worker": (1, "Never")}, "pytorch")
    for rt in ("Master", "Worker"):
        template = manifest["spec"]["pytorchReplicaSpecs"][rt]["template"]
        template["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
        template["metadata"]["annotations"]["sim.kto.dev/duration"] = "4s"
    await pipeline.submit(manifest)

    async def pods_created() -> bool:
        return len(await pipeline.pods("gang")) == 2

    await pipeline.eventually(pods_created, what="both pods")
    group = await pipeline.client.get(podgroups, pipeline.namespace, "gang")
    spec = group["spec"]
    assert spec["minMember"] == 2
    assert spec["minResources"] == {"cpu": "200m", "memory": "128Mi"}
    if scheduler == "volcano":
        assert spec["queue"] == "default"
    assert group["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    writes = [r for r in pipeline.requests() if r["verb"] == "create" and r["namespace"] == pipeline.namespace
              and r["resource"] in ("pods", f"podgroups.{podgroups.group}") and r["code"] == 201]
    assert writes[0]["resource"] != "pods", f"the PodGroup first: {[r['resource'] for r in writes]}"
    for pod in await pipeline.pods("gang"):
        assert pod["spec"]["schedulerName"] == scheduler
        if scheduler == "volcano":
            assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "gang"
        else:
            assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "gang"

    await pipeline.client.delete(podgroups, pipeline.namespace, "gang")

    async def recreated() -> bool:
        try:
            again = await pipeline.client.get(podgroups, pipeline.namespace, "gang")
        except clients.ApiError as exc:
            if exc.not_found:
                return False
            raise
        return bool(again["metadata"]["uid"] != group["metadata"]["uid"])

    await pipeline.eventually(recreated, what="the PodGroup re-created (it is watched)")
    if pipeline.tier == "kube" and scheduler == "volcano":
        await bind_pending_pods(pipeline, "gang")
    await pipeline.wait_for("PyTorchJob", "gang", "Succeeded", timeout=40)

    async def group_deleted() -> bool:
        try:
            await pipeline.client.get(podgroups, pipeline.namespace, "gang")
        except clients.ApiError as exc:
            if exc.not_found:
                return True
            raise
        return False

    await pipeline.eventually(group_deleted, what="the finished job's PodGroup deleted")


async def test_a_finished_jobs_podgroup_is_deleted_by_a_reconciler_that_never_saw_it(
    podgroup_crds: None, pipeline: Pipeline,
) -> None:
    """The issue's finding: a PodGroup was known only to the reconciler that created it; now
    it is watched and hydrated, so a fresh reconciler deletes a finished job's PodGroup."""
    await pipeline.stop("reconciler")
    pipeline.start_reconciler("first", operator=OperatorSettings(gang_scheduler_name="default-scheduler"))
    manifest = job("JAXJob", "pg", {"Worker": (1, "Never")}, "jax")
    annotate(manifest, "Worker", duration="60s")
    await pipeline.submit(manifest)
    await pipeline.wait_for("JAXJob", "pg", "Running")
    await pipeline.client.get(resources.PLUGINS_PODGROUPS, pipeline.namespace, "pg")
    await pipeline.stop("first")
    await pipeline.client.delete(resources.PODS, pipeline.namespace, "pg-worker-0")  # no one re-creates it
    await asyncio.sleep(0.5)
    await patch_run_policy(pipeline, "JAXJob", "pg", {"activeDeadlineSeconds": 1})
    pipeline.start_reconciler("second", operator=OperatorSettings(gang_scheduler_name="default-scheduler"))
    await pipeline.wait_for("JAXJob", "pg", "Failed")

    async def group_deleted() -> bool:
        try:
            await pipeline.client.get(resources.PLUGINS_PODGROUPS, pipeline.namespace, "pg")
        except clients.ApiError as exc:
            return exc.not_found
        return False

    await pipeline.eventually(group_deleted, what="the PodGroup deleted by the second reconciler")


# ---------------------------------------------------------------------------
# Across a reconciler SIGKILL between deciding and acting
# ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def killing_on(
    pipeline: Pipeline, process: subprocess.Popen[str], job_key: str,
    when: Callable[[records.Decision], bool],
) -> AsyncIterator[asyncio.Future[records.Decision]]:
    """SIGKILL ``process`` the moment a Decision of ``job_key`` matching ``when`` is in the topic.

    The record is what the reconciler writes once it decided (before creating a
    child, after each delete, before its offset is committed); deletes are slowed
    to 0.4 s each (through the services' faulting proxy), so the kill lands before the rest of the
    decision is carried out."""
    pipeline.set_faults("latency=delete:400ms")
    killed: asyncio.Future[records.Decision] = asyncio.get_running_loop().create_future()
    consumer = AIOKafkaConsumer(**client_options(pipeline.kafka), group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    tp = TopicPartition(pipeline.kafka.jobs_topic, reading.partition_for_key(job_key, pipeline.kafka.partitions))
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)

    async def tail() -> None:
        while True:
            batch = await consumer.getmany(tp, timeout_ms=20)
            for message in batch.get(tp, []):
                if message.key != job_key.encode():
                    continue
                record = records.decode(message.value)
                if isinstance(record, records.Decision) and record.source == "reconciler" and when(record):
                    process.send_signal(signal.SIGKILL)
                    killed.set_result(record)
                    return

    task = asyncio.ensure_future(tail())
    try:
        yield killed
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await consumer.stop()
        pipeline.set_faults("")


async def successor_acted(pipeline: Pipeline, job_key: str, first: str, action: str) -> bool:
    history = await reading.read_history(pipeline.kafka, job_key)
    return any(isinstance(r, records.Decision) and r.action == action and r.source == "reconciler"
               and r.instance != first for r in history)


def is_delete(reason: str) -> Callable[[records.Decision], bool]:
    return lambda r: r.action == "child_deleted" and r.reason == reason


CRASH_ROWS = [
    pytest.param("cleanup", id="clean-pod-policy-all-after-succeeded"),
    pytest.param("suspend", id="suspend"),
    pytest.param("ttl", id="ttl-after-finished"),
    pytest.param("backoff", id="backoff-limit"),
]


@pytest.mark.parametrize("row", CRASH_ROWS)
async def test_run_policy_completes_after_a_reconciler_killed_between_deciding_and_acting(
    pipeline: Pipeline, row: str,
) -> None:
    await pipeline.stop("reconciler")
    first = await start_reconciler_process(pipeline)
    try:
        if row == "cleanup":
            kind, name = "TFJob", "crash-cleanup"
            manifest = job("TFJob", name, {"Chief": (1, "Never"), "PS": (2, "Never")}, "tensorflow",
                           runPolicy={"cleanPodPolicy": "All"})
            annotate(manifest, "Chief", duration="1s")
            annotate(manifest, "PS", duration="60s")
            async with killing_on(pipeline, first, pipeline.key(kind, name), is_delete("clean-pod-policy")) as killed:
                await pipeline.submit(manifest)
                await pipeline.wait_for(kind, name, "Succeeded", timeout=30)
                decided = await asyncio.wait_for(killed, 20)
            async with killed_and_replaced(first, lambda: start_reconciler_process(pipeline)):
                await children_are(pipeline, name, set(), timeout=30)
                action = "child_deleted"
        elif row == "suspend":
            kind, name = "PyTorchJob", "crash-suspend"
            manifest = job(kind, name, {"Master": (1, "Never"), "Worker": (2, "Never")}, "pytorch")
            annotate(manifest, "Master", duration="60s")
            annotate(manifest, "Worker", duration="60s")
            await pipeline.submit(manifest)
            await pipeline.wait_for(kind, name, "Running", timeout=30)
            async with killing_on(pipeline, first, pipeline.key(kind, name), is_delete("suspend")) as killed:
                await patch_run_policy(pipeline, kind, name, {"suspend": True})
                decided = await asyncio.wait_for(killed, 20)
            async with killed_and_replaced(first, lambda: start_reconciler_process(pipeline)):
                await children_are(pipeline, name, set(), timeout=30)
                await pipeline.wait_for(kind, name, "Suspended")
                action = "child_deleted"
        elif row == "ttl":
            kind, name = "JAXJob", "crash-ttl"
            manifest = job(kind, name, {"Worker": (1, "Never")}, "jax", runPolicy={"ttlSecondsAfterFinished": 1})
            annotate(manifest, "Worker", duration="0.5s")
            key = pipeline.key(kind, name)
            async with killing_on(pipeline, first, key, lambda r: r.action == "timer_fired") as killed:
                await pipeline.submit(manifest)
                decided = await asyncio.wait_for(killed, 30)
            async with killed_and_replaced(first, lambda: start_reconciler_process(pipeline)):
                await pipeline.eventually(lambda: gone(pipeline, kind, name), timeout=40, what="the job deleted")
                action = "job_deleted_ttl"
        else:
            kind, name = "JAXJob", "crash-backoff"
            manifest = job(kind, name, {"Worker": (1, "ExitCode")}, "jax", runPolicy={"backoffLimit": 2})
            annotate(manifest, "Worker", exit_code="137", duration="0.3s")
            key = pipeline.key(kind, name)
            async with killing_on(pipeline, first, key, lambda r: r.action == "replica_restarted") as killed:
                await pipeline.submit(manifest)
                decided = await asyncio.wait_for(killed, 30)
            async with killed_and_replaced(first, lambda: start_reconciler_process(pipeline)):
                failed = await pipeline.wait_for(kind, name, "Failed", timeout=45)
                last = condition(failed, "Failed")
                assert last is not None and last["message"] == BACKOFF_MESSAGE.format(name)
                # A kill between counting and deleting over-counts by one, never under-counts.
                assert failed["metadata"]["annotations"]["kto.dev/replica-restarts"] in ("2", "3")
                action = "child_deleted"
    finally:
        if first.poll() is None:
            first.kill()
    if row in ("cleanup", "suspend", "backoff"):
        # The kill landed mid-decision: the successor carried out the rest.
        assert await successor_acted(pipeline, pipeline.key(kind, name), decided.instance, action)
