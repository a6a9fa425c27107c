"""kto's limits on a job (shared/api/limits.py), as validation reports them, and ``kto plan`` refusing them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.api import jobs, limits
from shared.core import validating
from tests.hostile import nested

ROOT = Path(__file__).resolve().parents[2]


def pytorch(worker_replicas: int = 1, annotations: dict[str, str] | None = None, **pod_spec: Any) -> dict[str, Any]:
    def replica(replicas: int) -> dict[str, Any]:
        return {"replicas": replicas, "template": {"spec": {"containers": [{"name": "pytorch", "image": "b"}], **pod_spec}}}

    meta: dict[str, Any] = {"name": "big"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(worker_replicas)}}}


def errors(document: dict[str, Any]) -> list[str]:
    return [str(e) for e in validating.validate(jobs.load(document)).errors]


def test_a_job_within_every_limit_passes() -> None:
    assert errors(pytorch(worker_replicas=limits.MAX_REPLICAS - 1, affinity=nested(10))) == []


def test_a_field_nested_300_levels_deep_is_refused_naming_the_field_and_the_limit() -> None:
    [error] = errors(pytorch(extra=nested(300)))
    assert error.startswith("spec.pytorchReplicaSpecs[Worker].template.spec.extra.a.a")
    assert "nested 306 levels deep; kto's limit is 64 levels" in error


def test_a_field_nested_100000_levels_deep_is_measured_without_recursion() -> None:
    [error] = errors(pytorch(extra=nested(100_000)))
    assert "nested 100006 levels deep" in error


def test_a_job_of_more_than_the_size_limit_names_the_field_that_holds_it() -> None:
    [error] = errors(pytorch(annotations={"example.com/blob": "x" * 1_200_000}))
    assert error.startswith("metadata.annotations[example.com/blob]: Invalid value: the job is ")
    assert f"kto's limit is {limits.MAX_OBJECT_BYTES} bytes" in error


@pytest.mark.parametrize("replicas", [pytest.param(1_000_000, id="a-million"), pytest.param(10**4300, id="4300-digits")])
def test_replicas_above_the_limit_are_refused_per_type_and_in_all(replicas: int) -> None:
    found = errors(pytorch(worker_replicas=replicas))
    assert found[0].startswith("spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: ")
    assert f"kto's limit is {limits.MAX_REPLICAS} replicas per replica type" in found[0]
    assert found[1].startswith("spec.pytorchReplicaSpecs: Invalid value: ")


def test_json_size_matches_compact_json_for_plain_values() -> None:
    value = {"a": [1, -20, True, None, False, 1.5, "x"], "b": {"c": "déjà"}, "": []}
    assert limits.json_size(value) == len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def test_kto_plan_refuses_a_job_over_the_replica_limit_with_the_field_and_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(pytorch(worker_replicas=1_000_000)))
    result = subprocess.run([sys.executable, "-m", "kto", "plan", str(path)], capture_output=True, text=True,
                            cwd=ROOT, timeout=60, check=False)
    assert result.returncode == 2 and result.stdout == ""
    assert "Traceback" not in result.stderr
    assert "spec.pytorchReplicaSpecs[Worker].replicas: Invalid value: 1000000: kto's limit is 10000" in result.stderr
