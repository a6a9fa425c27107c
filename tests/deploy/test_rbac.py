"""Least privilege, both ways kto can be installed: cluster-wide (deploy/overlays/single-cluster, the
multi-cluster members) and serving some namespaces only (deploy/overlays/namespaced).

From the manifests: every verb of every ClusterRole and Role names the code that calls it, and that
code exists (kto's, or for the Role of what Kubeflow Trainer publishes, the installed ``kubeflow``
SDK's); the namespaced overlay binds nothing cluster-wide, gives each service in each served
namespace exactly the rules it has cluster-wide, and serves (``KTO_NAMESPACES``) exactly the
namespaces it binds roles in.

On the real kube-apiserver (RBAC applied with kubectl, each overlay as kustomize builds it; the
namespaced accounts renamed ``kto-<service>-namespaced`` so that the two installs share the cluster):
``kubectl auth can-i --as=system:serviceaccount:kto-system:<account>`` answers a table of (verb,
resource, namespace) → yes/no per service and overlay, and ``--list`` in each namespace is exactly
what the code calls there. Then the watcher, a reconciler and a status worker run as the namespaced
accounts (tokens from the TokenRequest API) and take a PyTorchJob and an MPIJob of a served
namespace to Succeeded with no request refused."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import pathlib
import re
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml

from shared.bus import settings as bus_settings
from shared.kube import clients, resources
from tests.deploy import test_probes as probes
from tests.deploy.test_deploy import (
    DEPLOY, NAMESPACE, RBAC_KINDS, SERVICES, Installed, built, can_i, can_i_list, installed, needed, objects,
    rbac_of, sample_job, succeeded,
)
from tests.fixtures import tiers
from tests.fixtures.broker import topics_of_this_test

__all__ = ["installed"]  # the fixture, shared with test_deploy.py

ROOT = DEPLOY.parent
NAMESPACED = "namespaced"
SUFFIX = "-namespaced"
"""The namespaced install's accounts on the shared real cluster: ``kto-<service>-namespaced``."""


def served_namespaces() -> list[str]:
    """The namespaces the namespaced overlay binds roles in (kto-system holds only the Lease Role)."""
    return sorted({o["metadata"]["namespace"] for o in objects(NAMESPACED) if o["kind"] == "RoleBinding"} - {NAMESPACE})


# -- the manifests ------------------------------------------------------------------------------


_VERB_LINE = re.compile(r"^\s*- ([a-z]+)\s*(?:#\s*(.*))?$")


def rbac_sources() -> list[pathlib.Path]:
    """The files of kto's Roles. Kueue's identity in a MultiKueue worker (labelled
    ``app.kubernetes.io/name: kueue``, deploy/overlays/multikueue/worker) names Kueue's Go callers
    instead: tests/deploy/test_fleets.py checks those."""
    return sorted(p for p in DEPLOY.rglob("*.yaml")
                  if any(d.get("kind") in ("ClusterRole", "Role")
                         and (d["metadata"].get("labels") or {}).get("app.kubernetes.io/name") != "kueue"
                         for d in yaml.safe_load_all(p.read_text()) if d))


def verb_comments(path: pathlib.Path) -> list[tuple[str, str]]:
    """(verb, comment) of every verb of every rule of ``path``, written one verb a line."""
    found: list[tuple[str, str]] = []
    in_verbs = False
    for line in path.read_text().splitlines():
        assert not re.match(r"^\s*verbs:\s*\[", line), f"{path}: {line.strip()}: one verb a line, with its caller"
        if re.match(r"^\s*verbs:\s*$", line):
            in_verbs = True
            continue
        match = _VERB_LINE.match(line) if in_verbs else None
        if match is None:
            in_verbs = False
            continue
        found.append((match.group(1), match.group(2) or ""))
    return found


def source_of(module: str) -> pathlib.Path | None:
    """A caller's file: kto's own, else an installed client's on ``sys.path`` (the ``kubeflow`` SDK reads
    the ConfigMap deploy/base/cluster/trainer-public lets every user read)."""
    for base in (ROOT, *(pathlib.Path(p) for p in sys.path if p)):
        if (base / module).is_file():
            return base / module
    return None


