"""Kueue v0.17.0's objects as it writes them, for the tests of what kto reads of them.

Each is the YAML ``kubectl get -o yaml`` shows of a PyTorchJob's Workload (kueue.x-k8s.io/v1beta2) at
one step of a run, in the shapes of apis/kueue/v1beta2/workload_types.go, with the messages Kueue's
code writes (pkg/workload: "Quota reserved in ClusterQueue %s", "The workload is admitted";
pkg/scheduler/flavorassigner: "couldn't assign flavors to pod set …"; MultiKueue's admission check:
"The workload got reservation on %q"; pkg/scheduler/preemption: "Preempted to accommodate a workload
…"); the jobs as MultiKueue leaves them (the manager's, and the worker's copy with the labels
``SyncJob`` of jobs/kubeflow/kubeflowjob adds). The Workload name is the one Kueue derives from the
manager's job (jobframework.GetWorkloadNameForOwnerWithGVK).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

JOB_UID = "6f1f0a57-1d4c-4c2e-9d7b-2a4a4b7f7c11"
WORKER_JOB_UID = "0b7e4d1c-93a2-4d0b-8f5e-5b1d3c9e2a40"
WORKLOAD = "pytorchjob-mnist-1869f"

MANAGER_JOB = yaml.safe_load(f"""
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: mnist
  namespace: team-a
  uid: {JOB_UID}
  resourceVersion: "5120"
  creationTimestamp: "2026-11-27T17:00:00Z"
  labels:
    kueue.x-k8s.io/queue-name: user-queue
spec:
  runPolicy:
    managedBy: kueue.x-k8s.io/multikueue
    suspend: true
  pytorchReplicaSpecs:
    Master: &replica
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
    Worker:
      <<: *replica
      replicas: 2
""")


def _worker_copy() -> dict[str, Any]:
    """The job as MultiKueue's ``SyncJob`` creates it in the worker: the manager's metadata (name,
    namespace, labels, annotations) and spec, its two labels added, ``managedBy`` cleared; then the
    worker's own uid, and unsuspended by the worker's Kueue."""
    found = copy.deepcopy(MANAGER_JOB)
    found["metadata"].update(uid=WORKER_JOB_UID, resourceVersion="731", creationTimestamp="2026-11-27T17:00:04Z")
    found["metadata"]["labels"].update({"kueue.x-k8s.io/prebuilt-workload-name": WORKLOAD,
                                        "kueue.x-k8s.io/multikueue-origin": "multikueue"})
    found["spec"]["runPolicy"] = {"suspend": False}
    return found


WORKER_COPY = _worker_copy()

_PENDING = yaml.safe_load(f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata:
  name: {WORKLOAD}
  namespace: team-a
  uid: 9a0c6a4e-5e0f-4a51-9a3c-7f3c2d1b0e01
  resourceVersion: "5131"
  generation: 1
  creationTimestamp: "2026-11-27T17:00:00Z"
  finalizers:
  - kueue.x-k8s.io/resource-in-use
  labels:
    kueue.x-k8s.io/job-uid: {JOB_UID}
  ownerReferences:
  - apiVersion: kubeflow.org/v1
    blockOwnerDeletion: true
    controller: true
    kind: PyTorchJob
    name: mnist
    uid: {JOB_UID}
  managedFields:
  - manager: kueue
    operation: Update
spec:
  active: true
  podSets:
  - count: 1
    name: master
    template:
      spec:
        containers:
        - name: pytorch
          image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
          env:
          - name: SECRET_ISH
            value: do-not-publish
          resources:
            requests:
              cpu: "1"
  - count: 2
    name: worker
    template:
      spec:
        containers:
        - name: pytorch
          image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
          resources:
            requests:
              cpu: "1"
  priority: 0
  queueName: user-queue
status:
  conditions:
  - lastTransitionTime: "2026-11-27T17:00:01Z"
    message: "couldn't assign flavors to pod set worker: insufficient unused quota for cpu in flavor default-flavor, 1 more needed"
    observedGeneration: 1
    reason: Pending
    status: "False"
    type: QuotaReserved
  resourceRequests:
  - name: master
    resources:
      cpu: "1"
  - name: worker
    resources:
      cpu: "2"
""")

_ADMISSION = yaml.safe_load("""
clusterQueue: cluster-queue
podSetAssignments:
- count: 1
  flavors:
    cpu: default-flavor
  name: master
  resourceUsage:
    cpu: "1"
- count: 2
  flavors:
    cpu: default-flavor
  name: worker
  resourceUsage:
    cpu: "2"
""")


def _condition(type_: str, status: str, reason: str, message: str, time: str) -> dict[str, Any]:
    return {"lastTransitionTime": time, "message": message, "observedGeneration": 1, "reason": reason,
            "status": status, "type": type_}


RESERVED = _condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cluster-queue",
                      "2026-11-27T17:00:03Z")
ADMITTED = _condition("Admitted", "True", "Admitted", "The workload is admitted", "2026-11-27T17:00:05Z")
FINISHED = _condition("Finished", "True", "Succeeded", "PyTorchJob team-a/mnist successfully completed.",
                      "2026-11-27T17:01:10Z")
