"""deploy/ for fleets (issue 23): kto beside Kueue in one cluster (deploy/overlays/kueue) and a
MultiKueue manager with its workers (deploy/overlays/multikueue/{manager,worker}).

Kueue itself is not in deploy/ (it is applied from its own release); the overlays hold kto, the
queues and MultiKueue's wiring, and the identity MultiKueue acts as in a worker. Each overlay builds
with kustomize and is accepted by the real kube-apiserver holding Kueue v0.17.0's CRDs; kto's own
services are granted in them exactly what they are granted without Kueue (Kueue admits a job
through the job's own ``suspend``); the worker's ``multikueue-sa`` may handle every kind kto
serves that MultiKueue dispatches and nothing else, which ``kubectl auth can-i`` confirms through
the kubeconfig that ``kubeconfig.sh`` builds as docs/fleets.md says.
"""

from __future__ import annotations

import base64
import os
import pathlib
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from realparts import caching
from realparts import kueue as real_kueue
from shared.api import kueue as kueue_api
from shared.kube import resources
from tests.deploy.test_deploy import (
    DEPLOY, KUBECTL, OVERLAYS, ROOT, SERVICES, Installed, built, installed, kubectl, objects, of_kind, rbac_of,
)
from tests.deploy import test_rbac as rbac
from tests.fixtures import tiers

__all__ = ["installed"]  # the fixture, shared with test_deploy.py

FLEET_OVERLAYS = ("kueue", "multikueue/manager", "multikueue/worker")
KUEUE_GROUP = kueue_api.GROUP
KUEUE_NAMESPACE = "kueue-system"
WORKERS = ("worker-1", "worker-2")
DISPATCHED_KINDS = (*(k for k, rt in resources.JOB_TYPES.items() if rt.group == "kubeflow.org"), "TrainJob", "JobSet")
"""The kinds kto serves that Kueue v0.17.0's MultiKueue dispatches (its adapters: the kubeflow.org
jobs, mpijob, trainjob, jobset); et-operator's TrainingJob has no Kueue integration."""


def kueue_objects(overlay: str) -> list[dict[str, Any]]:
    return [o for o in objects(overlay) if o["apiVersion"].startswith(f"{KUEUE_GROUP}/")]