@functools.cache
def defined(module: str) -> set[str]:
    """Qualified names of the functions and classes a module defines (``Class.method``)."""
    names: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(prefix + node.name)
                if isinstance(node, ast.ClassDef):
                    walk(node.body, f"{prefix}{node.name}.")

    path = source_of(module)
    assert path is not None, module
    walk(ast.parse(path.read_text()).body, "")
    return names


def callers(comment: str) -> list[tuple[str, str]]:
    """``path.py:Name, Other.name, path2.py:name`` → (module path, qualified name) pairs."""
    found: list[tuple[str, str]] = []
    module = ""
    for part in (p.strip() for p in comment.split(",")):
        if ":" in part:
            module, _, part = part.partition(":")
        found.append((module, part))
    return found


def test_every_verb_of_every_role_names_the_code_that_calls_it() -> None:
    sources = rbac_sources()
    assert {p.relative_to(DEPLOY).as_posix() for p in sources} >= {
        "base/cluster/accounts/accounts.yaml", "base/cluster/rbac/watcher-rbac.yaml",
        "base/cluster/rbac/reconciler-rbac.yaml", "base/cluster/rbac/status-rbac.yaml"}
    for path in sources:
        verbs = verb_comments(path)
        assert verbs, path
        for verb, comment in verbs:
            named = callers(comment)
            assert comment and all(m.endswith(".py") and n for m, n in named), \
                f"{path.relative_to(ROOT)}: {verb} names no caller (module.py:function)"
            for module, name in named:
                assert source_of(module) is not None, f"{path.relative_to(ROOT)}: {verb}: no {module}"
                assert name in defined(module), f"{path.relative_to(ROOT)}: {verb}: {module} defines no {name}"


def test_the_namespaced_overlay_binds_nothing_cluster_wide() -> None:
    kinds = {o["kind"] for o in objects(NAMESPACED)}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}, kinds
    for binding in (o for o in objects(NAMESPACED) if o["kind"] == "RoleBinding"):
        assert binding["roleRef"]["kind"] == "Role", binding["metadata"]


@pytest.mark.parametrize("service", SERVICES)
def test_in_each_served_namespace_a_service_may_do_exactly_what_it_may_cluster_wide(service: str) -> None:
    served = served_namespaces()
    assert len(served) >= 2
    wanted = {(scope, g, r, v) for scope, g, r, v in needed(service) if scope != "cluster"}
    wanted |= {(ns, g, r, v) for ns in served for scope, g, r, v in needed(service) if scope == "cluster"}
    granted = rbac_of(NAMESPACED, service)
    assert granted == wanted, (f"kto-{service}: missing {sorted(wanted - granted)}, "
                               f"beyond {sorted(granted - wanted)}")


