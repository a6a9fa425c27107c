"""deploy/ for a real cluster: every overlay builds with kustomize (the one built into kubectl), is
accepted by the real kube-apiserver (``kubectl apply --dry-run=server``), and gives each service
exactly the RBAC its code calls for.

What each service calls is computed here from the code (the watched types, hydration's lists and
gets, the children kinds, the Roles the reconciler creates...) and compared with the ClusterRoles
and Roles of deploy/, rule for rule, so the two cannot drift. On the real API server,
``kubectl auth can-i --as=system:serviceaccount:kto-system:<sa>`` then answers yes to every one of
them and no to a list of what no service may do; and the hub's services, acting as the member's
identities through the kubeconfigs ``kubeconfigs.sh`` builds, run jobs to the end with no request
refused and no write beyond what was computed (the API server's audit log).

Strimzi's CRDs (KafkaTopic, KafkaUser, Kafka, KafkaNodePool), which the dry run needs, are made from
Strimzi's artifacts on Maven Central (realparts/strimzi.py), at parts time, into the machine's cache.
The bus's manifests are checked against what kto runs under: each service logs in as its own
KafkaUser, whose ACLs are the table the real-tier tests run the services under (realparts/kafka.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import os
import pathlib
import re
import socket
import ssl
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import pytest
import yaml

from kto import cli
from realparts import caching, certifying, kube, strimzi
from realparts import kafka as real_kafka_part
from services.watcher import watching
from services.webhook import registering
from shared.api import elastic, jobs
from shared.bus import topics
from shared.bus import settings as bus_settings
from shared.core import deciding as core_deciding
from shared.core.elastic import planning as elastic_planning
from shared.core.frameworks import mpi
from shared.kube import clients, hydrating, resources
from tests.deploy import test_probes as probes
from tests.fixtures import tiers
from tests.fixtures.broker import topics_of_this_test

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBECTL = pathlib.Path(sys.executable).parent / "kubectl"
NAMESPACE = "kto-system"

OVERLAYS = ("single-cluster", "multi-cluster/member", "multi-cluster/hub")
SERVICES = ("watcher", "reconciler", "status")
"""The services with RBAC of their own in every install; the webhook's one read is tested apart."""

Rule = tuple[str, str, str, str]
"""(scope, API group, resource[/subresource], verb); scope: "cluster" (a ClusterRole bound
cluster-wide) or a namespace (a Role there)."""


# -- building -------------------------------------------------------------------------


def kubectl(*args: str, input: str | None = None, check: bool = True, kubeconfig: pathlib.Path | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [str(KUBECTL), *(["--kubeconfig", str(kubeconfig)] if kubeconfig else []), *args]
    done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HOME": os.environ.get("HOME", "/root")})
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}{done.stdout}")
    return done


@functools.cache
def built(overlay: str) -> str:
    """``kubectl kustomize deploy/overlays/<overlay>``."""
    return kubectl("kustomize", str(DEPLOY / "overlays" / overlay)).stdout


def objects(overlay: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(built(overlay)) if d]