def doc_block(marker: str) -> str:
    """The fenced ``sh`` block of docs/fleets.md that contains ``marker``."""
    blocks: list[str] = re.findall(r"```sh\n(.*?)```", (ROOT / "docs" / "fleets.md").read_text(), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"{len(found)} blocks of docs/fleets.md hold {marker!r}"
    return found[0]


# -- building -------------------------------------------------------------------------


@pytest.mark.parametrize(("overlay", "kinds"), [
    pytest.param("kueue", ["ClusterQueue", "LocalQueue", "ResourceFlavor"], id="kueue"),
    pytest.param("multikueue/manager", ["AdmissionCheck", "ClusterQueue", "LocalQueue", "MultiKueueCluster",
                                        "MultiKueueCluster", "MultiKueueConfig", "ResourceFlavor"], id="manager"),
    pytest.param("multikueue/worker", ["ClusterQueue", "LocalQueue", "ResourceFlavor"], id="worker"),
])
def test_each_fleet_overlay_builds_with_kueues_objects_and_none_of_kueues_installation(
    overlay: str, kinds: list[str],
) -> None:
    assert sorted(o["kind"] for o in kueue_objects(overlay)) == kinds
    installation = [o for o in objects(overlay) if o["metadata"]["name"].startswith("kueue-")
                    or (o["kind"] == "CustomResourceDefinition" and o["spec"]["group"] == KUEUE_GROUP)]
    assert not installation, [(o["kind"], o["metadata"]["name"]) for o in installation]


@pytest.mark.parametrize(("overlay", "alone"), [
    pytest.param("kueue", "single-cluster", id="kueue"),
    pytest.param("multikueue/manager", "multi-cluster/member", id="manager"),
    pytest.param("multikueue/worker", "multi-cluster/member", id="worker"),
])
@pytest.mark.parametrize("service", [*SERVICES, "webhook"])
def test_kto_under_kueue_is_granted_exactly_what_it_is_granted_without_it(
    overlay: str, alone: str, service: str,
) -> None:
    """Kueue suspends, resumes and injects node selectors through the job's own fields; kto reads
    nothing of Kueue's to run what Kueue admitted."""
    assert rbac_of(overlay, service) == rbac_of(alone, service)


def test_the_managers_cluster_queue_goes_through_the_multikueue_admission_check_to_both_workers() -> None:
    overlay = "multikueue/manager"
    check = of_kind(overlay, "AdmissionCheck")["multikueue"]
    assert check["spec"]["controllerName"] == kueue_api.MANAGED_BY_MULTIKUEUE
    parameters = check["spec"]["parameters"]
    assert (parameters["apiGroup"], parameters["kind"]) == (KUEUE_GROUP, "MultiKueueConfig")
    config = of_kind(overlay, "MultiKueueConfig")[parameters["name"]]
    clusters = of_kind(overlay, "MultiKueueCluster")
    assert config["spec"]["clusters"] == sorted(clusters) == list(WORKERS)
    for name, cluster in clusters.items():  # Secret <worker> of kueue-system, read by the manager's Kueue
        assert cluster["spec"]["clusterSource"]["kubeConfig"] == {"locationType": "Secret", "location": name}
    queue = of_kind(overlay, "ClusterQueue")["cluster-queue"]
    assert queue["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "multikueue"}]}


def quota(queue: dict[str, Any]) -> dict[str, str]:
    return {r["name"]: str(r["nominalQuota"]) for group in queue["spec"]["resourceGroups"]
            for flavor in group["flavors"] for r in flavor["resources"]}


def test_every_worker_holds_the_managers_queues_of_the_same_names_and_the_manager_their_quota_together() -> None:
    """MultiKueue creates a job's copy in the LocalQueue of the same namespace and name in a worker;
    the manager reserves a job's quota before it dispatches it, so its quota is the workers' sum."""
    manager, worker = kueue_objects("multikueue/manager"), kueue_objects("multikueue/worker")
    named = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in worker}
    assert {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in manager
            if o["kind"] in ("ResourceFlavor", "ClusterQueue", "LocalQueue")} == named
    assert ("LocalQueue", "default", "user-queue") in named
    ours, theirs = of_kind("multikueue/manager", "ClusterQueue"), of_kind("multikueue/worker", "ClusterQueue")
    for name, queue in ours.items():
        assert queue["spec"]["resourceGroups"][0]["coveredResources"] == \
            theirs[name]["spec"]["resourceGroups"][0]["coveredResources"]
        doubled = {r: str(2 * int(v)) if v.isdigit() else f"{2 * int(v[:-2])}Gi"
                   for r, v in quota(theirs[name]).items()}
        assert quota(queue) == doubled
        assert "admissionChecksStrategy" not in theirs[name]["spec"]


def multikueue_rules() -> set[tuple[str, str, str]]:
    everything = objects("multikueue/worker")
    binding = of_kind("multikueue/worker", "ClusterRoleBinding")["multikueue-worker"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "multikueue-sa", "namespace": KUEUE_NAMESPACE}]
    role = next(o for o in everything if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "multikueue-worker")
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_workers_multikueue_identity_may_run_every_dispatched_kind_and_its_workload_and_nothing_more() -> None:
    job_verbs = ("create", "delete", "get", "list", "watch")
    wanted = {(resources.JOB_TYPES[kind].group, resources.JOB_TYPES[kind].plural, verb)
              for kind in DISPATCHED_KINDS for verb in job_verbs}
    wanted |= {(resources.BATCH_JOBS.group, resources.BATCH_JOBS.plural, verb) for verb in job_verbs}
    wanted |= {(KUEUE_GROUP, "workloads", verb) for verb in (*job_verbs, "update")}
    wanted |= {(KUEUE_GROUP, "workloads/status", verb) for verb in ("patch", "update")}
    assert multikueue_rules() == wanted
    token = of_kind("multikueue/worker", "Secret")["multikueue-sa-token"]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "multikueue-sa"}


def test_every_verb_of_the_workers_multikueue_role_names_its_caller_in_kueues_source(tmp_path: pathlib.Path) -> None:
    """As test_rbac.py does for kto's Roles, with Kueue's module (the one realparts/kueue.py builds)."""
    try:
        source = caching.module_dir(tmp_path, real_kueue.MODULE, real_kueue.VERSION) / "pkg" / "controller"
    except caching.PartError as exc:
        tiers.unavailable("Kueue's module", str(exc))
    verbs = rbac.verb_comments(DEPLOY / "overlays" / "multikueue" / "worker" / "multikueue-sa.yaml")
    assert len(verbs) == 28
    for verb, comment in verbs:
        named = rbac.callers(comment)
        assert named and all(module.endswith(".go") and name for module, name in named), (verb, comment)
        for module, name in named:
            code = (source / module).read_text()
            assert re.search(rf"^func (\([^)]*\) )?{name}\(", code, re.M), f"{verb}: {module} defines no {name}"


# -- on the real API server -----------------------------------------------------------------


@pytest.fixture(scope="module")
def with_kueue_crds(installed: Installed) -> Iterator[Installed]:
    """The real cluster of test_deploy's ``installed`` with Kueue v0.17.0's CRDs (from the module
    realparts/kueue.py builds) and its namespace, which Kueue's release would make."""
    try:
        crds = sorted((real_kueue.ensure_build() / "crd").glob("*.yaml"))
    except caching.PartError as exc:
        tiers.unavailable("Kueue", str(exc))
    names = [f"crd/{yaml.safe_load(crd.read_text())['metadata']['name']}" for crd in crds]
    there = installed.kubectl("get", *names, check=False).returncode == 0
    for crd in crds:
        installed.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    installed.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    installed.kubectl("create", "namespace", KUEUE_NAMESPACE, check=False)
    yield installed
    if not there:  # later modules of this pytest worker see the cluster as it was: kto's watcher would watch Workloads
        installed.kubectl("delete", *names, "--wait=false", check=False)


