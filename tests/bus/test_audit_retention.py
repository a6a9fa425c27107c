"""Issue 12: on real Kafka, kto's topics are created as an audit log — kept for the retention
kto is configured with, deleted by time only, never compacted — and the setting is checked."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from shared.bus import topics
from shared.bus.settings import KafkaSettings, SettingsError, client_options
from tests.fixtures.broker import topics_of_this_test


async def _configs(settings: KafkaSettings, topic: str) -> dict[str, str]:
    """The topic's configs, once the controller's metadata has reached the broker asked."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        for _ in range(100):
            [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            [resource] = response.resources
            if resource[0] == 0:
                return {entry[0]: entry[1] for entry in resource[4]}
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    raise AssertionError(f"{topic}: describe_configs kept answering error {resource[0]}")


async def test_real_kafka_keeps_the_jobs_topic_as_an_audit_log(real_kafka: KafkaSettings) -> None:
    bus = await topics_of_this_test(dataclasses.replace(real_kafka, retention_ms=30 * 24 * 3600 * 1000))
    for topic in (bus.jobs_topic, bus.dlq_topic):
        configs = await _configs(bus, topic)
        assert configs["cleanup.policy"] == "delete", "compaction would keep one record per job"
        assert configs["retention.ms"] == str(30 * 24 * 3600 * 1000)
        assert configs["retention.bytes"] == "-1"
        assert configs["segment.ms"] == "86400000"
        assert configs["unclean.leader.election.enable"] == "false"


def test_the_retention_is_a_setting_with_a_floor() -> None:
    assert KafkaSettings.from_env({"KTO_KAFKA_RETENTION_MS": "-1"}).retention_ms == -1
    assert topics.topic_configs(KafkaSettings(replication_factor=3))["min.insync.replicas"] == "2"
    with pytest.raises(SettingsError, match="KTO_KAFKA_RETENTION_MS: must be -1 .for ever. or at least an hour"):
        KafkaSettings.from_env({"KTO_KAFKA_RETENTION_MS": "1000"})
    with pytest.raises(SettingsError, match="KTO_KAFKA_RETENTION_MS='soon': not an integer"):
        KafkaSettings.from_env({"KTO_KAFKA_RETENTION_MS": "soon"})