def of_kind(overlay: str, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects(overlay) if o["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, deployment["metadata"]["name"]
    return dict(containers[0])


def flag(args: list[str], name: str) -> str | None:
    for arg in args:
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return None


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_builds_with_kustomize(overlay: str) -> None:
    kinds = {o["kind"] for o in objects(overlay)}
    assert "Deployment" in kinds or overlay.endswith("member")
    assert all(o["metadata"].get("name") for o in objects(overlay))


def test_the_crds_kustomization_lists_every_crd_file() -> None:
    listed = yaml.safe_load((DEPLOY / "crds" / "Kustomization").read_text())["resources"]
    assert listed == sorted(p.name for p in (DEPLOY / "crds").glob("*.yaml"))
    crds = of_kind("single-cluster", "CustomResourceDefinition")
    assert set(crds) == {yaml.safe_load((DEPLOY / "crds" / name).read_text())["metadata"]["name"] for name in listed}


def test_the_single_cluster_overlay_runs_each_service_replicated_with_probes_and_a_disruption_budget() -> None:
    deployments = of_kind("single-cluster", "Deployment")
    assert set(deployments) == {"kto-watcher", "kto-reconciler", "kto-status", "kto-webhook"}
    budgets = of_kind("single-cluster", "PodDisruptionBudget")
    for name, deployment in deployments.items():
        spec = deployment["spec"]
        assert spec["replicas"] >= 2, name
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items()
        budget = budgets[name]["spec"]
        assert budget["minAvailable"] == 1 and budget["selector"] == spec["selector"], name
        assert budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        pod = spec["template"]["spec"]
        assert pod["serviceAccountName"] == {"kto-status": "kto-status"}.get(name, name)
        assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        main = container(deployment)
        assert main["image"] == f"kto:{project_version()}"
        assert main["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                           "capabilities": {"drop": ["ALL"]}}
        ports = {p["name"]: p["containerPort"] for p in main["ports"]}
        live, ready = main["livenessProbe"]["httpGet"], main["readinessProbe"]["httpGet"]
        assert (live["path"], ready["path"]) == ("/healthz", "/readyz"), name
        assert live["port"] == ready["port"] and ports[live["port"]], name
        assert main["readinessProbe"]["timeoutSeconds"] > 4, "longer than the slowest readiness check (4 s)"
        if name == "kto-webhook":
            assert live.get("scheme") == "HTTPS" and flag(main["args"], "--port") == str(ports[live["port"]])
        else:
            assert flag(main["args"], "--health-port") == str(ports[live["port"]]), name
            assert flag(main["args"], "--metrics-port") == str(ports["metrics"]), name
            assert {"configMapRef": {"name": "kto-kafka"}} in main["envFrom"]
    assert flag(container(deployments["kto-watcher"])["args"], "--lease-namespace") == NAMESPACE


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_command_is_one_kto_parses(overlay: str) -> None:
    """The image's entrypoint is ``kto``: each Deployment's args go through kto's own parser."""
    for name, deployment in of_kind(overlay, "Deployment").items():
        args = [str(a) for a in container(deployment)["args"]]
        assert args[0] in cli.COMMANDS, name
        parsed = cli.build_parser(args).parse_args(args)
        assert parsed.command == args[0]


KAFKA_SERVICES = {"kto-watcher": "watcher", "kto-reconciler": "reconciler", "kto-status": "status"}
"""Deployment (the hub's watchers: its prefix) → the service whose KafkaUser it logs in as."""


def kafka_service(deployment: str) -> str | None:
    return next((s for d, s in KAFKA_SERVICES.items() if deployment == d or deployment.startswith(f"{d}-")), None)


def pod_kafka_settings(overlay: str, deployment: dict[str, Any], tmp_path: pathlib.Path) -> bus_settings.KafkaSettings:
    """The settings a pod of ``deployment`` reads: the ConfigMap and its env, the files it names stood in
    for by files of ``tmp_path`` (a password, a CA's certificate) at the paths its Secrets are mounted."""
    main = container(deployment)
    env = {} if not main.get("envFrom") else dict(of_kind(overlay, "ConfigMap")["kto-kafka"]["data"])
    assert all(list(source) == ["configMapRef"] for source in main.get("envFrom", [])), "one ConfigMap, no Secret"
    env.update({e["name"]: e["value"] for e in main.get("env", []) if "value" in e})
    mounts = {m["mountPath"]: m["name"] for m in main.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    ca = certifying.Authority(tmp_path / "ca", "stand-in cluster CA")
    for name, value in list(env.items()):
        if not name.endswith(("_FILE", "_CAFILE")):
            continue
        directory, _, key = value.rpartition("/")
        secret = volumes[mounts[directory]]["secret"]
        assert [item["path"] for item in secret["items"]] == [key], (name, secret)
        stand_in = tmp_path / secret["secretName"] / key
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_bytes(ca.cert.read_bytes() if name.endswith("_CAFILE") else b"password")
        env[name] = str(stand_in)
    return bus_settings.KafkaSettings.from_env(env)


def test_the_kafka_topics_are_the_ones_kto_makes_with_the_settings_the_services_get(tmp_path: pathlib.Path) -> None:
    for overlay in ("single-cluster", "multi-cluster/hub"):
        deployment = of_kind(overlay, "Deployment")["kto-reconciler"]
        settings = pod_kafka_settings(overlay, deployment, tmp_path / overlay.replace("/", "-"))
        kafka_topics = of_kind(overlay, "KafkaTopic")
        assert set(kafka_topics) == {settings.jobs_topic, settings.dlq_topic}
        for topic in kafka_topics.values():
            assert topic["apiVersion"] == "kafka.strimzi.io/v1"
            assert topic["spec"] == {"partitions": settings.partitions, "replicas": settings.replication_factor,
                                     "config": topics.topic_configs(settings)}
            assert topic["metadata"]["labels"]["strimzi.io/cluster"]
        host = settings.bootstrap.split(":")[0].split(".")
        assert host[0] == f"{topic['metadata']['labels']['strimzi.io/cluster']}-kafka-bootstrap"
        assert host[1] == topic["metadata"]["namespace"], "Strimzi's bootstrap Service is in the topics' namespace"


def strimzi_acls(grant: real_kafka_part.Grant) -> list[dict[str, Any]]:
    """A grant of the real-tier broker as the ACLs of a Strimzi KafkaUser (one entry per resource)."""
    by_resource: dict[tuple[str, str], list[str]] = {}
    names = {3: "Read", 4: "Write", 8: "Describe"}
    for resource_type, name, operation in grant.acls():
        by_resource.setdefault(("topic" if resource_type == 2 else "group", name), []).append(names[operation])
    order = ("Read", "Write", "Describe")
    return [{"resource": {"type": kind, "name": name, "patternType": "literal"},
             "operations": sorted(operations, key=order.index)} for (kind, name), operations in by_resource.items()]


@pytest.mark.parametrize("overlay", ["single-cluster", "multi-cluster/hub"])
def test_each_service_logs_in_as_its_own_kafka_user_allowed_what_the_real_tier_runs_it_under(
    overlay: str, tmp_path: pathlib.Path,
) -> None:
    users = of_kind(overlay, "KafkaUser")
    assert set(users) == set(KAFKA_SERVICES)
    cluster = of_kind("single-cluster", "KafkaTopic")["kto.jobs"]["metadata"]["labels"]["strimzi.io/cluster"]
    deployments = {n: d for n, d in of_kind(overlay, "Deployment").items() if kafka_service(n)}
    assert {kafka_service(n) for n in deployments} == set(KAFKA_SERVICES.values())
    for name, deployment in deployments.items():
        service = kafka_service(name)
        settings = pod_kafka_settings(overlay, deployment, tmp_path / name)
        assert (settings.security_protocol, settings.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512"), name
        user = users[f"kto-{service}"]
        assert settings.sasl_username == user["metadata"]["name"], name
        assert pathlib.Path(str(settings.sasl_password_file)).parent.name == user["metadata"]["name"], \
            "the password file is the user's own Secret's"
        assert user["metadata"]["namespace"] == deployment["metadata"]["namespace"] == NAMESPACE
        assert user["metadata"]["labels"]["strimzi.io/cluster"] == cluster
        assert user["spec"]["authentication"] == {"type": "scram-sha-512"}
        args = [str(a) for a in container(deployment)["args"]]
        group = getattr(cli.build_parser(args).parse_args(args), "group", None)
        groups = {"reconciler_group": group} if service == "reconciler" else {"status_group": group} if group else {}
        grant = {g.principal: g for g in real_kafka_part.kto_grants(settings, **groups)}[f"kto-{service}"]
        assert user["spec"]["authorization"] == {"type": "simple", "acls": strimzi_acls(grant)}, name


def test_the_kafka_cluster_kto_expects_has_the_listener_the_settings_name_and_lets_only_kto_reach_it(
    tmp_path: pathlib.Path,
) -> None:
    made = [d for d in yaml.safe_load_all(kubectl("kustomize", str(DEPLOY / "base" / "bus" / "kafka-cluster")).stdout)
            if d]
    kafka = next(d for d in made if d["kind"] == "Kafka")
    pool = next(d for d in made if d["kind"] == "KafkaNodePool")
    topic = of_kind("single-cluster", "KafkaTopic")["kto.jobs"]
    assert kafka["metadata"]["name"] == pool["metadata"]["labels"]["strimzi.io/cluster"] == \
        topic["metadata"]["labels"]["strimzi.io/cluster"]
    assert kafka["metadata"]["namespace"] == pool["metadata"]["namespace"] == topic["metadata"]["namespace"]
    settings = pod_kafka_settings("single-cluster", of_kind("single-cluster", "Deployment")["kto-watcher"], tmp_path)
    [listener] = kafka["spec"]["kafka"]["listeners"]
    assert settings.bootstrap == f"{kafka['metadata']['name']}-kafka-bootstrap.{kafka['metadata']['namespace']}.svc:" \
                                 f"{listener['port']}"
    assert listener["tls"] is True and listener["authentication"] == {"type": settings.sasl_mechanism.lower()}
    assert kafka["spec"]["kafka"]["authorization"] == {"type": "simple"}
    assert kafka["spec"]["entityOperator"]["userOperator"]["watchedNamespace"] == NAMESPACE
    [peer] = listener["networkPolicyPeers"]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    for overlay in ("single-cluster", "multi-cluster/hub"):
        for name, deployment in of_kind(overlay, "Deployment").items():
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            assert peer["podSelector"]["matchLabels"].items() <= labels.items(), name


def selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    selector = policy["spec"]["podSelector"]
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_every_kto_pod_is_reachable_only_on_the_ports_it_serves() -> None:
    policies = of_kind("single-cluster", "NetworkPolicy")
    assert set(policies) == {"kto-webhook", "kto-services"}
    for name, deployment in of_kind("single-cluster", "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        [policy] = [p for p in policies.values() if selects(p, labels)]
        assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"] == NAMESPACE
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        [rule] = policy["spec"]["ingress"]
        assert "from" not in rule, "pinned to the API server's addresses only in an overlay (docs/bus.md)"
        served = {p["containerPort"] for p in container(deployment)["ports"]}
        assert {(p["port"], p["protocol"]) for p in rule["ports"]} == {(port, "TCP") for port in served}, name


def test_the_webhook_configurations_are_those_kto_registers_pointing_at_the_service() -> None:
    expected = registering.configurations("https://kto-webhook.kto-system.svc", b"ca")
    service = of_kind("single-cluster", "Service")["kto-webhook"]
    port = service["spec"]["ports"][0]["port"]
    for configuration in expected:
        found = of_kind("single-cluster", configuration["kind"])[configuration["metadata"]["name"]]
        assert found["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/kto-webhook"}
        for hook in configuration["webhooks"]:
            path = hook["clientConfig"]["url"].removeprefix("https://kto-webhook.kto-system.svc")
            hook["clientConfig"] = {"service": {"name": "kto-webhook", "namespace": NAMESPACE, "path": path,
                                                "port": port}}
        assert found["webhooks"] == configuration["webhooks"]
    webhook = container(of_kind("single-cluster", "Deployment")["kto-webhook"])
    assert service["spec"]["ports"][0]["targetPort"] == "https" and flag(webhook["args"], "--port") == "9443"
    mounts = {m["name"]: m["mountPath"] for m in webhook["volumeMounts"]}
    volumes = of_kind("single-cluster", "Deployment")["kto-webhook"]["spec"]["template"]["spec"]["volumes"]
    assert volumes == [{"name": "tls", "secret": {"secretName": "kto-webhook-tls"}}]
    assert flag(webhook["args"], "--tls-cert-file") == f"{mounts['tls']}/tls.crt"
    assert flag(webhook["args"], "--tls-private-key-file") == f"{mounts['tls']}/tls.key"


def test_the_cert_manager_component_makes_the_secret_the_webhook_serves_for_the_service_name(tmp_path: pathlib.Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(DEPLOY / "overlays" / "single-cluster", tmp_path)],
        "components": [os.path.relpath(DEPLOY / "components" / "cert-manager", tmp_path)],
    }))
    made = [d for d in yaml.safe_load_all(kubectl("kustomize", str(tmp_path)).stdout) if d]
    certificate = next(d for d in made if d["kind"] == "Certificate")
    assert certificate["spec"]["secretName"] == "kto-webhook-tls"
    assert "kto-webhook.kto-system.svc" in certificate["spec"]["dnsNames"]
    assert f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}" == f"{NAMESPACE}/kto-webhook"


def test_the_hub_runs_a_watcher_per_member_and_workers_reaching_every_member_through_kubeconfigs() -> None:
    hub = objects("multi-cluster/hub")
    assert not [o for o in hub if "Role" in o["kind"] or o["kind"] == "CustomResourceDefinition"], \
        "the hub's own API server is not called: no RBAC, no CRDs"
    accounts = of_kind("multi-cluster/hub", "ServiceAccount")
    assert set(accounts) == {f"kto-{s}" for s in SERVICES}
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    deployments = of_kind("multi-cluster/hub", "Deployment")
    watchers = {n: d for n, d in deployments.items() if n.startswith("kto-watcher-")}
    assert set(watchers) == {"kto-watcher-east", "kto-watcher-west"}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        args = container(deployment)["args"]
        assert pod["automountServiceAccountToken"] is False
        service = "watcher" if name in watchers else name.removeprefix("kto-")
        secret = {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}["clusters"]
        assert secret == f"kto-{service}-kubeconfig", name
        mount = {m["name"]: m["mountPath"] for m in container(deployment)["volumeMounts"]}["clusters"]
        assert flag(args, "--kubeconfig") == f"{mount}/config", name
        if name in watchers:
            cluster = name.removeprefix("kto-watcher-")
            assert flag(args, "--cluster") == flag(args, "--context") == cluster
            assert flag(args, "--lease-namespace") == NAMESPACE
            assert deployment["spec"]["selector"]["matchLabels"]["kto.dev/cluster"] == cluster
            budget = of_kind("multi-cluster/hub", "PodDisruptionBudget")[name]
            assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    member = of_kind("multi-cluster/member", "Secret")
    assert {s["metadata"]["annotations"]["kubernetes.io/service-account.name"] for s in member.values()} == \
        {f"kto-{s}" for s in SERVICES}
    assert all(s["type"] == "kubernetes.io/service-account-token" for s in member.values())
    assert "Deployment" not in {o["kind"] for o in objects("multi-cluster/member") if
                                o["metadata"]["name"] != "kto-webhook"}


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_the_dockerfile_installs_the_project_on_python_311_slim_without_torch() -> None:
    text = (ROOT / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in text.splitlines() if line and not line.startswith(("#", " "))]
    assert instructions[0] == ["FROM", "python:3.11-slim"]
    copied = {part for op, rest in instructions if op == "COPY" for part in rest.split()[:-1]}
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in packages} <= copied, "every package the project installs is in the image"
    assert all((ROOT / path).exists() for path in copied)
    assert ["RUN", "pip install . && rm -rf /src"] in instructions, "the project itself, none of its extras"
    assert not [rest for _, rest in instructions if "torch" in rest]
    assert ["ENTRYPOINT", '["kto"]'] in instructions
    user = next(rest for op, rest in instructions if op == "USER")
    for name, deployment in of_kind("single-cluster", "Deployment").items():
        context = deployment["spec"]["template"]["spec"]["securityContext"]
        assert f"{context['runAsUser']}:{context['runAsGroup']}" == user, name


# -- what the code calls ----------------------------------------------------------------


def _rules(scope: str, rt: resources.ResourceType, *verbs: str, subresource: str = "") -> set[Rule]:
    resource = f"{rt.plural}/{subresource}" if subresource else rt.plural
    return {(scope, rt.group, resource, verb) for verb in verbs}


def _sample_mpi_job() -> jobs.Job:
    template = {"spec": {"containers": [{"name": "mpi", "image": "mpi"}]}}
    return jobs.load({"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "m", "namespace": "n"},
                      "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": template},
                                                   "Worker": {"replicas": 2, "template": template}}}})


