"""The watcher against the local cluster (sim/) and the real broker (Tansu); its relist after a 410
on both tiers (sim/ and kube-apiserver), the 410 answered by the faulting proxy in front of each.

Records are read back from the jobs topic with a ``group_id=None`` consumer, so
every assertion is about what a reconciler or status worker would receive.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pathlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from kto import cli
from kto.commands import watcher as watcher_command
from services.watcher import running, watching
from services.watcher.settings import WatcherSettings
from shared import metrics, tracing
from shared.api import projections
from shared.bus import producing, records
from shared.bus.settings import KafkaSettings, client_options
from shared.kube import clients, resources
from sim import cluster as sim_cluster
from sim.settings import SimSettings
from tests.fixtures import faulted as faulted_fixture
from tests.fixtures import pipeline as pipeline_fixture

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER = "kto-1"
NS = "default"
JOB_LABELS = {"training.kubeflow.org/operator-name": "pytorchjob-controller"}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


# --- the cluster, the client, the records -------------------------------------------------------


@pytest.fixture(autouse=True, scope="module")
def tracer_provider() -> None:
    """A real tracer provider (spans not exported), as ``kto watcher`` installs one."""
    tracing.configure("kto-watcher-test", "test", environ={})


@pytest.fixture
async def cluster(tmp_path: pathlib.Path) -> AsyncIterator[sim_cluster.Cluster]:
    settings = SimSettings(kubeconfig=tmp_path / "kubeconfig", context=CLUSTER, nodes=1, pod_duration=60.0)
    async with sim_cluster.Cluster(settings) as running_cluster:
        yield running_cluster


@pytest.fixture
async def client(cluster: sim_cluster.Cluster) -> AsyncIterator[clients.KubeClient]:
    async with await clients.KubeClient.connect(cluster.kubeconfig) as connected:
        for path in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
            await connected.create(resources.CRDS, None, yaml.safe_load(path.read_text()))
        yield connected


LONG_LEASE = 10.0
"""Seconds of a watcher's lease in the tests that are not about the lease."""


def settings_for(cluster: sim_cluster.Cluster, identity: str = "w1", **overrides: Any) -> WatcherSettings:
    """A watcher's settings; its lease is long (10 s) unless a test of the lease sets it: a watcher that
    misses a renewal on a loaded machine steps down and relists, which a test of what it publishes must
    not see."""
    return WatcherSettings(
        cluster=CLUSTER, kubeconfig=str(cluster.kubeconfig), identity=identity,
        lease_duration=overrides.pop("lease_duration", LONG_LEASE), **overrides,
    )


def pytorchjob(name: str, annotations: dict[str, str] | None = None, namespace: str = NS) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {
            "containers": [{"name": "pytorch", "image": "pytorch:latest"}]}}}}},
    }


def child_labels(job: str) -> dict[str, str]:
    return {**JOB_LABELS, "training.kubeflow.org/job-name": job}


def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def service(name: str, labels: dict[str, str], namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "p", "port": 23456}]}}


def key(name: str, kind: str = "PyTorchJob", namespace: str = NS) -> str:
    return f"{CLUSTER}/{namespace}/{kind}/{name}"


Published = tuple[records.Observation, dict[str, bytes]]


