"""The MPI launcher's pieces every MPI family shares (spec §5.6, A.8–A.9, B.6).

In: what differs per upstream project — the hosts and their slots, the line
format of the hostfile, the container ``kubectl exec`` targets, the metadata
(names, labels, owner) of the launcher's RBAC objects and the extra rules its
Role carries. Out: the hostfile text, the ``kubexec.sh`` script and the
launcher's ServiceAccount, Role and RoleBinding as plain manifests, the same
bytes for kubeflow.org/v1 MPIJob (``frameworks.mpi``), MPIJob v2beta1
(``mpi_v2.planning``) and TrainingJob (``elastic.planning``). Pure.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

from shared.api import common

Manifest = common.Manifest

CONFIG_MOUNT_PATH = "/etc/mpi"
"""Where the launcher (and a v1 worker) mounts the ConfigMap's files."""
KUBECTL_MOUNT_PATH = "/opt/kube"
"""Where the launcher's init container puts kubectl for ``kubexec.sh``."""
HOSTFILE = "hostfile"
DISCOVER_HOSTS = "discover_hosts.sh"
KUBEXEC = "kubexec.sh"
MPI_CONFIG_VOLUME = "mpi-job-config"
"""The ConfigMap volume of both MPIJob versions (a TrainingJob names its own)."""
SCRIPT_MODE = 0o555
HOSTFILE_MODE = 0o444

SLOTS_LINE = "{} slots={}\n"
"""A hostfile line as OpenMPI (and DeepSpeed) reads it: ``<host> slots=<n>``."""
COLON_LINE = "{}:{}\n"
"""A hostfile line as Intel MPI, MPICH and Elastic Horovod read it: ``<host>:<n>``."""

EXEC_VERBS = ("create", "get")
"""``pods/exec`` verbs of the launcher Role: ``create`` as upstream (kubectl's SPDY exec is a
POST), and ``get``, which the WebSocket exec of kubectl 1.31 and later is a GET of (since
Kubernetes 1.35 the API server asks for both)."""

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"


def hostfile(hosts: Iterable[str], slots: int, line: str) -> str:
    """One ``line`` (:data:`SLOTS_LINE` or :data:`COLON_LINE`) per host, each ending in ``\\n``."""
    return "".join(line.format(host, slots) for host in hosts)


def kubexec_script(container: str | None) -> str:
    """``kubexec.sh``: the rsh agent that runs its arguments in the named pod through
    ``kubectl exec`` (into ``container`` when one is named, quoted), no trailing newline."""
    target = f" --container {shlex.quote(container)}" if container else ""
    return (f"#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n{KUBECTL_MOUNT_PATH}/kubectl exec ${{POD_NAME}}{target}"
            ' -- /bin/sh -c "$*"')


def config_item(key: str, mode: int) -> Manifest:
    """A ConfigMap volume item: file ``key`` of the ConfigMap at path ``key``, with ``mode``."""
    return {"key": key, "path": key, "mode": mode}


def service_account(metadata: Manifest) -> Manifest:
    """The launcher's ServiceAccount."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}


def role(metadata: Manifest, workers: Sequence[str], extra_rules: Sequence[Manifest] = ()) -> Manifest:
    """The launcher's Role: read pods; ``pods/exec`` only into ``workers``, each named, and no
    ``pods/exec`` rule at all when there are none (upstream's rule then names no pod, which
    grants exec into every pod of the namespace); then ``extra_rules``."""
    rules: list[Manifest] = [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]
    if workers:
        rules.append({"verbs": list(EXEC_VERBS), "apiGroups": [""], "resources": ["pods/exec"],
                      "resourceNames": list(workers)})
    rules += extra_rules
    return {"apiVersion": RBAC_API_VERSION, "kind": "Role", "metadata": metadata, "rules": rules}


def role_binding(metadata: Manifest, account: str, namespace: str) -> Manifest:
    """The RoleBinding of ServiceAccount ``account`` to the Role of the binding's own name."""
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "RoleBinding",
        "metadata": metadata,
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": metadata["name"]},
    }