def _sample_training_job() -> elastic.TrainingJob:
    document = yaml.safe_load((ROOT / "examples" / "et-operator" / "training_job.yaml").read_text())
    return elastic.load_training_job(document)


def _granted_by(role: dict[str, Any]) -> set[Rule]:
    """What a Role the reconciler creates grants: Kubernetes lets it create the Role only if it
    holds all of that itself (rules narrowed by resourceNames need the unnarrowed rule)."""
    return {("cluster", group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


DELETED_KINDS = {"Pod", "Service", "PodGroup", "HorizontalPodAutoscaler", "Job"}
"""The children a decision deletes: pods and Services (shared/core/deciding.py, the elastic
core's Pass.delete_workers and delete_launcher, mpi_v2's scale-down and cleanup), PodGroups and
the elastic HPA (reconciling._children_to_drop, mpi_v2's gang cleanup), a JobSet's Jobs (a restart's,
a finished JobSet's active ones: shared/core/jobsets/deciding.py). The others (ConfigMaps,
Secrets, ServiceAccounts, Roles, RoleBindings, launcher Jobs) go with the job, by garbage collection."""


def needed(service: str) -> set[Rule]:
    """Every (scope, group, resource, verb) the service's code calls, from the code's own tables."""
    found: set[Rule] = set()
    if service == "watcher":
        for rt in watching.WATCHED_TYPES:  # list, then watch from its resourceVersion
            found |= _rules("cluster", rt, "list", "watch")
        found |= _rules(NAMESPACE, resources.LEASES, "get", "create", "update")  # leasing: get, create, replace
        return found
    v1_kinds = [resources.JOB_TYPES[kind] for kind in jobs.KINDS]
    if service == "status":
        for kind in jobs.KINDS:  # hydrating.hydrate(pods_only=True): GET the job, LIST pods (and launcher Jobs)
            found |= _rules("cluster", resources.JOB_TYPES[kind], "get")
            found |= {("cluster", rt.group, rt.plural, "list")
                      for rt, _ in hydrating.child_types(kind, pods_only=True)}
        for rt in v1_kinds:  # the only writer of their status: PUT <kind>/status
            found |= _rules("cluster", rt, "update", subresource="status")
        found |= _rules("cluster", resources.EVENTS, "create", "patch")  # recording.Recorder
        for rt in resources.JOB_TYPES.values():  # aggregating._queue_events: the job Kueue keeps waiting
            found |= _rules("cluster", rt, "get")
        return found
    if service == "webhook":  # serving.Readers: the runtime a TrainJob names, as upstream's webhook reads it
        return set().union(*(_rules("cluster", rt, "get") for rt in resources.RUNTIME_TYPES.values()))
    assert service == "reconciler"
    for kind, job_type in resources.JOB_TYPES.items():  # hydrating.hydrate: GET the job, its children
        found |= _rules("cluster", job_type, "get")
        for podgroups in (None, resources.VOLCANO_PODGROUPS, resources.PLUGINS_PODGROUPS):
            for rt, label in hydrating.child_types(kind, podgroups=podgroups):
                found |= _rules("cluster", rt, "get" if hydrating.reads_by_name(label) else "list")
    for rt in resources.CHILD_TYPES:  # decisions create children of every kind, delete only some
        found |= _rules("cluster", rt, "create", *(["delete"] if rt.kind in DELETED_KINDS else []))
    updated = {kind for kind in core_deciding.UPDATABLE_KINDS}  # v1 updates (PUT)
    updated |= {"Service", "ConfigMap", "Secret", "PodGroup", "Job"}  # mpi_v2/deciding.py _get_or_create, launcher
    for rt in resources.CHILD_TYPES:
        if rt.kind in updated:
            found |= _rules("cluster", rt, "update")
    found |= _rules("cluster", resources.BATCH_JOBS, "update", subresource="status")  # mpi_v2 child_writes (before_update)
    for rt in v1_kinds:  # restart count and failure verdict (merge patch), TTL delete
        found |= _rules("cluster", rt, "patch", "delete")
    found |= _rules("cluster", resources.TRAININGJOBS, "update", subresource="status")
    # A TrainJob's: its runtime read by name, its JobSet made, brought to the plan while suspended
    # and deleted past the deadline (shared/core/trainer/deciding.py), its status written.
    for rt in resources.RUNTIME_TYPES.values():
        found |= _rules("cluster", rt, "get")
    found |= _rules("cluster", resources.JOBSETS, "create", "update", "delete")
    found |= _rules("cluster", resources.TRAINJOBS, "update", subresource="status")
    # shared/core/jobsets: the JobSet's status PUT with its children, its deletion after its TTL
    found |= _rules("cluster", resources.JOBSETS, "delete") | _rules("cluster", resources.JOBSETS, "update",
                                                                     subresource="status")
    for rt in resources.SCALER_TYPES.values():  # hydration lists them; ownerReferences patched; status PUT
        found |= _rules("cluster", rt, "list", "patch") | _rules("cluster", rt, "update", subresource="status")
    # KubeClient.exec into a TrainingJob's launcher: a WebSocket GET, which the API server
    # (1.35 and later) authorizes as get and create of pods/exec.
    found |= _rules("cluster", resources.PODS, "create", "get", subresource="exec")
    found |= _rules("cluster", resources.EVENTS, "create", "patch")
    found |= _granted_by(mpi.desired_role(_sample_mpi_job()))
    found |= _granted_by(elastic_planning.role(_sample_training_job(), ["w"]))
    return found


def rbac_of(overlay: str, service: str) -> set[Rule]:
    """The rules deploy/ binds to kto-<service>, expanded (no wildcards allowed)."""
    subject = {"kind": "ServiceAccount", "name": f"kto-{service}", "namespace": NAMESPACE}
    found: set[Rule] = set()
    everything = objects(overlay)
    for binding in everything:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or subject not in binding["subjects"]:
            continue
        ref = binding["roleRef"]
        role = next(o for o in everything if o["kind"] == ref["kind"] and o["metadata"]["name"] == ref["name"])
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        for rule in role["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), rule
                        found.add((scope, group, resource, verb))
    return found


@pytest.mark.parametrize("overlay", ["single-cluster", "multi-cluster/member"])
@pytest.mark.parametrize("service", SERVICES)
def test_each_service_is_granted_exactly_what_its_code_calls(overlay: str, service: str) -> None:
    granted, wanted = rbac_of(overlay, service), needed(service)
    assert not wanted - granted, f"kto-{service} lacks: {sorted(wanted - granted)}"
    assert not granted - wanted, f"kto-{service} is granted more than its code calls: {sorted(granted - wanted)}"


@pytest.mark.parametrize("overlay", ["single-cluster", "multi-cluster/member"])
def test_the_webhook_is_granted_only_the_runtime_reads_its_code_makes(overlay: str) -> None:
    assert rbac_of(overlay, "webhook") == needed("webhook")
    accounts = of_kind(overlay, "ServiceAccount")
    assert accounts["kto-webhook"]["automountServiceAccountToken"] is True


def test_the_namespaced_install_grants_the_webhook_nothing() -> None:
    """A ClusterTrainingRuntime is cluster-scoped: there the webhook leaves the runtime checks to the reconciler."""
    assert not rbac_of("namespaced", "webhook")


# -- on the real API server -----------------------------------------------------------------


@dataclasses.dataclass
class Installed:
    """The real cluster with Strimzi's CRDs and kto's namespaces, accounts and RBAC applied."""

    cluster: tiers.RealCluster

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl("--context", tiers.CONTEXT, *args, input=input, check=check, kubeconfig=self.cluster.kubeconfig)


RBAC_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Secret"}
"""What is applied for real (the rest is only dry-run: webhook configurations would refuse other
tests' jobs while no webhook runs, and Deployments would start pods)."""


@pytest.fixture(scope="module")
def installed(real_cluster: tiers.RealCluster) -> Iterator[Installed]:
    try:
        crds = strimzi.ensure_crds()
    except caching.PartError as exc:
        tiers.unavailable("Strimzi's CRDs", str(exc))
    setup = Installed(real_cluster)
    for crd in crds.values():  # server-side: the Kafka CRD is too large for kubectl's last-applied annotation
        setup.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    names = [f"crd/{crd.name.removesuffix('.yaml')}" for crd in crds.values()]
    deadline = time.monotonic() + 60
    # kubectl wait fails at once on a CRD the API server has given no status yet: ask again.
    while setup.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names, check=False).returncode:
        assert time.monotonic() < deadline, f"{names} not Established within 60s"
        time.sleep(0.5)
    namespaces = {t["metadata"]["namespace"] for t in of_kind("single-cluster", "KafkaTopic").values()}
    for namespace in namespaces:  # Strimzi's Kafka cluster's own namespace: not deploy/'s to make
        setup.kubectl("create", "namespace", namespace, check=False)
    applied = [o for o in objects("multi-cluster/member") if o["kind"] in RBAC_KINDS]
    setup.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(applied))
    yield setup


def test_the_kafka_cluster_kto_expects_is_accepted_by_the_real_api_server(installed: Installed) -> None:
    done = installed.kubectl("apply", "--dry-run=server", "-k", str(DEPLOY / "base" / "bus" / "kafka-cluster"))
    assert done.stdout.split() == ["kafka.kafka.strimzi.io/kto", "created", "(server", "dry", "run)",
                                   "kafkanodepool.kafka.strimzi.io/combined", "created", "(server", "dry", "run)"]
    assert done.stderr == ""


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_is_accepted_by_the_real_api_server(installed: Installed, overlay: str) -> None:
    done = installed.kubectl("apply", "--dry-run=server", "-f", "-", input=built(overlay))
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(objects(overlay)), done.stdout
    assert all(line.endswith("(server dry run)") for line in lines), done.stdout
    # The session's cluster got the CRDs and Trainer's public ConfigMap by POST (tests/fixtures/tiers.py,
    # pipeline.py), not by kubectl apply, which says so once per object; any other warning (a deprecated
    # field, a Pod Security warning) fails.
    warnings = [line for line in done.stderr.strip().splitlines() if not re.fullmatch(
        r"Warning: resource (customresourcedefinitions/\S+|configmaps/kubeflow-trainer-public) is missing the "
        r"kubectl.kubernetes.io/"
        r"last-applied-configuration annotation .*", line)]
    assert not warnings, done.stderr


def account(service: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:kto-{service}"


def can_i_list(installed: Installed, who: str, namespace: str) -> set[tuple[str, str, str]]:
    """``kubectl auth can-i --list``: (group, resource, verb) ``who`` may use in ``namespace``."""
    out = installed.kubectl("auth", "can-i", "--list", f"--as={who}", "-n", namespace).stdout
    found: set[tuple[str, str, str]] = set()
    for line in out.splitlines()[1:]:
        match = re.match(r"^(\S+)\s+\[[^\]]*\]\s+\[[^\]]*\]\s+\[([^\]]*)\]", line)
        if match is None:
            continue  # a non-resource URL line
        name, verbs = match.groups()
        resource, _, group = name.partition(".")
        sub = ""
        if "/" in group:
            group, sub = group.split("/", 1)
        elif "/" in resource:
            resource, sub = resource.split("/", 1)
        for verb in verbs.split():
            found.add((group, f"{resource}/{sub}" if sub else resource, verb))
    return found


@pytest.mark.parametrize("service", [*SERVICES, "webhook"])
def test_kubectl_auth_can_i_lists_for_each_account_exactly_what_its_code_calls(
    installed: Installed, service: str,
) -> None:
    everyone = can_i_list(installed, account("nobody"), "default")  # bound to nothing: what every account has
    assert {r for _, r, _ in everyone} <= {"selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews",
                                           "clustertrustbundles"}, everyone  # system:basic-user and friends
    wanted = needed(service)
    for namespace in ("default", NAMESPACE):
        listed = can_i_list(installed, account(service), namespace) - everyone
        expected = {(g, r, v) for scope, g, r, v in wanted if scope in ("cluster", namespace)}
        assert listed == expected, (f"kto-{service} in {namespace}: missing {sorted(expected - listed)}, "
                                    f"beyond {sorted(listed - expected)}")


def can_i(installed: Installed, who: str, verb: str, resource: str, namespace: str | None) -> bool:
    """``kubectl auth can-i``; for a kind this cluster does not serve (the PodGroups of Volcano and
    scheduler-plugins), for which can-i cannot tell the group (it warns and asks about a core
    resource of that whole name), the SubjectAccessReview it would send, through kubectl."""
    name, _, sub = resource.partition("/")
    plural, _, group = name.partition(".")
    if name not in served(installed):
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": who, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}",
                                                   "system:authenticated"],
                           "resourceAttributes": {"verb": verb, "group": group, "resource": plural,
                                                  "subresource": sub, "namespace": namespace or ""}}}
        done = installed.kubectl("create", "-f", "-", "-o", "jsonpath={.status.allowed}", input=yaml.safe_dump(review))
        return done.stdout.strip() == "true"
    where = ["-n", namespace] if namespace else ["--all-namespaces"]
    subresource = [f"--subresource={sub}"] if sub else []
    done = installed.kubectl("auth", "can-i", verb, name, *subresource, f"--as={who}", *where, check=False)
    answer = done.stdout.strip()
    assert answer in ("yes", "no") and not done.stderr.strip(), done.stderr
    return answer == "yes"