async def read_all(kafka: KafkaSettings) -> list[Published]:
    """Every observation on the jobs topic with its headers, in log order per partition.

    Reads until the broker has nothing more, rather than up to ``end_offsets``:
    Tansu's ListOffsets sometimes answers 0 right after a produce.
    """
    consumer = AIOKafkaConsumer(**client_options(kafka), group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer.topics()
        partitions = [TopicPartition(kafka.jobs_topic, p)
                      for p in sorted(consumer.partitions_for_topic(kafka.jobs_topic) or ())]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        by_partition: dict[int, list[Published]] = {tp.partition: [] for tp in partitions}
        while True:
            batch = await consumer.getmany(*partitions, timeout_ms=300)
            if not any(batch.values()):
                break
            for tp, messages in batch.items():
                for message in messages:
                    record = records.decode(message.value)
                    assert isinstance(record, records.Observation)
                    by_partition[tp.partition].append((record, {k: v for k, v in message.headers}))
        return [found for p in sorted(by_partition) for found in by_partition[p]]
    finally:
        await consumer.stop()


async def observations(kafka: KafkaSettings, job_key: str) -> list[records.Observation]:
    return [r for r, _ in await read_all(kafka) if r.key == job_key]


def events_of(found: list[records.Observation], kind: str | None = None) -> list[tuple[str, str, str]]:
    """(event, object kind, object name) of each record, in order."""
    return [(r.event, r.object_kind, r.object["metadata"]["name"]) for r in found
            if kind is None or r.object_kind == kind]


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def published(kafka: KafkaSettings, job_key: str, *wanted: tuple[str, str, str],
                    timeout: float = 15.0) -> list[records.Observation]:
    """The job's records once each of ``wanted`` (event, kind, name) is among them."""
    found: list[records.Observation] = []

    async def check() -> bool:
        nonlocal found
        found = await observations(kafka, job_key)
        have = set(events_of(found))
        return all(w in have for w in wanted)

    try:
        await eventually(check, timeout, f"{wanted} under {job_key}")
    except AssertionError:
        raise AssertionError(f"wanted {wanted} under {job_key}; published {events_of(found)}") from None
    return found


@contextlib.asynccontextmanager
async def service_task(coro: Awaitable[None], name: str) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.ensure_future(coro)
    task.set_name(name)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# --- publishing -----------------------------------------------------------------------------------


async def test_a_job_and_its_pod_are_published_in_order_under_the_job_key(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    settings = settings_for(cluster)
    async with service_task(running.run(settings, bus), "watcher"):
        job = await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob(
            "mnist", {"kto.dev/traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}))
        created_pod = await client.create(resources.PODS, NS, pod("mnist-master-0", child_labels("mnist")))
        found = await published(bus, key("mnist"), ("ADDED", "PyTorchJob", "mnist"), ("ADDED", "Pod", "mnist-master-0"))
    assert events_of(found)[:2] == [("ADDED", "PyTorchJob", "mnist"), ("ADDED", "Pod", "mnist-master-0")]
    first, second = found[0], found[1]
    assert first.resource_version == job["metadata"]["resourceVersion"]
    # The kubelet may have moved the pod on before the first list: never older than created.
    assert int(second.resource_version) >= int(created_pod["metadata"]["resourceVersion"])
    assert first.object["spec"] == job["spec"]
    for record in found:
        assert (record.source, record.instance) == ("watcher", "w1")
        assert abs(time.time() - record.observed_at.timestamp()) < 60
    # Later changes of the pod (scheduled, started by the kubelet) follow, in resourceVersion order.
    pod_versions = [int(r.resource_version) for r in found if r.object_kind == "Pod"]
    assert pod_versions == sorted(pod_versions)


async def test_a_pod_is_published_as_its_projection_and_the_job_and_its_service_whole(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    async with service_task(running.run(settings_for(cluster), bus), "watcher"):
        job = await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob("lean"))
        full = pod("lean-master-0", child_labels("lean"))
        full["spec"]["containers"][0].update(env=[{"name": "TOKEN", "value": "secret"}], command=["run"])
        full["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
        await client.create(resources.PODS, NS, full)
        await client.create(resources.SERVICES, NS, service("lean-master-0", child_labels("lean")))
        found = await published(bus, key("lean"), ("ADDED", "Pod", "lean-master-0"),
                                ("ADDED", "Service", "lean-master-0"))
    pods = [r for r in found if r.object_kind == "Pod"]
    assert pods and all(r.projection == projections.VERSION for r in pods)
    for record in pods:
        assert record.object["spec"]["containers"] == [{"name": "c"}]
        assert "volumes" not in record.object["spec"] and not record.redacted
        assert record.object["metadata"]["labels"] == child_labels("lean")
    (job_record,) = [r for r in found if r.object_kind == "PyTorchJob"]
    assert job_record.projection == 0 and job_record.object["spec"] == job["spec"]
    (service_record,) = [r for r in found if r.object_kind == "Service"]
    assert service_record.projection == 0 and service_record.object["spec"]["ports"][0]["port"] == 23456


async def test_records_carry_the_trace_of_the_job_annotation(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    async with service_task(running.run(settings_for(cluster), bus), "watcher"):
        await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob(
            "traced", {"kto.dev/traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}))
        await published(bus, key("traced"), ("ADDED", "PyTorchJob", "traced"))
        await client.create(resources.SERVICES, NS, service("traced-master-0", child_labels("traced")))
        await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob("untraced"))
        await published(bus, key("traced"), ("ADDED", "Service", "traced-master-0"))
        await published(bus, key("untraced"), ("ADDED", "PyTorchJob", "untraced"))
    found = await read_all(bus)
    traced = [headers["traceparent"].decode() for record, headers in found if record.key == key("traced")]
    assert traced and all(tp.split("-")[1] == TRACE_ID for tp in traced), traced
    untraced = [headers["traceparent"].decode() for record, headers in found if record.key == key("untraced")]
    assert untraced and all(tp.split("-")[1] != TRACE_ID for tp in untraced)


async def test_objects_of_no_job_are_not_published(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    async with service_task(running.run(settings_for(cluster), bus), "watcher"):
        await client.create(resources.PODS, NS, pod("web", {"app": "web"}))
        await client.create(resources.PODS, NS, pod("stray", {"training.kubeflow.org/job-name": "x",
                                                             "training.kubeflow.org/operator-name": "other"}))
        await client.create(resources.CONFIGMAPS, NS, {"apiVersion": "v1", "kind": "ConfigMap",
                                                        "metadata": {"name": "plain", "namespace": NS}})
        # A related pod created after them: once it is out, the others were seen (or filtered).
        await client.create(resources.PODS, NS, pod("late-master-0", child_labels("late")))
        await published(bus, key("late"), ("ADDED", "Pod", "late-master-0"))
    names = {record.object["metadata"]["name"] for record, _ in await read_all(bus)}
    assert names == {"late-master-0"}
    # The label selector is applied by the API server, not by the watcher.
    child_requests = [r for r in cluster.requests if r.get("resource") in ("pods", "services", "configmaps")
                      and r.get("verb") in ("list", "watch")]
    assert child_requests


async def test_deletions_are_published_with_the_last_object(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    async with service_task(running.run(settings_for(cluster), bus), "watcher"):
        await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob("gone"))
        await client.create(resources.SERVICES, NS, service("gone-master-0", child_labels("gone")))
        await published(bus, key("gone"), ("ADDED", "Service", "gone-master-0"))
        await client.delete(resources.SERVICES, NS, "gone-master-0")
        await client.delete(resources.JOB_TYPES["PyTorchJob"], NS, "gone")
        found = await published(bus, key("gone"), ("DELETED", "Service", "gone-master-0"),
                                ("DELETED", "PyTorchJob", "gone"))
    deleted = [r for r in found if r.event == "DELETED"]
    assert [r.object_kind for r in deleted] == ["Service", "PyTorchJob"]
    assert deleted[0].object["spec"]["ports"][0]["port"] == 23456


# --- resume, relist, resync -----------------------------------------------------------------------


async def test_a_watcher_that_runs_again_publishes_what_changed_while_it_was_stopped(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    settings = settings_for(cluster)
    services = resources.SERVICES
    async with producing.Publisher(bus, "watcher", settings.identity) as publisher:
        watcher = watching.Watcher(client, publisher, settings, metrics.ServiceMetrics())
        async with service_task(watcher.run(), "first term"):
            await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob("r"))
            for name in ("r-keep", "r-mod", "r-del"):
                await client.create(services, NS, service(name, child_labels("r")))
            await published(bus, key("r"), *[("ADDED", "Service", n) for n in ("r-keep", "r-mod", "r-del")])
        before = len(await observations(bus, key("r")))

        # While stopped: one created, one modified, one deleted.
        await client.create(services, NS, service("r-new", child_labels("r")))
        await client.patch(services, NS, "r-mod", {"metadata": {"annotations": {"changed": "yes"}}})
        await client.delete(services, NS, "r-del")

        async with service_task(watcher.run(), "second term"):
            found = await published(bus, key("r"), ("ADDED", "Service", "r-new"), ("MODIFIED", "Service", "r-mod"),
                                    ("DELETED", "Service", "r-del"), ("RESYNCED", "Service", "r-keep"),
                                    ("RESYNCED", "PyTorchJob", "r"))
    second_term = found[before:]
    assert sorted(events_of(second_term)) == sorted([
        ("RESYNCED", "PyTorchJob", "r"), ("RESYNCED", "Service", "r-keep"), ("MODIFIED", "Service", "r-mod"),
        ("ADDED", "Service", "r-new"), ("DELETED", "Service", "r-del"),
    ])
    missed = next(r for r in second_term if r.event == "DELETED")
    assert missed.object["metadata"]["name"] == "r-del"  # the last object known


async def test_a_410_relists_and_publishes_only_the_differences(
    faulted: faulted_fixture.Faulted, bus: KafkaSettings,
) -> None:
    ns = faulted.namespace
    settings = WatcherSettings(cluster=CLUSTER, kubeconfig=str(faulted.kubeconfig), context=faulted.context,
                               identity="w1", lease_duration=LONG_LEASE, namespace=ns, lease_namespace=ns,
                               watch_timeout=1)
    services = resources.SERVICES
    async with await clients.KubeClient.connect(faulted.direct, faulted.context) as client:
        await pipeline_fixture.apply_crds(client)  # a fresh sim has none; the real cluster has them
        async with service_task(running.run(settings, bus), "watcher"):
            await client.create(resources.JOB_TYPES["PyTorchJob"], ns, pytorchjob("g", namespace=ns))
            for name in ("g-keep", "g-mod", "g-del"):
                await client.create(services, ns, service(name, child_labels("g"), ns))
            job_key = key("g", namespace=ns)
            await published(bus, job_key, *[("ADDED", "Service", n) for n in ("g-keep", "g-mod", "g-del")])
            before = len(await observations(bus, job_key))
            # The next watch of services waits 4 s, then answers 410: the changes made
            # meanwhile can only be found by the relist.
            faulted.set_faults("latency=watch:4s;gone_rate=1;resources=services")
            await asyncio.sleep(1.5)
            await client.create(services, ns, service("g-new", child_labels("g"), ns))
            await client.patch(services, ns, "g-mod", {"metadata": {"annotations": {"changed": "yes"}}})
            await client.delete(services, ns, "g-del")
            found = await published(bus, job_key, ("ADDED", "Service", "g-new"), ("MODIFIED", "Service", "g-mod"),
                                    ("DELETED", "Service", "g-del"), timeout=20)
            faulted.set_faults("")
    assert sorted(events_of(found[before:])) == sorted([
        ("ADDED", "Service", "g-new"), ("MODIFIED", "Service", "g-mod"), ("DELETED", "Service", "g-del")])
    # Only services are faulted: each 410 the proxy answered was a watch of services.
    assert faulted.injected("gone") >= 1


async def test_live_jobs_are_resynced_periodically(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    async with service_task(running.run(settings_for(cluster, resync_interval=0.5), bus), "watcher"):
        await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob("steady"))
        await client.create(resources.SERVICES, NS, service("steady-master-0", child_labels("steady")))

        async def resynced_twice() -> bool:
            found = await observations(bus, key("steady"))
            return sum(1 for r in found if r.event == "RESYNCED") >= 2

        await eventually(resynced_twice, 10, "two resyncs")
    found = await observations(bus, key("steady"))
    resynced = [r for r in found if r.event == "RESYNCED"]
    assert {r.object_kind for r in resynced} == {"PyTorchJob"}, "only jobs are resynced periodically"
    assert len({r.id for r in resynced}) == len(resynced), "each resync is a record of its own"


# --- leader election ------------------------------------------------------------------------------


async def test_of_two_watchers_only_the_leader_publishes_and_a_standby_takes_over(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    lease_duration = 1.5
    first = asyncio.ensure_future(running.run(settings_for(cluster, "w1", lease_duration=lease_duration), bus))
    await asyncio.sleep(0.5)  # w1 takes the Lease first
    async with service_task(running.run(settings_for(cluster, "w2", lease_duration=lease_duration), bus), "w2"):
        try:
            await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob("one"))
            await published(bus, key("one"), ("ADDED", "PyTorchJob", "one"))
            await asyncio.sleep(1.0)
            assert {r.instance for r in await observations(bus, key("one"))} == {"w1"}
        finally:
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await first
        stopped = time.monotonic()
        # w2 takes over: its full list republishes the live job.
        await eventually(lambda: _published_by(bus, key("one"), "w2"), lease_duration + 5, "takeover by w2")
        assert time.monotonic() - stopped <= lease_duration + 2.5  # promptly (slack for a loaded CI machine)
        await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob("two"))
        found = await published(bus, key("two"), ("ADDED", "PyTorchJob", "two"))
        assert {r.instance for r in found} == {"w2"}
    lease = await client.get(resources.LEASES, "default", f"kto-watcher-{CLUSTER}")
    assert lease["spec"]["leaseTransitions"] >= 1


async def _published_by(kafka: KafkaSettings, job_key: str, instance: str) -> bool:
    return any(r.instance == instance for r in await observations(kafka, job_key))


# --- configuration errors -------------------------------------------------------------------------


async def test_a_kubeconfig_without_the_context_is_a_config_error(cluster: sim_cluster.Cluster) -> None:
    with pytest.raises(running.ClusterConfigError, match="nope"):
        await running.connect(settings_for(cluster, context="nope"))


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["--cluster", "c", "--kubeconfig", "/no/such/file"], "no such file", id="missing kubeconfig"),
    pytest.param(["--cluster", "a/b"], "cluster name", id="cluster name with a slash"),
    pytest.param(["--cluster", "c", "--resync-interval", "0"], "resync interval", id="zero resync interval"),
])
def test_the_command_reports_bad_input_as_a_user_error(argv: list[str], message: str) -> None:
    parser = argparse.ArgumentParser()
    watcher_command.add_arguments(parser)
    with pytest.raises(cli.UserError, match=message):
        watcher_command.run(parser.parse_args(argv))


# --- broker outage --------------------------------------------------------------------------------


async def test_when_the_broker_comes_back_empty_everything_is_republished(
    cluster: sim_cluster.Cluster, client: clients.KubeClient,
) -> None:
    from realparts import tansu

    base = KafkaSettings(partitions=2, client_id="kto-outage-test", linger_ms=1)
    embedded = tansu.EmbeddedBroker(settings=base)
    await embedded.start()
    kafka = embedded.settings
    port = int(kafka.bootstrap.rsplit(":", 1)[1])
    try:
        # A resync every 5 s (30 s by default): its publish is what first meets the empty broker.
        async with service_task(running.run(settings_for(cluster, resync_interval=5.0), kafka), "watcher"):
            await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob("o"))
            await published(kafka, key("o"), ("ADDED", "PyTorchJob", "o"))
            await embedded.stop()
            # Changed while the broker is away: the watcher waits, it does not skip.
            await client.create(resources.SERVICES, NS, service("o-master-0", child_labels("o")))
            await asyncio.sleep(1.0)
            embedded = tansu.EmbeddedBroker(port, settings=base)
            await embedded.start()  # in memory: it comes back empty
            # The job again (RESYNCED: the new broker lost its ADDED) and the
            # service created during the outage.
            await published(kafka, key("o"), ("RESYNCED", "PyTorchJob", "o"),
                            ("ADDED", "Service", "o-master-0"), timeout=120)
    finally:
        await embedded.stop()


# --- the command as a process ---------------------------------------------------------------------


async def _kto_watcher(kafka: KafkaSettings, *args: str) -> asyncio.subprocess.Process:
    import os
    import sys

    env = {**os.environ, **kafka.to_env(), "KTO_LOG_LEVEL": "INFO"}
    env.pop("KTO_TRACES", None)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kto", "watcher", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def test_kto_watcher_publishes_until_sigterm_and_exits_cleanly(
    cluster: sim_cluster.Cluster, client: clients.KubeClient, bus: KafkaSettings,
) -> None:
    import signal

    process = await _kto_watcher(bus, "--cluster", CLUSTER, "--kubeconfig", str(cluster.kubeconfig),
                                 "--lease-duration", "3")
    try:
        await client.create(resources.JOB_TYPES["PyTorchJob"], NS, pytorchjob("cli"))
        found = await published(bus, key("cli"), ("ADDED", "PyTorchJob", "cli"), timeout=30)
        assert found[0].instance.count("-") >= 2  # hostname-pid-random
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 20)
    log_text = stderr.decode()
    assert process.returncode == 0, log_text
    assert "Traceback" not in log_text
    assert "is now the active watcher" in log_text and "released lease" in log_text
    ready = stdout.decode().split()
    assert ready[:1] == ["ready"] and ready[2:] == [CLUSTER], ready


async def test_kto_watcher_with_an_unknown_context_says_so_in_one_line(
    cluster: sim_cluster.Cluster, bus: KafkaSettings,
) -> None:
    process = await _kto_watcher(bus, "--cluster", CLUSTER, "--kubeconfig", str(cluster.kubeconfig),
                                 "--context", "nope")
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    lines = stderr.decode().strip().splitlines()
    assert process.returncode == 2
    assert len(lines) == 1 and lines[0].startswith("kto watcher: error:") and "nope" in lines[0], lines