def test_the_namespaced_services_serve_exactly_the_namespaces_they_hold_roles_in() -> None:
    config = next(o for o in objects(NAMESPACED) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kto-namespaces")
    assert sorted(config["data"]["KTO_NAMESPACES"].split(",")) == served_namespaces()
    for deployment in (o for o in objects(NAMESPACED) if o["kind"] == "Deployment"):
        sources = deployment["spec"]["template"]["spec"]["containers"][0].get("envFrom", [])
        reads = {"configMapRef": {"name": "kto-namespaces"}} in sources
        assert reads == (deployment["metadata"]["name"] != "kto-webhook"), deployment["metadata"]["name"]


# -- on the real API server -----------------------------------------------------------------------


def account(service: str, overlay: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:kto-{service}{SUFFIX if overlay == NAMESPACED else ''}"


def renamed(document: dict[str, Any]) -> dict[str, Any]:
    """A namespaced-overlay object with the accounts (and the objects of kto-system) renamed, so the
    two installs' identities, Lease Role and binding do not overwrite each other."""
    document = yaml.safe_load(yaml.safe_dump(document))
    meta = document["metadata"]
    if meta.get("namespace") == NAMESPACE and document["kind"] != "Namespace":
        meta["name"] += SUFFIX
        if document["kind"] == "RoleBinding":
            document["roleRef"]["name"] += SUFFIX
    for subject in document.get("subjects", []):
        subject["name"] += SUFFIX
    return document


@pytest.fixture(scope="module")
def both(installed: Installed) -> Iterator[Installed]:
    """The cluster-wide install (``installed``) and the namespaced one, its served namespaces made."""
    for namespace in served_namespaces():
        installed.kubectl("create", "namespace", namespace, check=False)
    applied = [renamed(o) for o in objects(NAMESPACED) if o["kind"] in RBAC_KINDS]
    installed.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(applied))
    yield installed


def test_the_namespaced_overlay_is_accepted_by_the_real_api_server(both: Installed) -> None:
    done = both.kubectl("apply", "--dry-run=server", "-f", "-", input=built(NAMESPACED))
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(objects(NAMESPACED)) and all(line.endswith("(server dry run)") for line in lines), \
        done.stdout
    warnings = [line for line in done.stderr.strip().splitlines() if not re.fullmatch(
        r"Warning: resource customresourcedefinitions/\S+ is missing the kubectl.kubernetes.io/"
        r"last-applied-configuration annotation .*", line)]
    assert not warnings, done.stderr


ANY = None
"""Every namespace at once (``--all-namespaces``): a cluster-wide grant."""

CAN_I: list[Any] = [
    # (overlay, service, verb, resource, namespace, allowed)
    *[pytest.param(overlay, *row, id=f"{overlay}-{row[0]}-{row[1]}-{row[2].replace('/', '.')}-{row[3] or 'all'}")
      for overlay, rows in {
          "single-cluster": [
              ("reconciler", "create", "pods", "default", True),
              ("reconciler", "create", "pods/exec", "default", True),
              ("reconciler", "get", "pods/exec", "default", True),
              ("reconciler", "create", "roles.rbac.authorization.k8s.io", "default", True),
              ("reconciler", "update", "roles.rbac.authorization.k8s.io", "default", True),
              ("reconciler", "delete", "roles.rbac.authorization.k8s.io", "default", False),
              ("reconciler", "get", "secrets", "default", True),
              ("reconciler", "create", "secrets", "default", True),
              ("reconciler", "list", "secrets", ANY, False),
              ("reconciler", "list", "secrets", "default", False),
              ("reconciler", "watch", "secrets", "default", False),
              ("reconciler", "delete", "secrets", "default", False),
              ("reconciler", "delete", "configmaps", "default", False),
              ("reconciler", "create", "clusterrolebindings.rbac.authorization.k8s.io", ANY, False),
              ("reconciler", "bind", "roles.rbac.authorization.k8s.io", "default", False),
              ("reconciler", "update", "pytorchjobs.kubeflow.org/status", "default", False),
              ("watcher", "list", "pods", ANY, True),
              ("watcher", "watch", "pytorchjobs.kubeflow.org", ANY, True),
              ("watcher", "update", "leases.coordination.k8s.io", NAMESPACE, True),
              ("watcher", "list", "secrets", ANY, False),
              ("watcher", "watch", "secrets", "default", False),
              ("watcher", "get", "secrets", "default", False),
              ("watcher", "create", "pods", "default", False),
              ("watcher", "create", "configmaps", "default", False),
              ("watcher", "create", "events", "default", False),
              ("watcher", "create", "pytorchjobs.kubeflow.org", "default", False),
              ("watcher", "create", "leases.coordination.k8s.io", "default", False),
              ("status", "update", "pytorchjobs.kubeflow.org/status", "default", True),
              ("status", "list", "pods", ANY, True),
              ("status", "create", "pods", "default", False),
              ("status", "list", "secrets", "default", False),
              ("status", "patch", "pytorchjobs.kubeflow.org", "default", False),
              ("webhook", "get", "pods", "default", False),
              ("webhook", "list", "secrets", ANY, False),
              ("webhook", "create", "events", "default", False),
              ("webhook", "get", "clustertrainingruntimes.trainer.kubeflow.org", ANY, True),
              ("webhook", "get", "trainingruntimes.trainer.kubeflow.org", "default", True),
              ("webhook", "list", "trainingruntimes.trainer.kubeflow.org", "default", False),
          ],
          NAMESPACED: [
              ("reconciler", "create", "pods", "team-a", True),
              ("reconciler", "create", "pods/exec", "team-b", True),
              ("reconciler", "create", "roles.rbac.authorization.k8s.io", "team-a", True),
              ("reconciler", "get", "secrets", "team-a", True),
              ("reconciler", "create", "pods", "default", False),
              ("reconciler", "get", "secrets", "default", False),
              ("reconciler", "list", "pods", ANY, False),
              ("reconciler", "list", "secrets", "team-a", False),
              ("reconciler", "list", "secrets", ANY, False),
              ("reconciler", "create", "clusterrolebindings.rbac.authorization.k8s.io", ANY, False),
              ("reconciler", "create", "roles.rbac.authorization.k8s.io", "default", False),
              ("watcher", "list", "pods", "team-a", True),
              ("watcher", "watch", "pytorchjobs.kubeflow.org", "team-b", True),
              ("watcher", "update", "leases.coordination.k8s.io", NAMESPACE, True),
              ("watcher", "list", "pods", "default", False),
              ("watcher", "list", "pods", ANY, False),
              ("watcher", "list", "secrets", "team-a", False),
              ("watcher", "create", "pods", "team-a", False),
              ("watcher", "create", "leases.coordination.k8s.io", "team-a", False),
              ("status", "update", "pytorchjobs.kubeflow.org/status", "team-a", True),
              ("status", "list", "pods", "team-b", True),
              ("status", "update", "pytorchjobs.kubeflow.org/status", "default", False),
              ("status", "list", "pods", ANY, False),
              ("status", "create", "pods", "team-a", False),
              ("webhook", "get", "pods", "team-a", False),
              ("webhook", "get", "trainingruntimes.trainer.kubeflow.org", "team-a", False),
          ],
      }.items() for row in rows],
]


@pytest.mark.parametrize(("overlay", "service", "verb", "resource", "namespace", "allowed"), CAN_I)
def test_kubectl_auth_can_i_answers_the_table(
    both: Installed, overlay: str, service: str, verb: str, resource: str, namespace: str | None, allowed: bool,
) -> None:
    assert can_i(both, account(service, overlay), verb, resource, namespace) is allowed


@pytest.mark.parametrize("service", SERVICES)
def test_kubectl_auth_can_i_lists_in_each_namespace_exactly_what_the_namespaced_code_calls(
    both: Installed, service: str,
) -> None:
    everyone = can_i_list(both, f"system:serviceaccount:{NAMESPACE}:kto-nobody", "default")
    wanted = rbac_of(NAMESPACED, service)
    for namespace in [*served_namespaces(), NAMESPACE, "default"]:
        listed = can_i_list(both, account(service, NAMESPACED), namespace) - everyone
        expected = {(g, r, v) for scope, g, r, v in wanted if scope == namespace}
        assert listed == expected, (f"kto-{service}{SUFFIX} in {namespace}: missing {sorted(expected - listed)}, "
                                    f"beyond {sorted(listed - expected)}")


# -- the services, as the namespaced accounts --------------------------------------------------------


async def token_kubeconfig(admin: clients.KubeClient, kubeconfig: pathlib.Path, service: str,
                           directory: pathlib.Path) -> pathlib.Path:
    """A kubeconfig whose user is a token of ``kto-<service>-namespaced`` (TokenRequest API)."""
    path = resources.SERVICEACCOUNTS.path(NAMESPACE, f"kto-{service}{SUFFIX}", "token")
    answer = await admin.request("POST", path, body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                                     "spec": {"expirationSeconds": 3600}},
                                 route="serviceaccounts/token")
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == tiers.CONTEXT)
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])
    file = directory / f"kto-{service}.kubeconfig"
    file.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "served", "clusters": [cluster],
        "users": [{"name": service, "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": "served", "context": {"cluster": cluster["name"], "user": service}}]}))
    return file