_served: set[str] = set()


def served(installed: Installed) -> set[str]:
    """``plural.group`` of every resource the API server serves (``kubectl api-resources``)."""
    if not _served:
        for line in installed.kubectl("api-resources", "--no-headers", "-o", "name").stdout.split():
            _served.add(line)
    return _served


def resource_arg(group: str, resource: str) -> str:
    name, _, sub = resource.partition("/")
    return f"{name}.{group}/{sub}" if group and sub else f"{name}.{group}" if group else resource


FORBIDDEN: dict[str, list[tuple[str, str, str | None]]] = {
    "watcher": [("create", "pods", "default"), ("delete", "pods", "default"), ("get", "secrets", "default"),
                ("list", "secrets", None), ("watch", "secrets", "default"),
                ("update", "pytorchjobs.kubeflow.org/status", "default"), ("patch", "pytorchjobs.kubeflow.org", "default"),
                ("create", "leases.coordination.k8s.io", "default"), ("update", "leases.coordination.k8s.io", "default"),
                ("delete", "leases.coordination.k8s.io", NAMESPACE), ("create", "events", "default")],
    "reconciler": [("delete", "namespaces", None), ("list", "secrets", None), ("list", "secrets", "default"),
                   ("watch", "secrets", "default"), ("delete", "secrets", "default"),
                   ("update", "pytorchjobs.kubeflow.org/status", "default"), ("update", "pytorchjobs.kubeflow.org", "default"),
                   ("create", "pytorchjobs.kubeflow.org", "default"), ("update", "pods", "default"),
                   ("patch", "pods", "default"), ("deletecollection", "pods", "default"), ("get", "nodes", None),
                   ("create", "clusterroles.rbac.authorization.k8s.io", None),
                   ("escalate", "roles.rbac.authorization.k8s.io", "default"),
                   ("bind", "roles.rbac.authorization.k8s.io", "default"),
                   ("delete", "customresourcedefinitions.apiextensions.k8s.io", None),
                   ("create", "leases.coordination.k8s.io", NAMESPACE), ("delete", "trainingjobs.kai.alibabacloud.com", "default")],
    "status": [("create", "pods", "default"), ("delete", "pods", "default"), ("list", "secrets", "default"),
               ("patch", "pytorchjobs.kubeflow.org", "default"), ("update", "pytorchjobs.kubeflow.org", "default"),
               ("update", "trainingjobs.kai.alibabacloud.com/status", "default"), ("watch", "pods", "default")],
    "webhook": [("get", "pods", "default"), ("list", "pytorchjobs.kubeflow.org", "default"), ("create", "events", "default")],
}


