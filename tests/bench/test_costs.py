"""The per-record costs' arithmetic (bench/costs.py), without a cluster."""

from __future__ import annotations

import os

import pytest

from bench import costs


@pytest.mark.parametrize(("name", "service"), [
    pytest.param("watcher-kto-12", "watcher", id="a watcher"),
    pytest.param("sim-kto-3", "sim", id="a sim"),
    pytest.param("control-plane-kto-1", "control-plane", id="a real control plane"),
    pytest.param("reconciler-2", "reconciler", id="a reconciler"),
    pytest.param("status-1", "status", id="a status worker"),
    pytest.param("broker", "broker", id="the broker"),
])
def test_a_processes_service_is_its_name_without_cluster_or_number(name: str, service: str) -> None:
    assert costs.service_of(name, ["kto-1", "kto-3", "kto-12"]) == service


def entry(verb: str, resource: str, namespace: str | None = "default", subresource: str | None = None) -> dict[str, object]:
    return {"verb": verb, "resource": resource, "namespace": namespace, "subresource": subresource}


def test_the_benchmarks_own_requests_and_the_leases_are_not_kto_requests_per_job() -> None:
    logged = [
        entry("list", "pods"), entry("watch", "pods"), entry("list", "pytorchjobs.kubeflow.org"),
        entry("watch", "pytorchjobs.kubeflow.org"), entry("watch", "pytorchjobs.kubeflow.org"),  # the benchmark's
        entry("create", "pytorchjobs.kubeflow.org"),  # a submission
        entry("list", "pods", None), entry("watch", "pods", None),  # a watcher's, every namespace
        entry("list", "pods"),  # a worker's hydration
        entry("create", "pods"), entry("update", "pytorchjobs.kubeflow.org", subresource="status"),
        entry("get", "leases.coordination.k8s.io"), entry("update", "leases.coordination.k8s.io"),
    ]
    counted, leases = costs._kto_requests(logged, "default")
    assert leases == 2
    assert counted == {"list pods": 2, "watch pods": 1, "create pods": 1,
                       "update pytorchjobs.kubeflow.org/status": 1}


def test_resident_memory_is_read_from_proc() -> None:
    assert costs.rss_bytes(os.getpid()) > 1 << 20
    assert costs.rss_bytes(1 << 30) == 0