@contextlib.asynccontextmanager
async def namespaced_services(kubeconfigs: dict[str, pathlib.Path], kafka: bus_settings.KafkaSettings,
                              namespace: str, logs: pathlib.Path) -> AsyncIterator[list[probes.Service]]:
    suffix = kafka.jobs_topic.rsplit(".", 1)[-1]
    specs = {
        "watcher": ["watcher", "--cluster", "served", "--kubeconfig", str(kubeconfigs["watcher"]),
                    "--lease-namespace", NAMESPACE, "--lease-duration", "3"],
        "reconciler": ["reconciler", "--kubeconfig", str(kubeconfigs["reconciler"]), "--group", f"rbac-r-{suffix}"],
        "status": ["status-service", "--kubeconfig", str(kubeconfigs["status"]), "--group", f"rbac-s-{suffix}"],
    }
    async with contextlib.AsyncExitStack() as stack:
        started = []
        for name, argv in specs.items():
            port = probes.free_port()
            started.append(await stack.enter_async_context(probes.service(
                [*argv, "--metrics-port", str(port)], kafka, logs / f"{name}.log", port, KTO_NAMESPACES=namespace)))
        yield started


async def test_the_services_acting_as_the_namespaced_accounts_run_jobs_of_a_served_namespace(
    both: Installed, real_kafka: bus_settings.KafkaSettings, tmp_path: pathlib.Path,
) -> None:
    """Each service with a token of its namespaced account and ``KTO_NAMESPACES`` naming one served
    namespace: a PyTorchJob and an MPIJob (whose launcher Role the reconciler may create only by
    holding what it grants, there) Succeed, and no request is answered 403."""
    namespace = served_namespaces()[0]
    kafka = await topics_of_this_test(real_kafka)
    async with await clients.KubeClient.connect(both.cluster.kubeconfig, tiers.CONTEXT) as admin:
        kubeconfigs = {s: await token_kubeconfig(admin, both.cluster.kubeconfig, s, tmp_path) for s in SERVICES}
        for _ in range(300):  # pods are admitted once the namespace's default ServiceAccount exists
            with contextlib.suppress(clients.ApiError):
                await admin.get(resources.SERVICEACCOUNTS, namespace, "default")
                break
            await asyncio.sleep(0.05)
        tag = uuid.uuid4().hex[:6]
        submitted = [sample_job("PyTorchJob", f"rbac-pt-{tag}", namespace, {"Master": 1, "Worker": 1}),
                     sample_job("MPIJob", f"rbac-mpi-{tag}", namespace, {"Launcher": 1, "Worker": 2})]
        try:
            async with namespaced_services(kubeconfigs, kafka, namespace, tmp_path) as running:
                for each in running:
                    await each.until("/readyz", 200, timeout=90)
                for manifest in submitted:
                    await admin.create(resources.for_manifest(manifest), namespace, manifest)
                for manifest in submitted:
                    await succeeded(admin, manifest, running)
                role = await admin.get(resources.ROLES, namespace, f"rbac-mpi-{tag}-launcher")
                assert [r.get("resourceNames") for r in role["rules"] if "pods/exec" in r["resources"]] == \
                    [[f"rbac-mpi-{tag}-worker-0", f"rbac-mpi-{tag}-worker-1"]]
                for each in running:
                    _, text = await each.get("/metrics")
                    refused = [line for line in text.splitlines()
                               if line.startswith("rest_client_requests_total{") and 'code="403"' in line]
                    assert not refused, f"{each.log.stem}: {refused}"
        finally:
            for manifest in submitted:
                with contextlib.suppress(clients.ApiError):
                    await admin.delete(resources.for_manifest(manifest), namespace, manifest["metadata"]["name"])