@pytest.mark.parametrize("service", [*SERVICES, "webhook"])
def test_kubectl_auth_can_i_says_yes_to_each_call_and_no_beyond(installed: Installed, service: str) -> None:
    for scope, group, resource, verb in sorted(needed(service)) if service != "webhook" else []:
        namespace = NAMESPACE if scope != "cluster" else None
        assert can_i(installed, account(service), verb, resource_arg(group, resource), namespace), \
            f"kto-{service} cannot {verb} {resource_arg(group, resource)}"
    for verb, resource, namespace in FORBIDDEN[service]:
        assert not can_i(installed, account(service), verb, resource, namespace), \
            f"kto-{service} may {verb} {resource} in {namespace or 'every namespace'}"


# -- the services, as the member's identities ------------------------------------------------


@contextlib.asynccontextmanager
async def processes(specs: Iterable[tuple[str, list[str]]], kafka: bus_settings.KafkaSettings,
                    logs: pathlib.Path) -> AsyncIterator[list[probes.Service]]:
    """``kto <argv>`` per spec, each serving /metrics and the probes on a port of its own."""
    async with contextlib.AsyncExitStack() as stack:
        started = []
        for name, argv in specs:
            port = probes.free_port()
            started.append(await stack.enter_async_context(
                probes.service([*argv, "--metrics-port", str(port)], kafka, logs / f"{name}.log", port)))
        yield started


