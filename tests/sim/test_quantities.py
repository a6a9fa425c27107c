"""Kubernetes quantities parse into exact numbers; resource lists sum and take maxima."""

from __future__ import annotations

from fractions import Fraction

import pytest

from sim import quantities


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("100m", Fraction(1, 10), id="millicores"),
        pytest.param("2", Fraction(2), id="whole-number"),
        pytest.param("1.5", Fraction(3, 2), id="decimal-fraction"),
        pytest.param("0.1", Fraction(1, 10), id="exact-tenth"),
        pytest.param("512Mi", Fraction(512 * 2**20), id="mebibytes"),
        pytest.param("1Gi", Fraction(2**30), id="gibibyte"),
        pytest.param("1Ki", Fraction(1024), id="kibibyte"),
        pytest.param("5G", Fraction(5 * 10**9), id="gigabytes"),
        pytest.param("1k", Fraction(1000), id="kilo"),
        pytest.param("1E", Fraction(10**18), id="exa-suffix-not-exponent"),
        pytest.param("1e3", Fraction(1000), id="exponent"),
        pytest.param("1E3", Fraction(1000), id="capital-exponent"),
        pytest.param("25e-2", Fraction(1, 4), id="negative-exponent"),
        pytest.param("250u", Fraction(1, 4000), id="micro"),
        pytest.param("1n", Fraction(1, 10**9), id="nano"),
        pytest.param("+3", Fraction(3), id="explicit-plus"),
        pytest.param(".5", Fraction(1, 2), id="leading-dot"),
        pytest.param("1.5Gi", Fraction(3 * 2**29), id="fractional-binary"),
        pytest.param(8, Fraction(8), id="json-integer-gpu-count"),
        pytest.param(0.5, Fraction(1, 2), id="json-float"),
    ],
)
def test_a_quantity_parses_exactly(text: str | int | float, expected: Fraction) -> None:
    assert quantities.parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("abc", id="letters"),
        pytest.param("1Gb", id="unknown-suffix"),
        pytest.param("1 Gi", id="space-inside"),
        pytest.param("1.2.3", id="two-dots"),
        pytest.param("Mi", id="suffix-only"),
        pytest.param("1ki", id="lowercase-binary"),
    ],
)
def test_a_malformed_quantity_is_a_value_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text).replace("\\", "\\\\").replace(".", r"\.")):
        quantities.parse(text)


def test_a_bad_entry_of_a_resource_list_names_the_resource() -> None:
    with pytest.raises(ValueError, match="resource memory: invalid quantity '12GB'"):
        quantities.parse_list({"cpu": "1", "memory": "12GB"})


def test_resource_lists_sum_by_name() -> None:
    total = quantities.sum_lists(
        [{"cpu": "500m", "memory": "1Gi"}, {"cpu": "1.5", "nvidia.com/gpu": "2"}, None]
    )
    assert total == {"cpu": Fraction(2), "memory": Fraction(2**30), "nvidia.com/gpu": Fraction(2)}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param({"requests": {"cpu": "1"}}, {"cpu": Fraction(1)}, id="requests"),
        pytest.param({"limits": {"nvidia.com/gpu": "2"}}, {"nvidia.com/gpu": Fraction(2)}, id="limits-only"),
        pytest.param(
            {"requests": {"cpu": "1"}, "limits": {"cpu": "4", "memory": "1Gi"}},
            {"cpu": Fraction(1), "memory": Fraction(2**30)},
            id="request-wins-over-limit",
        ),
        pytest.param({}, {}, id="nothing"),
    ],
)
def test_a_container_requests_default_to_its_limits(resources: dict, expected: dict) -> None:
    assert quantities.container_requests({"name": "c", "resources": resources}) == expected


def test_a_pod_request_is_the_max_of_the_containers_sum_and_each_init_container() -> None:
    pod = {
        "spec": {
            "initContainers": [
                {"name": "fetch", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
                {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
            ],
            "overhead": {"cpu": "100m"},
        }
    }
    assert quantities.pod_requests(pod) == {
        "cpu": Fraction(31, 10),
        "memory": Fraction(2 * 2**30),
        "nvidia.com/gpu": Fraction(1),
    }


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(Fraction(2), "2", id="whole"),
        pytest.param(Fraction(1, 2), "500m", id="millis"),
        pytest.param(Fraction(1, 3), "0.3333333333333333", id="other"),
    ],
)
def test_a_quantity_formats_compactly(value: Fraction, text: str) -> None:
    assert quantities.format_quantity(value) == text
