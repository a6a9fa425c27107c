"""The simulated nodes are Ready, labelled and sized by the settings."""

from __future__ import annotations

from sim import objects, quantities
from sim import settings as sim_settings
from sim.node import nodes


def test_there_is_one_node_per_setting_named_in_order() -> None:
    made = nodes.make_nodes(sim_settings.SimSettings(nodes=3))
    assert [node["metadata"]["name"] for node in made] == ["sim-node-0", "sim-node-1", "sim-node-2"]


def test_a_node_offers_the_settings_capacity_as_allocatable() -> None:
    settings = sim_settings.SimSettings(nodes=1, gpus_per_node=4, cpu_per_node="16", memory_per_node="64Gi")
    (node,) = nodes.make_nodes(settings)
    status = node["status"]
    assert status["capacity"] == status["allocatable"]
    assert quantities.parse_list(status["allocatable"]) == {
        "cpu": 16,
        "memory": 64 * 2**30,
        "pods": 110,
        "nvidia.com/gpu": 4,
        "ephemeral-storage": 2**40,
    }


def test_a_node_is_labelled_with_its_hostname_and_instance_type() -> None:
    node = nodes.make_nodes(sim_settings.SimSettings(nodes=2))[1]
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "sim-node-1"
    assert labels["node.kubernetes.io/instance-type"] == "sim"


def test_a_node_is_ready_with_an_internal_ip() -> None:
    node = nodes.make_nodes(sim_settings.SimSettings(nodes=3))[2]
    assert objects.is_ready(node)
    assert objects.internal_ip(node) == "10.0.2.1"
    assert {"type": "Hostname", "address": "sim-node-2"} in node["status"]["addresses"]


def test_node_addresses_are_unique() -> None:
    made = nodes.make_nodes(sim_settings.SimSettings(nodes=600))
    assert len({objects.internal_ip(node) for node in made}) == 600


def test_a_node_name_gives_back_its_index() -> None:
    assert nodes.node_index("sim-node-12") == 12
    assert nodes.node_index("other") is None
