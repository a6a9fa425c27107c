"""The fault grammar (faulting/faults.py): specs that parse, and bad ones named in one line."""

from __future__ import annotations

import dataclasses

import pytest

from faulting import faults


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", faults.FaultSpec(), id="empty"),
        pytest.param("latency=create:20ms,get:5ms", faults.FaultSpec(latency={"create": 0.02, "get": 0.005}),
                     id="latency per verb"),
        pytest.param("latency=*:1s", faults.FaultSpec(latency={"*": 1.0}), id="latency for every verb"),
        pytest.param("error_rate=0.05:code=503", faults.FaultSpec(error_rate=0.05, error_code=503), id="error rate"),
        pytest.param("throttle_rate=0.02:retry_after=3", faults.FaultSpec(throttle_rate=0.02, retry_after=3),
                     id="throttle"),
        pytest.param("conflict_rate=0.01; watch_drop=30s; gone_every=1m",
                     faults.FaultSpec(conflict_rate=0.01, watch_drop=30.0, gone_every=60.0), id="conflicts and watches"),
        pytest.param("gone_rate=1;resources=pods,leases.coordination.k8s.io;seed=7",
                     faults.FaultSpec(gone_rate=1.0, resources=frozenset({"pods", "leases.coordination.k8s.io"}), seed=7),
                     id="scoped and seeded"),
    ],
)
def test_fault_specs_parse(text: str, expected: faults.FaultSpec) -> None:
    assert dataclasses_equal(faults.parse(text), expected)


def dataclasses_equal(a: faults.FaultSpec, b: faults.FaultSpec) -> bool:
    return dataclasses.replace(a, text="") == dataclasses.replace(b, text="")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        pytest.param("latency=fetch:5ms", "fetch:5ms", id="unknown verb"),
        pytest.param("latency=get:5", "5", id="duration without unit"),
        pytest.param("error_rate=2", "2", id="rate above one"),
        pytest.param("error_rate=0.1:code=404", "404", id="error code not 5xx"),
        pytest.param("throttle_rate=0.1:wait=2", "wait=2", id="unknown option"),
        pytest.param("explode=1", "explode", id="unknown fault"),
        pytest.param("watch_drop", "watch_drop", id="no value"),
        pytest.param("seed=1;seed=2", "seed", id="clause twice"),
    ],
)
def test_bad_fault_specs_name_the_bad_part(text: str, named: str) -> None:
    with pytest.raises(faults.FaultSpecError) as caught:
        faults.parse(text)
    assert named in str(caught.value)
    assert "\n" not in str(caught.value)