@pytest.mark.parametrize("overlay", FLEET_OVERLAYS)
def test_every_fleet_overlay_is_accepted_by_the_real_api_server_holding_kueues_crds(
    with_kueue_crds: Installed, overlay: str,
) -> None:
    done = with_kueue_crds.kubectl("apply", "--dry-run=server", "-f", "-", input=built(overlay))
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(objects(overlay)), done.stdout
    assert all(line.endswith("(server dry run)") for line in lines), done.stdout
    warnings = [line for line in done.stderr.splitlines() if "missing the kubectl.kubernetes.io" not in line]
    assert not warnings, done.stderr


def test_kubeconfig_sh_builds_a_kubeconfig_multikueue_accepts_whose_identity_has_exactly_its_rbac(
    with_kueue_crds: Installed, tmp_path: pathlib.Path,
) -> None:
    """docs/fleets.md's kubeconfig step, run as written (its context renamed to the session's
    cluster): the CA and the token inline, no file path, TLS verified, as Kueue's
    validateKubeconfig requires; through it, ``kubectl auth can-i`` says yes to what MultiKueue
    calls and no to pods, Secrets and the jobs' status."""
    worker = [o for o in objects("multikueue/worker")
              if o["kind"] in ("ServiceAccount", "Secret", "ClusterRole", "ClusterRoleBinding")
              and (o["metadata"].get("namespace") == KUEUE_NAMESPACE or o["metadata"]["name"] == "multikueue-worker")]
    assert len(worker) == 4
    with_kueue_crds.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(worker))
    step = (doc_block("kubeconfig.sh")  # the workers and the manager: all the session's cluster
            .replace('kubeconfig.sh "$w" "$w"', f'kubeconfig.sh "$w" {tiers.CONTEXT}')
            .replace("--context manager", f"--context {tiers.CONTEXT}"))
    (tmp_path / "deploy").symlink_to(DEPLOY)
    env = {**os.environ, "KUBECONFIG": str(with_kueue_crds.cluster.kubeconfig),
           "PATH": f"{KUBECTL.parent}:{os.environ['PATH']}"}
    try:
        done = subprocess.run(["bash", "-euc", step], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [line for w in WORKERS for line in (
            f"./{w}.kubeconfig: context {w}, user multikueue-sa", f"secret/{w} created")], done.stdout
        assert not list(tmp_path.glob("*.kubeconfig"))
        stored = with_kueue_crds.kubectl("-n", KUEUE_NAMESPACE, "get", "secret", "worker-1", "-o",
                                         "jsonpath={.data.kubeconfig}").stdout
    finally:
        with_kueue_crds.kubectl("-n", KUEUE_NAMESPACE, "delete", "secret", *WORKERS, check=False)
    made = tmp_path / "stored.kubeconfig"
    made.write_bytes(base64.b64decode(stored))
    config = yaml.safe_load(made.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert set(cluster) == {"server", "certificate-authority-data"}
    assert base64.b64decode(cluster["certificate-authority-data"]).startswith(b"-----BEGIN CERTIFICATE-----")
    assert set(config["users"][0]["user"]) == {"token"}
    assert config["current-context"] == "worker-1"

    def can_i(verb: str, what: str, namespace: str = "default") -> bool:
        resource, _, subresource = what.partition("/")
        answer = kubectl("auth", "can-i", verb, resource, "-n", namespace,
                         *([f"--subresource={subresource}"] if subresource else []), kubeconfig=made, check=False)
        return answer.stdout.strip() == "yes"

    for kind in DISPATCHED_KINDS:
        rt = resources.JOB_TYPES[kind]
        for verb in ("create", "delete", "get", "list", "watch"):
            assert can_i(verb, f"{rt.plural}.{rt.group}"), (verb, kind)
        assert not can_i("update", f"{rt.plural}.{rt.group}"), kind
    for verb, what in (("create", "workloads.kueue.x-k8s.io"), ("patch", "workloads.kueue.x-k8s.io/status")):
        assert can_i(verb, what), (verb, what)
    for verb, what in (("create", "pods"), ("get", "secrets"), ("list", "secrets"),
                       ("create", "clusterqueues.kueue.x-k8s.io"), ("update", "pytorchjobs.kubeflow.org/status"),
                       ("get", "trainingjobs.kai.alibabacloud.com")):
        assert not can_i(verb, what), (verb, what)
    assert not can_i("get", "secrets", KUEUE_NAMESPACE)


def test_the_overlays_are_documented_with_the_commands_docs_fleets_md_gives() -> None:
    for overlay in (*FLEET_OVERLAYS, "multikueue/manager/queues"):
        comment = (DEPLOY / "overlays" / overlay / "kustomization.yaml").read_text()
        applied = re.findall(r"kubectl (?:--context \S+ )?apply -k deploy/overlays/\S+", comment)
        assert applied and all(line in (ROOT / "docs" / "fleets.md").read_text() for line in applied), overlay
    assert set(FLEET_OVERLAYS).isdisjoint(OVERLAYS)
