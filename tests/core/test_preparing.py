"""shared/core/preparing.py: the status worker's load → validate → default pipeline for a
kubeflow.org/v1 job, and the status it computes from it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from shared.api import jobs
from shared.core import conditions, outcomes, preparing

NOW = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def document(**spec: Any) -> dict[str, Any]:
    master = {"replicas": 1, "restartPolicy": "Never",
              "template": {"spec": {"containers": [{"name": "pytorch", "image": "img"}]}}}
    return {"apiVersion": jobs.API_VERSION, "kind": "PyTorchJob",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
            "spec": {"pytorchReplicaSpecs": {"Master": master}, **spec}}


def pod(phase: str, controller: str | None) -> dict[str, Any]:
    refs = [{"kind": "PyTorchJob", "name": "p", "uid": controller, "controller": True}] if controller else []
    labels = {"training.kubeflow.org/job-name": "p", "training.kubeflow.org/replica-type": "master",
              "training.kubeflow.org/replica-index": "0", "training.kubeflow.org/operator-name": "pytorchjob-controller"}
    return {"apiVersion": "v1", "kind": "Pod", "status": {"phase": phase},
            "metadata": {"name": "p-master-0", "namespace": "ns", "labels": labels, "ownerReferences": refs}}


def test_a_valid_job_is_prepared_defaulted_and_cached_by_its_version() -> None:
    prepared = preparing.prepare(document())
    assert prepared is not None and prepared.version == "7" and prepared.invalid is None
    assert prepared.defaulted is not None and prepared.defaulted.run_policy.clean_pod_policy is not None


def test_a_job_with_a_wrongly_typed_field_is_prepared_as_failing_validation_naming_the_field() -> None:
    prepared = preparing.prepare(document(runPolicy={"backoffLimit": "three"}))
    assert prepared is not None and prepared.defaulted is None and prepared.invalid is not None
    reason, message = prepared.invalid
    assert reason == "PyTorchJobFailedValidation" and "backoffLimit" in message


def test_what_cannot_be_read_as_a_job_is_not_prepared() -> None:
    assert preparing.prepare({"apiVersion": jobs.API_VERSION, "kind": "Deployment", "metadata": {}}) is None
    assert preparing.status_of({"kind": "Deployment"}, [], NOW, unconfirmed=False) is None


def test_the_status_counts_only_the_pods_the_job_controls() -> None:
    computed = preparing.status_of(document(), [pod("Running", "u"), pod("Failed", "another")], NOW,
                                   unconfirmed=False)
    assert computed is not None
    _, outcome = computed
    assert outcome.status.replica_statuses["Master"].active == 1
    assert not (outcome.status.replica_statuses["Master"].failed or 0)
    assert conditions.is_true(outcome.status, conditions.RUNNING)


def test_a_recorded_verdict_counts_only_once_the_api_server_showed_it() -> None:
    verdict = outcomes.Verdict("PyTorchJobFailed", "Job p has failed because it has reached the specified backoff "
                                                   "limit", "backoff")
    failed = document()
    failed["metadata"]["annotations"] = {outcomes.FAILURE_ANNOTATION: outcomes.failure_annotation(verdict, NOW)}
    confirmed = preparing.status_of(failed, [pod("Running", "u")], NOW, unconfirmed=False)
    unconfirmed = preparing.status_of(failed, [pod("Running", "u")], NOW, unconfirmed=True)
    assert confirmed is not None and unconfirmed is not None
    assert conditions.is_true(confirmed[1].status, conditions.FAILED)
    assert not conditions.is_true(unconfirmed[1].status, conditions.FAILED)
    assert outcomes.status_detail(confirmed[1])["finished"] is True