def sample_job(kind: str, name: str, namespace: str, replicas: dict[str, int]) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"sim.kto.dev/duration": "1s"}},
                "spec": {"containers": [{"name": kind.removesuffix("Job").lower(), "image": "busybox"}]}}
    field = jobs.KINDS[kind].REPLICA_FIELD_ALIAS
    return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace},
            "spec": {field: {rt: {"replicas": n, "restartPolicy": "Never", "template": template}
                             for rt, n in replicas.items()}}}


async def test_the_hub_services_acting_as_the_member_identities_run_jobs_with_nothing_refused(
    installed: Installed, real_kafka: bus_settings.KafkaSettings, tmp_path: pathlib.Path,
) -> None:
    """kubeconfigs.sh builds the hub's kubeconfigs from the member's token Secrets; the watcher,
    a reconciler and a status worker run on them (as processes, like the hub's pods) and take a
    PyTorchJob and an MPIJob (whose launcher Role the reconciler may create only by holding what it
    grants) to Succeeded. No request is answered 403, and each account's writes (the audit log)
    are among those computed from the code."""
    cluster = "east"
    script = DEPLOY / "overlays" / "multi-cluster" / "kubeconfigs.sh"
    env = {**os.environ, "KUBECONFIG": str(installed.cluster.kubeconfig), "PATH": f"{KUBECTL.parent}:{os.environ['PATH']}"}
    made = subprocess.run(["sh", str(script), cluster, tiers.CONTEXT, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == [f"{tmp_path}/kto-{s}.kubeconfig: context {cluster}, user {cluster}-kto-{s}"
                                        for s in SERVICES]
    kubeconfigs = {s: tmp_path / f"kto-{s}.kubeconfig" for s in SERVICES}
    kafka = await topics_of_this_test(real_kafka)
    namespace = f"t-deploy-{uuid.uuid4().hex[:8]}"
    installed.kubectl("create", "namespace", namespace)
    try:
        async with await clients.KubeClient.connect(installed.cluster.kubeconfig, tiers.CONTEXT) as admin:
            for _ in range(300):  # pods are admitted once the namespace's default ServiceAccount exists
                with contextlib.suppress(clients.ApiError):
                    await admin.get(resources.SERVICEACCOUNTS, namespace, "default")
                    break
                await asyncio.sleep(0.05)
            suffix = kafka.jobs_topic.rsplit(".", 1)[-1]
            specs = [
                ("watcher", ["watcher", "--cluster", cluster, "--kubeconfig", str(kubeconfigs["watcher"]),
                             "--context", cluster, "--namespace", namespace, "--lease-namespace", NAMESPACE,
                             "--lease-duration", "3"]),
                ("reconciler", ["reconciler", "--kubeconfig", str(kubeconfigs["reconciler"]),
                                "--group", f"deploy-reconciler-{suffix}"]),
                ("status", ["status-service", "--kubeconfig", str(kubeconfigs["status"]),
                            "--group", f"deploy-status-{suffix}"]),
            ]
            started = asyncio.get_running_loop().time()
            async with processes(specs, kafka, tmp_path) as running:
                for each in running:
                    await each.until("/readyz", 200, timeout=90)
                submitted = [sample_job("PyTorchJob", "deploy-pt", namespace, {"Master": 1, "Worker": 1}),
                             sample_job("MPIJob", "deploy-mpi", namespace, {"Launcher": 1, "Worker": 2})]
                for manifest in submitted:
                    await admin.create(resources.for_manifest(manifest), namespace, manifest)
                for manifest in submitted:
                    await succeeded(admin, manifest, running)
                roles, _ = await admin.list(resources.ROLES, namespace)
                assert [r["metadata"]["name"] for r in roles] == ["deploy-mpi-launcher"]
                for each in running:
                    _, text = await each.get("/metrics")
                    refused = [line for line in text.splitlines()
                               if line.startswith("rest_client_requests_total{") and 'code="403"' in line]
                    assert not refused, f"{each.log.stem}: {refused}"
        for service in SERVICES:
            writes = [w for w in kube.read_audit_log(installed.cluster.state_dir / "audit.log", account(service))
                      if w["time"] >= started - 5]
            assert not [w for w in writes if w["code"] == 403], f"kto-{service} refused: {writes}"
            made_writes = {(w["resource"], w["subresource"], w["verb"]) for w in writes}
            assert EXERCISED[service] <= made_writes, f"kto-{service} wrote only {made_writes}"
            allowed = {_audit_form(group, resource, verb) for _, group, resource, verb in needed(service)}
            assert made_writes <= allowed, f"kto-{service} wrote beyond the computed set: {made_writes - allowed}"
    finally:
        installed.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


EXERCISED: dict[str, set[tuple[str, str | None, str]]] = {
    "watcher": {("leases.coordination.k8s.io", None, "update")},
    "reconciler": {(resource, None, "create") for resource in (
        "pods", "services", "configmaps", "serviceaccounts", "roles.rbac.authorization.k8s.io",
        "rolebindings.rbac.authorization.k8s.io", "events")},
    "status": {("pytorchjobs.kubeflow.org", "status", "update"), ("mpijobs.kubeflow.org", "status", "update")},
}
"""Writes the two jobs cannot finish without: the run covered them (the MPIJob's launcher Role among them)."""


def _audit_form(group: str, resource: str, verb: str) -> tuple[str, str | None, str]:
    name, _, sub = resource.partition("/")
    return (f"{name}.{group}" if group else name, sub or None, verb)


async def succeeded(admin: clients.KubeClient, manifest: dict[str, Any], running: list[probes.Service],
                    timeout: float = 120.0) -> None:
    rt = resources.for_manifest(manifest)
    meta = manifest["metadata"]
    deadline = asyncio.get_running_loop().time() + timeout
    status: dict[str, Any] = {}
    while asyncio.get_running_loop().time() < deadline:
        for each in running:
            if each.process.poll() is not None:
                raise AssertionError(f"{each.log.stem} exited:\n{each.tail()}")
        status = (await admin.get(rt, meta["namespace"], meta["name"])).get("status") or {}
        if any(c["type"] == "Succeeded" and c["status"] == "True" for c in status.get("conditions") or []):
            return
        await asyncio.sleep(0.3)
    logs = "\n\n".join(f"{each.log.stem}:\n{each.tail()}" for each in running)
    raise AssertionError(f"{manifest['kind']} {meta['name']} never Succeeded: {status}\n{logs}")



# -- the webhook's certificate, by hand, as docs/deploy.md says -------------------------------


def doc_block(marker: str) -> str:
    """The fenced ``sh`` block of docs/deploy.md that contains ``marker``."""
    blocks: list[str] = re.findall(r"```sh\n(.*?)```", (ROOT / "docs" / "deploy.md").read_text(), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"{len(found)} blocks of docs/deploy.md hold {marker!r}"
    return found[0]


def https_get(port: int, path: str, ca: pathlib.Path, host: str) -> str:
    """GET over TLS to 127.0.0.1:port, verifying the certificate against ``ca`` for ``host``."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
    return answer.decode(errors="replace")


def test_the_documented_certificate_steps_make_a_certificate_kto_webhook_serves_and_the_api_server_trusts(
    installed: Installed, tmp_path: pathlib.Path,
) -> None:
    """docs/deploy.md's openssl, Secret and webhook-ca-bundle.sh steps, run as written: the
    configurations (applied here matching no namespace, so no other test's jobs are sent to a
    webhook that is not running) get the CA on every webhook, and ``kto webhook`` serves the
    certificate, valid for the Service's name under that CA."""
    configurations = [o for o in objects("single-cluster") if o["kind"].endswith("WebhookConfiguration")]
    for configuration in configurations:
        for hook in configuration["webhooks"]:
            hook["namespaceSelector"] = {"matchLabels": {"kto.dev/no-namespace-has-this": "true"}}
    installed.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(configurations))
    (tmp_path / "deploy").symlink_to(DEPLOY)
    env = {**os.environ, "KUBECONFIG": str(installed.cluster.kubeconfig),
           "PATH": f"{KUBECTL.parent}:{os.environ['PATH']}"}
    try:
        done = subprocess.run(["bash", "-euc", doc_block("openssl req -x509")], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "secret/kto-webhook-tls created",
            "validatingwebhookconfiguration.admissionregistration.k8s.io/kto-validating-webhook-configuration patched",
            "mutatingwebhookconfiguration.admissionregistration.k8s.io/kto-mutating-webhook-configuration patched",
        ], done.stdout
        bundle = base64_of(tmp_path / "ca.crt")
        for configuration in configurations:
            kind = configuration["kind"].lower()
            got = installed.kubectl("get", kind, configuration["metadata"]["name"], "-o",
                                    "jsonpath={range .webhooks[*]}{.clientConfig.caBundle}{\"\\n\"}{end}").stdout
            assert got.split() == [bundle] * len(configuration["webhooks"])
        port = probes.free_port()
        with (tmp_path / "webhook.log").open("wb") as log:
            webhook = subprocess.Popen(
                [sys.executable, "-m", "kto", "webhook", "--tls-cert-file", "tls.crt", "--tls-private-key-file",
                 "tls.key", "--port", str(port)], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            answer = ""
            for _ in range(100):
                with contextlib.suppress(OSError):
                    answer = https_get(port, "/readyz", tmp_path / "ca.crt", "kto-webhook.kto-system.svc")
                    break
                assert webhook.poll() is None, (tmp_path / "webhook.log").read_text()
                time.sleep(0.2)
            assert answer.startswith("HTTP/1.1 200") and answer.endswith("ok"), answer
        finally:
            webhook.terminate()
            webhook.wait(30)
    finally:
        for configuration in configurations:
            installed.kubectl("delete", configuration["kind"].lower(), configuration["metadata"]["name"], check=False)
        installed.kubectl("-n", NAMESPACE, "delete", "secret", "kto-webhook-tls", check=False)


def base64_of(path: pathlib.Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()