CHECK_PENDING = {"lastTransitionTime": "2026-11-27T17:00:03Z", "message": "", "name": "multikueue",
                 "state": "Pending"}
CHECK_READY = {"lastTransitionTime": "2026-11-27T17:00:05Z", "message": 'The workload got reservation on "worker1"',
               "name": "multikueue", "state": "Ready"}


def workload(version: str, conditions: list[dict[str, Any]], *, admitted: bool = False,
             checks: list[dict[str, Any]] | None = None, cluster_name: str | None = None,
             worker_copy: bool = False) -> dict[str, Any]:
    """The Workload at one step: the pending one with ``conditions``, Kueue's admission when it holds quota,
    MultiKueue's admission check states and ``clusterName`` (the manager's), or as a worker has it
    (``worker_copy``: MultiKueue's origin label, owned by the job's copy that adopted it)."""
    found = copy.deepcopy(_PENDING)
    found["metadata"]["resourceVersion"] = version
    found["status"]["conditions"] = copy.deepcopy(conditions)
    if admitted:
        found["status"]["admission"] = copy.deepcopy(_ADMISSION)
    if checks is not None:
        found["status"]["admissionChecks"] = copy.deepcopy(checks)
    if cluster_name is not None:
        found["status"]["clusterName"] = cluster_name
    if worker_copy:
        meta = found["metadata"]
        meta["uid"] = "3c5e2f60-7b7a-4f0c-b8f6-0d2d9c8e4b77"
        meta["labels"] = {"kueue.x-k8s.io/job-uid": WORKER_JOB_UID, "kueue.x-k8s.io/multikueue-origin": "multikueue"}
        meta["ownerReferences"][0]["uid"] = WORKER_JOB_UID
    return found


def manager_run() -> list[dict[str, Any]]:
    """The manager's Workload through a MultiKueue run: queued, quota reserved (the check pending), dispatched
    to worker1 and admitted, finished (copied back from the worker)."""
    queued = _PENDING["status"]["conditions"]
    return [
        workload("5131", queued),
        workload("5140", [RESERVED], admitted=True, checks=[CHECK_PENDING]),
        workload("5152", [RESERVED, ADMITTED], admitted=True, checks=[CHECK_READY], cluster_name="worker1"),
        workload("5230", [RESERVED, ADMITTED, FINISHED], admitted=True, checks=[CHECK_READY], cluster_name="worker1"),
    ]


def worker_run() -> list[dict[str, Any]]:
    """The worker's Workload, first seen once the job's copy owns it (already admitted: before the manager's
    check turned Ready), then finished (before the manager copied that back)."""
    reserved = {**RESERVED, "lastTransitionTime": "2026-11-27T17:00:04Z"}
    admitted = {**ADMITTED, "lastTransitionTime": "2026-11-27T17:00:04Z"}
    finished = {**FINISHED, "lastTransitionTime": "2026-11-27T17:01:08Z"}
    return [
        workload("741", [reserved, admitted], admitted=True, worker_copy=True),
        workload("802", [reserved, admitted, finished], admitted=True, worker_copy=True),
    ]


PREEMPTION = ("Preempted to accommodate a workload (UID: 1a2b7c9d-0e3f-4a5b-8c6d-7e8f9a0b1c2d, JobUID: "
              "d2c1b0a9-8f7e-6d5c-4b3a-2f1e0d9c8b7a) due to prioritization in the ClusterQueue; preemptor path: "
              "/cluster-queue; preemptee path: /cluster-queue")
PREEMPTED_CONDITIONS = [
    _condition("QuotaReserved", "False", "Preempted", PREEMPTION, "2026-11-27T17:00:30Z"),
    _condition("Admitted", "False", "NoReservation", "The workload has no reservation", "2026-11-27T17:00:30Z"),
    _condition("Evicted", "True", "Preempted", PREEMPTION, "2026-11-27T17:00:30Z"),
    _condition("Preempted", "True", "InClusterQueue", PREEMPTION, "2026-11-27T17:00:30Z"),
    _condition("Requeued", "True", "Preempted", PREEMPTION, "2026-11-27T17:00:31Z"),
]
"""A Workload preempted in its ClusterQueue (scheduler/preemption, jobframework's requeue)."""
READMITTED_CONDITIONS = [
    _condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cluster-queue",
               "2026-11-27T17:00:50Z"),
    _condition("Admitted", "True", "Admitted", "The workload is admitted", "2026-11-27T17:00:50Z"),
    _condition("Evicted", "False", "QuotaReserved", f"Previously: {PREEMPTION}", "2026-11-27T17:00:50Z"),
    _condition("Preempted", "False", "QuotaReserved", f"Previously: {PREEMPTION}", "2026-11-27T17:00:50Z"),
    _condition("Requeued", "True", "Preempted", PREEMPTION, "2026-11-27T17:00:31Z"),
]
"""The same Workload admitted again (workload.SetQuotaReservation resets Evicted and Preempted)."""
